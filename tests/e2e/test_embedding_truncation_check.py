"""The truncation warning without a second tokenization of every batch (bundled MiniLM, CPU).

The embedder rules texts out by a character bound (`may_exceed`) and, for the rest, reads the width of
the batches sentence-transformers tokenized anyway (`WidthProbe`); only when a batch reached the limit
does it tokenize, and then only the texts the bound could not rule out.
"""

import logging
import random
import string

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from memoryos.config import MemoryConfig
from memoryos.embedding import create_embedder, truncation
from memoryos.embedding.model_location import resolve_model_location
from memoryos.embedding.sentence_transformers_backend import SentenceTransformerEmbedder

pytestmark = pytest.mark.e2e  # the real model

MAX_TOKENS = 256  # MiniLM's max_seq_length
AT_LIMIT = "a " * (MAX_TOKENS - 2)  # [CLS] + 254 × "a" + [SEP]: exactly at the limit, not over it
OVER_LIMIT = "remember this detail " * 100  # 300 words, over the limit


@pytest.fixture(scope="module")
def embedder() -> SentenceTransformerEmbedder:
    """Two texts per sentence-transformers batch, so a long text and short ones fall in different batches.
    On PyTorch: the width probe is the PyTorch path's (the torch-free encoder counts truncated texts from
    the tokenization it runs anyway)."""
    made = create_embedder(
        MemoryConfig(
            embedding_device="cpu", embedding_cache_size=0, embedding_batch_size=2, embedding_runtime="torch"
        )
    )
    assert isinstance(made, SentenceTransformerEmbedder)
    return made


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The texts of each tokenizer run of the truncation check."""
    calls: list[list[str]] = []
    original = SentenceTransformerEmbedder._count_truncated

    def spying(
        self: SentenceTransformerEmbedder, model: SentenceTransformer, texts: list[str], max_tokens: int
    ) -> int:
        calls.append(list(texts))
        return original(self, model, texts, max_tokens)

    monkeypatch.setattr(SentenceTransformerEmbedder, "_count_truncated", spying)
    return calls


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]


def test_short_texts_are_not_tokenized_a_second_time(embedder, checked, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="memoryos.embedding"):
        embedder.encode(["I adopted a puppy last week.", "ok", "What is your favourite book?"])
        embedder.encode(["Where did Melanie run?"], is_query=True)
    assert checked == [] and _warnings(caplog) == []


def test_long_but_not_truncated_pages_are_ruled_out_by_the_batch_width(embedder, checked, caplog) -> None:
    # 600+ characters (the bound cannot rule it out) but about 120 tokens: the batch stays narrow.
    page = "User: I went hiking with my family last weekend. Assistant: How was the trail? " * 8
    assert len(page) > MAX_TOKENS
    with caplog.at_level(logging.WARNING, logger="memoryos.embedding"):
        embedder.encode([page, page + "again", "short"])
    assert checked == [] and _warnings(caplog) == []


def test_a_truncated_text_still_warns_and_only_suspects_are_tokenized(embedder, checked, caplog) -> None:
    texts = ["short one", OVER_LIMIT, "short two", OVER_LIMIT + " twice", "short three"]
    with caplog.at_level(logging.WARNING, logger="memoryos.embedding"):
        vectors = embedder.encode(texts)
    assert checked == [[OVER_LIMIT, OVER_LIMIT + " twice"]]
    (warning,) = _warnings(caplog)
    assert "2 of 5 texts" in warning and "limit of 256 tokens" in warning and "remember" not in warning
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_a_text_exactly_at_the_limit_is_checked_but_not_reported(embedder, checked, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="memoryos.embedding"):
        embedder.encode([AT_LIMIT, "short"])
    assert checked == [[AT_LIMIT]] and _warnings(caplog) == []


def test_queries_on_onnx_and_torch_warn_too(checked, caplog) -> None:
    for runtime in ("onnx", "torch"):
        queries = create_embedder(
            MemoryConfig(embedding_device="cpu", embedding_cache_size=0, embedding_runtime=runtime)
        )
        assert isinstance(queries, SentenceTransformerEmbedder)
        with caplog.at_level(logging.WARNING, logger="memoryos.embedding"):
            queries.encode(["what did I say?", OVER_LIMIT], is_query=True)
        if queries.torch_free:  # counted from the tokenization the encoder runs anyway
            assert checked == []
        else:
            assert checked.pop() == [OVER_LIMIT]
        (warning,) = _warnings(caplog)
        assert "1 of 2 texts" in warning
        caplog.clear()


def test_vectors_are_the_models_own_normalized_rows(embedder) -> None:
    texts = ["short one", OVER_LIMIT, "User: hi Assistant: hello " * 20, AT_LIMIT]
    model = embedder._loaded_model()
    expected = model.encode(texts, batch_size=2, convert_to_numpy=True, show_progress_bar=False)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_array_equal(embedder.encode(texts), expected.astype(np.float32))


def test_the_character_bound_holds_for_the_minilm_tokenizer() -> None:
    """Adversarial ASCII (punctuation, digits, single letters, runs of spaces) never tokenizes to more than
    `len(text) + special tokens + MARKER_SLACK`; non-ASCII is always a suspect."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_location("all-MiniLM-L6-v2"))
    special = tokenizer.num_special_tokens_to_add(pair=False)
    assert special == 2
    rng = random.Random(0)
    alphabets = [string.punctuation, string.printable, "a ", "a.", "1,", string.ascii_letters + "  \t\n"]
    texts = ["", " ", "!", "[CLS]", "a" * 500, "x." * 300]
    texts += ["".join(rng.choice(chars) for _ in range(rng.randint(1, 400))) for chars in alphabets * 30]
    lengths = tokenizer(texts, truncation=False, return_length=True)["length"]
    for text, length in zip(texts, lengths, strict=True):
        assert length <= len(text) + special + truncation.MARKER_SLACK, text
        if length > MAX_TOKENS:
            assert truncation.may_exceed(text, MAX_TOKENS, special)
    assert not truncation.may_exceed("x" * (MAX_TOKENS - 3), MAX_TOKENS, special)
    assert truncation.may_exceed("x" * (MAX_TOKENS - 2), MAX_TOKENS, special)
    assert truncation.may_exceed("café", MAX_TOKENS, special)  # non-ASCII: no bound
