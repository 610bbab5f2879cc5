"""`OpenAIAPIEmbedder` with the real `openai` client against a local embeddings server: batching,
retries, timeouts, refused replies, the key, and a memory space embedded by the server end to end."""

import logging
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest

from memoryos import EmbeddingModelMismatchError, MemoryConfig, Memoryos
from memoryos.embedding import create_embedder
from memoryos.embedding.openai_api import OpenAIAPIEmbedder
from memoryos.embedding.shared import shared_embedder
from memoryos.errors import EmbeddingServerError
from memoryos.llm.offline.backend import OfflineLLM
from services.api.settings import ApiSettings
from tests.support.api_server import running_api
from tests.support.embeddings_server import (
    SERVER_DIM,
    EmbeddingsReply,
    EmbeddingsServer,
    embeddings_server,
    server_vector,
)
from tests.support.fakes import HashEmbedder

__all__ = ["embeddings_server"]

MODEL = "test-embedding-model"
KEY = "sk-embed-secret-7f3a"


def config(server: EmbeddingsServer, **settings: Any) -> MemoryConfig:
    return MemoryConfig(embedding_api_base_url=server.base_url, embedding_model_name=MODEL, **settings)


def embedder(server: EmbeddingsServer, **settings: Any) -> OpenAIAPIEmbedder:
    made = create_embedder(config(server, **settings))
    assert isinstance(made, OpenAIAPIEmbedder)
    return made


def expected(text: str) -> np.ndarray:
    vector = np.array(server_vector(text, SERVER_DIM), dtype=np.float32)
    return vector / np.linalg.norm(vector)


def sent_inputs(server: EmbeddingsServer) -> list[list[str]]:
    return [request.body["input"] for request in server.requests]


def test_texts_are_split_by_batch_size_and_come_back_as_unit_rows(
    embeddings_server: EmbeddingsServer,
) -> None:
    texts = [f"text number {i}" for i in range(7)]
    vectors = embedder(embeddings_server, embedding_api_batch_size=3, embedding_api_max_concurrency=1).encode(
        texts
    )
    assert sent_inputs(embeddings_server) == [texts[0:3], texts[3:6], texts[6:7]]
    assert {request.body["model"] for request in embeddings_server.requests} == {MODEL}
    assert vectors.dtype == np.float32 and vectors.shape == (7, SERVER_DIM)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(vectors, np.stack([expected(text) for text in texts]), rtol=1e-5)


def test_repeated_and_cached_texts_are_not_sent_again(embeddings_server: EmbeddingsServer) -> None:
    remote = embedder(embeddings_server)
    first = remote.encode(["a cat", "a dog", "a cat"])
    np.testing.assert_array_equal(first[0], first[2])
    again = remote.encode(["a dog", "a cat"])
    np.testing.assert_array_equal(again, first[[1, 0]])
    assert sent_inputs(embeddings_server) == [["a cat", "a dog"]]
    remote.forget_texts(["a cat"])
    remote.encode(["a cat", "a dog"])
    assert sent_inputs(embeddings_server)[1:] == [["a cat"]]


def test_queries_carry_the_query_prefix(embeddings_server: EmbeddingsServer) -> None:
    remote = embedder(embeddings_server, embedding_api_query_prefix="Query: ")
    remote.encode(["where is the cat"], is_query=True)
    remote.encode(["where is the cat"])
    assert sent_inputs(embeddings_server) == [["Query: where is the cat"], ["where is the cat"]]


def test_a_rate_limit_is_retried(embeddings_server: EmbeddingsServer) -> None:
    embeddings_server.script(EmbeddingsReply(status=429), EmbeddingsReply(status=503))
    vectors = embedder(embeddings_server, embedding_api_max_retries=2).encode(["after the limit"])
    np.testing.assert_allclose(vectors[0], expected("after the limit"), rtol=1e-5)
    assert len(embeddings_server.requests) == 3


def test_a_server_that_keeps_failing_raises_after_the_bounded_retries(
    embeddings_server: EmbeddingsServer,
) -> None:
    embeddings_server.script(*[EmbeddingsReply(status=500)] * 5)
    with pytest.raises(
        EmbeddingServerError, match=r"embedding_api_max_retries=2 times\): InternalServerError"
    ):
        embedder(embeddings_server, embedding_api_max_retries=2).encode(["never embedded"])
    assert len(embeddings_server.requests) == 3


def test_a_refused_request_is_not_retried(embeddings_server: EmbeddingsServer) -> None:
    embeddings_server.script(EmbeddingsReply(status=400))
    with pytest.raises(EmbeddingServerError, match="BadRequestError"):
        embedder(embeddings_server).encode(["over the server's limit"])
    assert len(embeddings_server.requests) == 1


def test_a_reply_slower_than_the_timeout_fails_without_waiting_for_it(
    embeddings_server: EmbeddingsServer,
) -> None:
    delay_s = 20.0
    embeddings_server.script(*[EmbeddingsReply(delay_s=delay_s)] * 2)
    remote = embedder(embeddings_server, embedding_api_timeout_s=0.3, embedding_api_max_retries=1)
    started = time.monotonic()
    with pytest.raises(EmbeddingServerError, match="APITimeoutError"):
        remote.encode(["too slow"])
    assert time.monotonic() - started < delay_s
    assert len(embeddings_server.requests) == 2


