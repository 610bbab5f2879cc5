"""The whole pipeline on a real LoCoMo conversation: bundled MiniLM, offline LLM, evidence recall."""

from pathlib import Path

import pytest

from memoryos.config import MemoryConfig
from memoryos.eval.harness import evaluate_conversation
from memoryos.eval.locomo import load_conversations
from tests.support.locomo_data import SKIP_REASON, locomo_source

OWN_CONVERSATION = Path(__file__).resolve().parents[1] / "data" / "own_conversation.json"

pytestmark = pytest.mark.e2e


def pinned_config(data_dir: Path) -> MemoryConfig:
    """MemoryConfig also reads MEMORYOS_* variables: pin what this measures (the bundled MiniLM as shipped,
    the offline LLM) so a key or model name in the environment cannot change it."""
    return MemoryConfig(
        data_dir=data_dir,
        openai_api_key=None,
        embedding_model_name="all-MiniLM-L6-v2",
        embedding_model_kwargs={},
    )


def test_our_own_conversation_runs_the_whole_pipeline_everywhere(tmp_path: Path) -> None:
    """`tests/data/own_conversation.json`: 32 exchanges over four sessions and 24 questions with evidence,
    written for this repository, so a clone without LoCoMo still measures recall end to end. Measured:
    recall@1 0.50, @3 0.83, @5 0.92, @10 1.00."""
    (conversation,) = load_conversations(OWN_CONVERSATION)
    result = evaluate_conversation(conversation, tmp_path, pinned_config(tmp_path))
    assert (result.pairs, result.questions) == (32, 24)
    assert result.recall.overall[5] >= 0.85
    assert result.recall.overall[10] >= 0.95


@pytest.mark.locomo
@pytest.mark.skipif(locomo_source() is None, reason=SKIP_REASON)
def test_conv26_evidence_recall_beats_flat_cosine(tmp_path: Path) -> None:
    """Every pair of conv-26 ingested; recall@10 must clear 0.60 (reference 0.44, plain cosine 0.64), and
    recall@7 0.80: the fused flat search reaches 0.767, the engine with date bonus and name-free query
    embedding 0.826 (docs/retrieval.md), so a regression of either shows here."""
    source = locomo_source()
    assert source is not None
    (conversation,) = load_conversations(source, ["conv-26"])
    result = evaluate_conversation(conversation, tmp_path, pinned_config(tmp_path))

    assert result.pairs == 215
    assert result.questions == 197
    assert result.recall.overall[10] >= 0.60
    assert result.recall.overall[7] >= 0.80
    assert result.llm_calls > 0
    assert not any(tmp_path.rglob("memory.sqlite")), "the harness erases its scratch space"
