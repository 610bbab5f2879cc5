"""`OpenAIAPIEmbedder`'s bounds, with the real `openai` client against a local embeddings server: texts
past the model's window (cut on the client, or cut after the server's 413), a reply naming another
model (refused, permanent for the spaces that meet it, answered 502 by the API), one deadline per call,
and requests sent concurrently up to a bound."""

import logging
from pathlib import Path
from typing import Any

import httpx
import huggingface_hub.constants
import numpy as np
import pytest

from memoryos import MemoryConfig, Memoryos
from memoryos.embedding import create_embedder
from memoryos.embedding.openai_api import MAX_CUTS, OpenAIAPIEmbedder
from memoryos.embedding.truncation import CHARS_PER_TOKEN
from memoryos.errors import EmbeddingServerError, EmbeddingServerModelError
from memoryos.llm.offline.backend import OfflineLLM
from services.api.settings import ApiSettings
from tests.support.api_server import running_api
from tests.support.embeddings_server import (
    SERVER_DIM,
    EmbeddingsReply,
    EmbeddingsServer,
    embeddings_server,
    server_vector,
    token_count,
    word_level_tokenizer,
)

__all__ = ["embeddings_server"]

MODEL = "test-embedding-model"
WINDOW = 128
"""The small window of the servers here, in their tokens (words + 2)."""
PAGE = " ".join(f"w{index:06d}" for index in range(5000)) + "."
"""40,000 characters, 5,002 of the server's tokens: far past `WINDOW`."""
LOG = "memoryos.embedding.openai_api"


def embedder(server: EmbeddingsServer, model: str = MODEL, **settings: Any) -> OpenAIAPIEmbedder:
    made = create_embedder(
        MemoryConfig(embedding_api_base_url=server.base_url, embedding_model_name=model, **settings)
    )
    assert isinstance(made, OpenAIAPIEmbedder)
    return made


def expected(text: str) -> np.ndarray:
    vector = np.array(server_vector(text, SERVER_DIM), dtype=np.float32)
    return vector / np.linalg.norm(vector)


def sent_texts(server: EmbeddingsServer) -> list[str]:
    return [text for request in server.requests for text in request.body["input"]]


@pytest.fixture
def windowed_server() -> Any:
    server = EmbeddingsServer(window_tokens=WINDOW)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def bare_413_server() -> Any:
    server = EmbeddingsServer(window_tokens=WINDOW, states_window=False)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_a_40k_page_refused_with_413_is_cut_to_the_window_the_server_states(
    windowed_server: EmbeddingsServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOG)
    assert len(PAGE) == 40_000
    remote = embedder(windowed_server)
    vector = remote.encode([PAGE, "a short text"])
    cut = PAGE[: (WINDOW - 2) * CHARS_PER_TOKEN]
    assert [len(request.body["input"][0]) for request in windowed_server.requests] == [40_000, len(cut)]
    np.testing.assert_allclose(vector[0], expected(cut), rtol=1e-5)
    np.testing.assert_allclose(vector[1], expected("a short text"), rtol=1e-5)
    # The window is kept: the next long text is cut before it is sent, and no 413 comes back.
    other = PAGE.replace("w", "v")
    remote.encode([other])
    assert windowed_server.requests[-1].body["input"] == [other[: len(cut)]]
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and "refused texts as too long (HTTP 413)" in warnings[0]
    assert "embedding_api_max_input_tokens" in warnings[0] and "--auto-truncate" in warnings[0]


def test_a_413_that_states_no_window_halves_the_texts_until_they_fit(
    bare_413_server: EmbeddingsServer,
) -> None:
    vector = embedder(bare_413_server).encode([PAGE])
    lengths = [len(request.body["input"][0]) for request in bare_413_server.requests]
    assert lengths == [40_000 >> halvings for halvings in range(len(lengths))]
    accepted = bare_413_server.requests[-1].body["input"][0]
    assert token_count(accepted) <= WINDOW < token_count(bare_413_server.requests[-2].body["input"][0])
    np.testing.assert_allclose(vector[0], expected(accepted), rtol=1e-5)


def test_a_refusal_that_cutting_does_not_end_fails_after_the_bounded_cuts(
    embeddings_server: EmbeddingsServer,
) -> None:
    """TEI answers 413 for too many texts as well: the cuts stop, and it fails as any refusal."""
    embeddings_server.script(*[EmbeddingsReply(status=413)] * (MAX_CUTS + 5))
    with pytest.raises(EmbeddingServerError, match=f"refused as too long, cut {MAX_CUTS} times"):
        embedder(embeddings_server).encode([PAGE])
    assert len(embeddings_server.requests) == MAX_CUTS + 1


