"""`memoryos eval locomo` with a local server given by its base URL alone (no API key), as the README
promises: the questions are answered and judged by that server, not skipped as "offline"."""

import json
from pathlib import Path

import pytest

from memoryos.cli.main import main
from memoryos.eval.stub_llm_server import StubLLMServer
from tests.support.fakes import HashEmbedder
from tests.unit.test_eval_cli import write_raw_sample

pytestmark = pytest.mark.integration


def test_a_base_url_without_a_key_answers_and_judges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = write_raw_sample(tmp_path / "locomo10.json")
    monkeypatch.setattr("memoryos.embedding.shared.shared_embedder", lambda config: HashEmbedder())
    monkeypatch.delenv("MEMORYOS_OPENAI_API_KEY", raising=False)
    with StubLLMServer("Marta", rules=[('"label"', '{"label": "CORRECT"}')]) as server:
        monkeypatch.setenv("MEMORYOS_OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("MEMORYOS_LLM_MODEL", "local-model")
        code = main(["eval", "locomo", "--data", str(data), "--out", str(tmp_path / "out"), "--no-baselines"])
        models = {body.get("model") for body in server.requests}

    assert code == 0
    results = json.loads((tmp_path / "out" / "locomo_results.json").read_text())
    assert results["llm"]["configured"] is True and results["llm"]["base_url"] == server.base_url
    (ours,) = results["memoryos"]
    assert [record["prediction"] for record in ours["details"]] == ["Marta", "Marta"]
    assert ours["llm"]["judge"]["calls"] == 2
    assert models == {"local-model"}
    table = (tmp_path / "out" / "locomo_results.md").read_text()
    assert "LLM local-model, judge local-model." in table and "offline" not in table
