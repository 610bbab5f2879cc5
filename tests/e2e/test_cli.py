"""The `memoryos` command, in process (real MiniLM, offline LLM) and as a subprocess for start-up cost."""

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from memoryos.cli import main

pytestmark = pytest.mark.e2e


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_help_does_not_import_the_model_stack() -> None:
    probe = "import sys; from memoryos.cli import build_parser; build_parser(); print('sentence_transformers' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
    help_text = subprocess.run(
        [sys.executable, "-m", "memoryos.cli", "--help"], capture_output=True, text=True, check=True
    )
    assert "reindex" in help_text.stdout and "chat" in help_text.stdout


def test_add_retrieve_profile_stats_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--data-dir", str(tmp_path)]
    code, out, _ = run(
        capsys,
        *base,
        "add",
        "--user",
        "maya",
        "--user-input",
        "My dog is called Pico.",
        "--agent-response",
        "Cute name!",
        "--meta",
        '{"channel": "cli"}',
    )
    assert code == 0 and json.loads(out) == {"page_ids": [1]}
    turns = tmp_path / "turns.jsonl"
    turns.write_text(
        "\n".join(
            json.dumps({"user_input": f"Fact {i}: I like topic {i}.", "agent_response": "Noted."})
            for i in range(3)
        )
    )
    code, out, _ = run(capsys, *base, "add", "--user", "maya", "--file", str(turns))
    assert code == 0 and json.loads(out) == {"page_ids": [2, 3, 4]}

    code, out, _ = run(
        capsys, *base, "retrieve", "--user", "maya", "What is my dog called?", "--json", "--top-k", "2"
    )
    context = json.loads(out)
    assert code == 0 and context["retrieved_pages"][0]["user_input"] == "My dog is called Pico."
    assert context["retrieved_pages"][0]["meta_data"] == {"channel": "cli"}

    code, out, _ = run(capsys, *base, "stats", "--user", "maya", "--json")
    stats = json.loads(out)
    assert code == 0 and stats["short_term_pages"] == 4 and stats["embedding_dim"] == 384
    code, out, _ = run(capsys, *base, "profile", "--user", "maya", "--knowledge")
    assert code == 0 and '"user"' in out


def test_bad_input_is_a_clear_error_with_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        capsys,
        "--data-dir",
        str(tmp_path),
        "add",
        "--user",
        "../etc",
        "--user-input",
        "x",
        "--agent-response",
        "y",
    )
    assert code == 2 and "user_id" in err
    code, _, err = run(
        capsys,
        "--data-dir",
        str(tmp_path),
        "add",
        "--user",
        "maya",
        "--user-input",
        "  ",
        "--agent-response",
        "y",
    )
    assert code == 2 and "user_input" in err


def test_a_tenant_outside_the_data_dir_is_a_clear_error_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORYOS_TENANT", "../escape")
    code, _, err = run(capsys, "--data-dir", str(tmp_path / "data"), "stats", "--user", "maya")
    assert code == 2 and "tenant" in err
    assert list(tmp_path.iterdir()) == []


def test_chat_remembers_across_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("I keep my bike in the blue shed.\n/quit\n"))
    assert main(["--data-dir", str(tmp_path), "chat", "--user", "sam"]) == 0
    monkeypatch.setattr(sys, "stdin", io.StringIO("Where do I keep my bike?\n"))
    assert main(["--data-dir", str(tmp_path), "chat", "--user", "sam"]) == 0
    out = capsys.readouterr().out
    assert "blue shed" in out.split("Where do I keep")[-1] or "blue shed" in out.splitlines()[-1]


def test_reindex_moves_a_space_to_another_model_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--data-dir", str(tmp_path)]
    run(
        capsys,
        *base,
        "add",
        "--user",
        "kim",
        "--user-input",
        "I work as a pilot.",
        "--agent-response",
        "Exciting!",
    )
    monkey_env = {"MEMORYOS_EMBEDDING_MODEL_NAME": "sentence-transformers/all-MiniLM-L6-v2"}
    with pytest.MonkeyPatch.context() as patch:
        for key, value in monkey_env.items():
            patch.setenv(key, value)
        code, _, err = run(capsys, *base, "stats", "--user", "kim")
        assert code == 2 and "memoryos reindex" in err
        code, out, _ = run(
            capsys, *base, "reindex", "--user", "kim", "--model", "sentence-transformers/all-MiniLM-L6-v2"
        )
        assert code == 0 and json.loads(out)["pages"] == 1
        code, out, _ = run(capsys, *base, "retrieve", "--user", "kim", "What is my job?", "--json")
        assert code == 0 and "pilot" in out