def test_the_configured_window_cuts_before_sending(windowed_server: EmbeddingsServer) -> None:
    vector = embedder(windowed_server, embedding_api_max_input_tokens=WINDOW).encode([PAGE, "short"])
    cut = PAGE[: (WINDOW - 2) * CHARS_PER_TOKEN]
    assert [request.body["input"] for request in windowed_server.requests] == [[cut, "short"]]
    np.testing.assert_allclose(vector[0], expected(cut), rtol=1e-5)


def test_with_the_models_tokenizer_in_the_hub_cache_the_cut_fills_the_window_exactly(
    windowed_server: EmbeddingsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model's tokenizer.json, found in the Hugging Face cache (as the compose file's TEI shares it with
    the worker), cuts after the last token that fits: the whole window, where characters keep 3 per
    token."""
    model = "test-org/word-model"
    snapshot = tmp_path / "models--test-org--word-model" / "snapshots" / "0123abcd"
    word_level_tokenizer(snapshot, PAGE.split()[:1000])
    (tmp_path / "models--test-org--word-model" / "refs").mkdir()
    (tmp_path / "models--test-org--word-model" / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    remote = embedder(windowed_server, model, embedding_api_max_input_tokens=WINDOW)
    vector = remote.encode([PAGE])
    (sent,) = sent_texts(windowed_server)
    assert token_count(sent) == WINDOW and PAGE.startswith(sent)
    np.testing.assert_allclose(vector[0], expected(sent), rtol=1e-5)


def test_a_40k_page_is_embedded_and_found_through_a_server_that_answers_413_past_its_window(
    windowed_server: EmbeddingsServer, tmp_path: Path
) -> None:
    settings = MemoryConfig(
        embedding_api_base_url=windowed_server.base_url, faiss_use_gpu="never", max_text_chars=50_000
    )
    memory = Memoryos("alice", None, tmp_path, embedding_model_name=MODEL, config=settings, llm=OfflineLLM())
    try:
        memory.add_memory(
            "My sister Maria lives in Porto.", "Porto is lovely.", timestamp="2024-05-01 10:00:00"
        )
        memory.add_memory(PAGE, "That is a long list.", timestamp="2024-05-01 10:01:00")
        memory.flush()
        context = memory.retrieve("w000001 w000002 w000003", top_k=1)
        assert context.pages_without_vectors == 0
        assert [page.user_input for page in context.retrieved_pages] == [PAGE]
    finally:
        memory.close()
    page_texts = [text for text in sent_texts(windowed_server) if "w000000" in text]
    assert len(page_texts) == 2  # refused whole, then accepted cut to the window the refusal stated
    assert len(page_texts[0]) > 40_000 and token_count(page_texts[0]) > WINDOW >= token_count(page_texts[1])


def test_a_reply_naming_another_model_is_refused_with_one_error_line(
    embeddings_server: EmbeddingsServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOG)
    remote = embedder(embeddings_server)
    embeddings_server.script(*[EmbeddingsReply(model="other-model")] * 2)
    for _ in range(2):
        with pytest.raises(
            EmbeddingServerModelError,
            match=r"^embedding_model_name: the embeddings server answered with model 'other-model', not "
            f"'{MODEL}'",
        ):
            remote.encode(["same dimension, another model"])
    assert len(embeddings_server.requests) == 2  # refused, not retried
    errors = [record.getMessage() for record in caplog.records if record.levelno == logging.ERROR]
    assert len(errors) == 1 and "memoryos reindex --model other-model" in errors[0]
    assert remote.encode(["the right model again"]).shape == (1, SERVER_DIM)


def test_a_reply_naming_no_model_is_taken_with_one_warning(
    embeddings_server: EmbeddingsServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOG)
    embeddings_server.script(EmbeddingsReply(model=""), EmbeddingsReply(model=""))
    remote = embedder(embeddings_server)
    remote.encode(["one"])
    remote.encode(["two"])
    assert len(embeddings_server.requests) == 2
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert warnings == [
        f"the embeddings server's replies name no model: they cannot be checked against {MODEL}"
    ]


def test_a_space_stops_asking_a_server_that_answers_another_model(
    embeddings_server: EmbeddingsServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The batcher does not retry a space whose pages met another model: its readers get the error, its
    new pages stay pending and are not sent, and one ERROR line says why."""
    caplog.set_level(logging.ERROR, logger=LOG)
    settings = MemoryConfig(embedding_api_base_url=embeddings_server.base_url, faiss_use_gpu="never")
    memory = Memoryos("alice", None, tmp_path, embedding_model_name=MODEL, config=settings, llm=OfflineLLM())
    try:
        memory.add_memory("I have a cat named Miso.", "A lovely name.", timestamp="2024-05-01 10:00:00")
        memory.flush()
        embeddings_server.serve_model("swapped-model")
        memory.add_memory("I started learning the guitar.", "Patience!", timestamp="2024-05-01 10:01:00")
        with pytest.raises(EmbeddingServerModelError, match="'swapped-model', not 'test-embedding-model'"):
            memory.flush()
        memory.add_memory("My sister Maria lives in Porto.", "Lovely city.", timestamp="2024-05-01 10:02:00")
        with pytest.raises(EmbeddingServerModelError):
            memory.flush()
        assert len(memory.space.pending_page_ids(10)) == 2
    finally:
        memory.close()
    assert not any("Maria" in text for text in sent_texts(embeddings_server))
    assert sum("guitar" in text for text in sent_texts(embeddings_server)) == 1
    assert len([record for record in caplog.records if record.levelno == logging.ERROR]) == 1


