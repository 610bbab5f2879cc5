"""Bad-input paths of the CLI that need no model, run in-process through `memoryos.cli.main`: each is one
line naming the flag or file, a non-zero exit, and nothing created. The library's reindex of a missing
space is the same error the CLI maps to exit 3."""

from pathlib import Path

import pytest

from memoryos.cli.main import main
from memoryos.config import MemoryConfig
from memoryos.errors import SpaceNotFoundError
from memoryos.portability.reindex import reindex_space


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


@pytest.mark.parametrize("top_k", ["0", "-3", "many"])
def test_a_top_k_that_is_not_a_positive_integer_names_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], top_k: str
) -> None:
    with pytest.raises(SystemExit) as exited:  # refused while parsing the flags
        main(["--data-dir", str(tmp_path), "retrieve", "--user", "maya", "--top-k", top_k, "q"])
    assert exited.value.code == 2
    assert "argument --top-k: must be a positive integer" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_an_agent_response_without_a_user_input_names_the_missing_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run(capsys, "--data-dir", str(tmp_path), "add", "--user", "maya", "--agent-response", "ok")
    assert code == 2 and "--user-input" in err
    assert list(tmp_path.iterdir()) == []


def test_a_turns_file_with_no_turns_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    turns = tmp_path / "turns.jsonl"
    turns.write_text("\n\n")
    data = tmp_path / "data"
    code, err = run(capsys, "--data-dir", str(data), "add", "--user", "maya", "--file", str(turns))
    assert code == 2 and "turns.jsonl" in err
    assert not data.exists()


def test_reindex_of_a_missing_space_is_space_not_found_and_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(SpaceNotFoundError):
        reindex_space(MemoryConfig(data_dir=tmp_path), "nobody", "default_assistant_profile")
    assert list(tmp_path.iterdir()) == []


def test_reindex_wait_goes_with_redis_url_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(
        capsys, "--data-dir", str(tmp_path), "reindex", "--user", "maya", "--model", "m", "--wait"
    )
    assert code == 2 and "--wait" in err and "--redis-url" in err
    assert list(tmp_path.iterdir()) == []


def test_a_queued_reindex_checks_the_ids_before_reaching_redis(capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing listens on port 1: an id checked only after connecting would fail as unreachable (exit 1)."""
    code, err = run(
        capsys, "reindex", "--redis-url", "redis://127.0.0.1:1/0", "--user", "../maya", "--model", "m"
    )
    assert code == 2 and "user" in err and "'/'" in err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["reindex", "--model", "m"], "--user"),
        (["reindex", "--user", "maya", "--all", "--model", "m"], "--all"),
        (["reindex", "--all", "--model", "m"], "--redis-url"),
        (
            ["export", "--redis-url", "redis://127.0.0.1:1/0", "--user", "../maya", "--out", "x.bundle"],
            "user",
        ),
        (
            ["import", "--redis-url", "redis://127.0.0.1:1/0", "--user", "maya", "--from-reference", "."],
            "--from-reference",
        ),
        (["import", "--redis-url", "redis://127.0.0.1:1/0", "--user", "maya"], "FILE"),
    ],
)
def test_space_jobs_name_the_flag_before_reaching_redis(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    named: str,
) -> None:
    """Nothing listens on port 1: a flag checked only after connecting would fail as unreachable (exit 1)."""
    monkeypatch.chdir(tmp_path)
    code, err = run(capsys, "--data-dir", str(tmp_path / "data"), *argv)
    assert code == 2 and named in err and err.startswith("error: ") and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []
