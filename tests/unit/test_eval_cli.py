"""`memoryos eval locomo` on a tiny file in the raw upstream layout, offline, with the hash embedder."""

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from memoryos.cli.main import main
from memoryos.config import MemoryConfig
from memoryos.embedding.cache import EmbeddingCache
from memoryos.eval.baselines import PLAIN_COSINE
from tests.support.fakes import HashEmbedder


def _turn(speaker: str, dia_id: str, text: str) -> dict[str, str]:
    return {"speaker": speaker, "dia_id": dia_id, "text": text}


def write_raw_sample(path: Path) -> Path:
    """One upstream-layout sample: a session opened by speaker_b and closed by speaker_a, an empty
    session with a date, and a category-5 question without answer or valid evidence."""
    sample = {
        "sample_id": "tiny-1",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "10:00 am on 1 May, 2023",
            "session_1": [
                _turn("Ana", "D1:1", "I started violin lessons with Marta on Tuesdays."),
                _turn("Ben", "D1:2", "Violin takes patience; Marta sounds kind."),
                _turn("Ana", "D1:3", "Traffic downtown was terrible."),
                _turn("Ben", "D1:4", "Rush hour bottlenecks again?"),
            ],
            "session_2_date_time": "4:30 pm on 8 May, 2023",
            "session_2": [
                _turn("Ben", "D2:1", "Did the weekend go well?"),
                _turn("Ana", "D2:2", "We bought a red kayak for the lake."),
                _turn("Ben", "D2:3", "A kayak on the lake sounds lovely."),
                _turn("Ana", "D2:4", "See you soon!"),
            ],
            "session_3_date_time": "9:00 am on 9 May, 2023",
            "session_3": [],
        },
        "qa": [
            {
                "question": "Who teaches the violin lessons?",
                "answer": "Marta",
                "evidence": ["D1:1"],
                "category": 4,
            },
            {
                "question": "What did they buy for the lake?",
                "answer": "a red kayak",
                "evidence": ["D2:2"],
                "category": 1,
            },
            {
                "question": "What is Ben's favourite colour?",
                "adversarial_answer": "green",
                "evidence": ["D9:9"],
                "category": 5,
            },
        ],
    }
    path.write_text(json.dumps([sample]), encoding="utf-8")
    return path


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No LLM key from the environment, and the hash embedder instead of loading MiniLM."""
    for name in ("MEMORYOS_OPENAI_API_KEY", "MEMORYOS_OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("memoryos.embedding.shared.shared_embedder", lambda config: HashEmbedder())


class CachingHashEmbedder(HashEmbedder):
    """The hash embedder behind a text cache sized by `embedding_cache_size`, as the real embedder is;
    `model_queries` lists the query texts that reached the "model" (missed the cache)."""

    def __init__(self, config: MemoryConfig) -> None:
        super().__init__()
        self._cache = EmbeddingCache(config.embedding_cache_size)
        self.model_queries: list[str] = []

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        rows = []
        for text in texts:
            row = self._cache.get(is_query, text)
            if row is None:
                row = super().encode([text], is_query=is_query)[0]
                self._cache.put(is_query, text, row)
                if is_query:
                    self.model_queries.append(text)
            rows.append(row)
        return np.stack(rows) if rows else super().encode([])


def test_an_offline_run_writes_json_and_markdown(tmp_path: Path, offline: None) -> None:
    data = write_raw_sample(tmp_path / "locomo10.json")
    out = tmp_path / "out"

    assert main(["eval", "locomo", "--data", str(data), "--out", str(out)]) == 0

    results = json.loads((out / "locomo_results.json").read_text())
    assert results["conversations"] == ["tiny-1"] and results["ks"] == [1, 3, 5, 7, 10]
    assert results["llm"]["configured"] is False and results["embedding_model"] == "fake-hash-embedder"
    (ours,) = results["memoryos"]
    assert ours["pairs"] == 5  # (no message) and (no reply) pairs included
    assert ours["questions"] == 2 and ours["answered"] == 0 and ours["answers"] is None
    assert ours["recall"]["by_category"]["4"]["1"] == 1.0
    assert len(ours["details"]) == 2 and ours["details"][0]["retrieved_dia_ids"][0] == ["D1:1", "D1:2"]
    (cosine,) = results["baselines"]["plain_cosine"]
    assert cosine["recall"]["question_count"] == 2 and cosine["skipped"] is None
    (reference,) = results["baselines"]["reference_memoryos"]
    assert reference["recall"] is None and "--reference-python" in reference["skipped"]
    table = (out / "locomo_results.md").read_text()
    assert "| memoryos | all | 2 | 1.000 |" in table
    assert "| plain_cosine | 4 single-hop | 1 |" in table
    assert "| reference_memoryos | skipped: not requested" in table
    assert "offline (no LLM answers)" in table


def test_slicing_and_no_baselines(tmp_path: Path, offline: None) -> None:
    data = write_raw_sample(tmp_path / "locomo10.json")
    out = tmp_path / "out"
    args = ["eval", "locomo", "--data", str(data), "--out", str(out), "--sessions", "1", "--no-baselines"]

    assert main([*args, "--top-k", "3"]) == 0

    results = json.loads((out / "locomo_results.json").read_text())
    assert results["baselines"] == {} and results["ks"] == [1, 3]
    (ours,) = results["memoryos"]
    assert ours["pairs"] == 2 and ours["questions"] == 1


def test_an_unknown_conversation_is_an_error(
    tmp_path: Path, offline: None, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_raw_sample(tmp_path / "locomo10.json")

    code = main(["eval", "locomo", "--data", str(data), "--conversations", "conv-99", "--out", str(tmp_path)])

    assert code == 2
    assert "conv-99" in capsys.readouterr().err
    assert not (tmp_path / "locomo_results.json").exists()


def test_every_timed_question_is_a_real_encode_in_both_systems(
    tmp_path: Path, offline: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both systems share the run's embedder and plain cosine asks second: through the embedder's cache it
    was timed on the vector our engine had encoded for the same question (a lookup, ~0.01 ms) while ours
    included the encode. Each system's timed retrieval must encode its question itself."""
    made: list[CachingHashEmbedder] = []

    def caching_embedder(config: MemoryConfig) -> CachingHashEmbedder:
        made.append(CachingHashEmbedder(config))
        return made[-1]

    monkeypatch.setattr("memoryos.embedding.shared.shared_embedder", caching_embedder)
    data = write_raw_sample(tmp_path / "locomo10.json")

    assert main(["eval", "locomo", "--data", str(data), "--out", str(tmp_path / "out")]) == 0

    results = json.loads((tmp_path / "out" / "locomo_results.json").read_text())
    asked = ["Who teaches the violin lessons?", "What did they buy for the lake?"]
    (embedder,) = made
    assert sorted(embedder.model_queries) == sorted(asked * 2), (
        "one encode by our engine, one by plain cosine"
    )
    (cosine,) = results["baselines"][PLAIN_COSINE]
    assert cosine["retrieve_ms"]["count"] == len(asked)
    assert [record["question"] for record in results["memoryos"][0]["details"]] == asked