def test_requests_are_sent_concurrently_and_vectors_come_back_in_order(
    embeddings_server: EmbeddingsServer,
) -> None:
    """Each request is answered only once 4 wait together: only concurrent sending gets an answer."""
    texts = [f"text number {index}" for index in range(16)]
    embeddings_server.script(*[EmbeddingsReply(together=4)] * 4)
    vectors = embedder(embeddings_server, embedding_api_batch_size=4, embedding_api_max_concurrency=4).encode(
        texts
    )
    np.testing.assert_allclose(vectors, np.stack([expected(text) for text in texts]), rtol=1e-5)
    assert embeddings_server.max_in_flight == 4


def test_no_more_requests_than_the_bound_are_in_flight(embeddings_server: EmbeddingsServer) -> None:
    texts = [f"text number {index}" for index in range(12)]
    embeddings_server.script(*[EmbeddingsReply(together=2)] * 6)
    vectors = embedder(embeddings_server, embedding_api_batch_size=2, embedding_api_max_concurrency=2).encode(
        texts
    )
    np.testing.assert_allclose(vectors, np.stack([expected(text) for text in texts]), rtol=1e-5)
    assert embeddings_server.max_in_flight == 2
    assert sorted(sent_texts(embeddings_server)) == sorted(texts)


def test_a_call_ends_at_its_deadline_whatever_the_timeout_and_retries(
    embeddings_server: EmbeddingsServer,
) -> None:
    embeddings_server.script(*[EmbeddingsReply(delay_s=30.0)] * 3)
    remote = embedder(
        embeddings_server,
        embedding_api_timeout_s=20,
        embedding_api_max_retries=5,
        embedding_api_deadline_s=0.5,
    )
    with pytest.raises(EmbeddingServerError, match=r"embedding_api_deadline_s=0.5 spent, after 0 retries"):
        remote.encode(["too slow"])
    assert len(embeddings_server.requests) == 1  # its one attempt ran out of the deadline, not of 20 s


def test_retries_stop_at_the_deadline(embeddings_server: EmbeddingsServer) -> None:
    """Each 503 asks for 200 ms: within a 1 s deadline at most 5 waits fit, far fewer than the retries."""
    embeddings_server.script(*[EmbeddingsReply(status=503, retry_after_ms=200)] * 100)
    remote = embedder(embeddings_server, embedding_api_max_retries=100, embedding_api_deadline_s=1.0)
    with pytest.raises(EmbeddingServerError, match=r"embedding_api_deadline_s=1 spent, after \d retries"):
        remote.encode(["never answered"])
    assert 1 <= len(embeddings_server.requests) <= 6


def test_the_api_answers_a_query_embedded_by_another_model_502_naming_both(
    embeddings_server: EmbeddingsServer, tmp_path: Path
) -> None:
    settings = MemoryConfig(
        embedding_api_base_url=embeddings_server.base_url,
        embedding_model_name=MODEL,
        data_dir=tmp_path,
        faiss_use_gpu="never",
    )
    with running_api(ApiSettings(), settings, llm=OfflineLLM()) as api:
        space = f"{api.url}/v1/users/alice/assistants/default_assistant_profile"
        turn = {"user_input": "My sister Maria lives in Porto.", "agent_response": "Lovely city."}
        assert httpx.post(f"{space}/memories", json=turn, timeout=30).status_code == 201
        assert httpx.post(f"{space}/retrieve", json={"query": "Maria?"}, timeout=30).status_code == 200
        embeddings_server.serve_model("swapped-model")
        refused = httpx.post(f"{space}/retrieve", json={"query": "Who lives in Porto?"}, timeout=30)
        assert (refused.status_code, refused.json()["error"]) == (502, "embedding_failed"), refused.text
        assert "'swapped-model', not 'test-embedding-model'" in refused.json()["message"]