def test_a_dimension_other_than_the_configured_one_is_refused(embeddings_server: EmbeddingsServer) -> None:
    remote = embedder(embeddings_server, embedding_api_dim=SERVER_DIM + 8)
    assert remote.dim == SERVER_DIM + 8
    assert embeddings_server.requests == []  # a configured dimension needs no probe
    with pytest.raises(
        EmbeddingServerError, match=f"embedding_api_dim: configured {SERVER_DIM + 8}.* {SERVER_DIM}"
    ):
        remote.encode(["any text"])


def test_the_dimension_is_learned_once_and_a_change_is_refused(embeddings_server: EmbeddingsServer) -> None:
    remote = embedder(embeddings_server)
    assert remote.dim == SERVER_DIM
    assert len(embeddings_server.requests) == 1
    embeddings_server.script(EmbeddingsReply(dim=SERVER_DIM // 2))
    with pytest.raises(
        EmbeddingServerError, match=f"answered dimension {SERVER_DIM // 2} after {SERVER_DIM}"
    ):
        remote.encode(["another model now"])
    assert remote.encode(["the model is back"]).shape == (1, SERVER_DIM)


def test_a_reply_with_a_vector_missing_is_refused(embeddings_server: EmbeddingsServer) -> None:
    embeddings_server.script(EmbeddingsReply(drop_last=True))
    with pytest.raises(EmbeddingServerError, match="answered 1 vectors for 2 texts"):
        embedder(embeddings_server).encode(["one", "two"])


def test_the_key_is_sent_as_a_bearer_token_and_never_logged(
    embeddings_server: EmbeddingsServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    settings = config(embeddings_server, embedding_api_key=KEY, embedding_cache_size=0)
    shared_embedder(settings).encode(["the key travels"])
    embedder(embeddings_server).encode(["no key configured"])
    authorization = [request.headers["authorization"] for request in embeddings_server.requests]
    assert authorization == [f"Bearer {KEY}", "Bearer not-needed"]
    announced = f"embeddings server {urlsplit(embeddings_server.base_url).netloc}, model {MODEL}"
    assert any(r.levelno == logging.INFO and announced in r.getMessage() for r in caplog.records)
    assert KEY not in caplog.text
    assert KEY not in repr(settings) and KEY not in settings.model_dump_json()


def test_a_space_embedded_by_the_server_refuses_another_model(
    embeddings_server: EmbeddingsServer, tmp_path: Path
) -> None:
    def open_space(model: str, embedder: HashEmbedder | None = None) -> Memoryos:
        settings = MemoryConfig(
            embedding_api_base_url=embeddings_server.base_url, faiss_use_gpu="never", ingest_mode="inline"
        )
        return Memoryos(
            "alice",
            None,
            tmp_path,
            short_term_capacity=2,
            embedding_model_name=model,
            config=settings,
            embedder=embedder,
            llm=OfflineLLM(),
        )

    memory = open_space(MODEL)
    for minute, (user, agent) in enumerate(
        [
            ("I work as a nurse in Lyon.", "Nursing in Lyon must keep you busy."),
            ("My sister Maria lives in Porto.", "Porto is a beautiful city by the river."),
            ("I have a cat named Miso.", "Miso is a lovely name for a cat."),
            ("I started learning the guitar.", "Guitar takes patience."),
        ]
    ):
        memory.add_memory(user, agent, timestamp=f"2024-05-01 10:0{minute}:00")
    context = memory.retrieve("Where does my sister Maria live?", top_k=1)
    assert [page.user_input for page in context.retrieved_pages] == ["My sister Maria lives in Porto."]
    assert context.pages_without_vectors == 0
    stats = memory.get_memory_stats()
    assert (stats["embedding_model"], stats["embedding_dim"]) == (f"openai-api:{MODEL}", SERVER_DIM)
    assert any(
        "My sister Maria lives in Porto." in " ".join(inputs) for inputs in sent_inputs(embeddings_server)
    )
    memory.close()

    with pytest.raises(
        EmbeddingModelMismatchError,
        match=r"memoryos reindex --model other-model` \(with embedding_api_base_url set\)",
    ):
        open_space("other-model")
    with pytest.raises(EmbeddingModelMismatchError):  # the same name, served by a local model
        open_space(MODEL, HashEmbedder(name=MODEL, dim=SERVER_DIM))


def test_a_query_the_server_cannot_embed_is_answered_502_by_the_api(
    embeddings_server: EmbeddingsServer, tmp_path: Path
) -> None:
    """The API answers the embeddings server's failure as the spaces' error table says (502, its own code),
    not as an internal error, and serves again once the server does."""
    settings = config(
        embeddings_server, data_dir=tmp_path, embedding_api_max_retries=0, faiss_use_gpu="never"
    )
    with running_api(ApiSettings(), settings, llm=OfflineLLM()) as api:
        space = f"{api.url}/v1/users/alice/assistants/default_assistant_profile"
        turn = {"user_input": "My sister Maria lives in Porto.", "agent_response": "Lovely city."}
        assert httpx.post(f"{space}/memories", json=turn, timeout=30).status_code == 201
        first = httpx.post(f"{space}/retrieve", json={"query": "Where does Maria live?"}, timeout=30)
        assert first.status_code == 200, first.text
        embeddings_server.script(EmbeddingsReply(status=500))  # no retries: the query's one request
        failed = httpx.post(f"{space}/retrieve", json={"query": "Who lives in Porto?"}, timeout=30)
        assert (failed.status_code, failed.json()["error"]) == (502, "embedding_failed"), failed.text
        assert failed.json()["message"] == "the embeddings server failed after its retries"
        again = httpx.post(f"{space}/retrieve", json={"query": "Which city is Maria in?"}, timeout=30)
        assert again.status_code == 200, again.text
