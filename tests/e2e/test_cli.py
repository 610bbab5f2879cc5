"""The `memoryos` command, in process (real MiniLM, offline LLM) and as a subprocess for start-up cost."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memoryos.cli.main import main
from memoryos.embedding.device import gpu_may_be_present

pytestmark = pytest.mark.e2e


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_help_does_not_import_the_model_stack() -> None:
    probe = "import sys; from memoryos.cli.main import build_parser; build_parser(); print('sentence_transformers' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
    help_text = subprocess.run(
        [sys.executable, "-m", "memoryos.cli.main", "--help"], capture_output=True, text=True, check=True
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
    profile_line, knowledge = out.split("\n", 1)
    assert code == 0 and profile_line == "(no profile yet)"  # nothing promoted from 4 short-term pages
    assert json.loads(knowledge) == {"user": [], "assistant": []}


def test_stats_lists_segments_with_their_heat_and_reads_the_data_dir_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORYOS_DATA_DIR", str(tmp_path))
    turns = tmp_path / "turns.jsonl"
    turns.write_text(
        "\n".join(
            json.dumps({"user_input": f"I planted {i} tomato seedlings today.", "agent_response": "Nice!"})
            for i in range(12)
        )
    )
    assert run(capsys, "add", "--user", "ana", "--file", str(turns))[0] == 0
    assert (tmp_path / "default" / "ana" / "default_assistant_profile" / "memory.sqlite").exists()
    code, out, _ = run(capsys, "stats", "--user", "ana")
    lines = out.splitlines()
    assert code == 0 and lines[0] == "short-term pages: 10  mid-term pages: 2  archived pages: 0"
    segments = [line.split() for line in lines[2:]]
    assert segments and all(words[0] == "segment" and words[2] == "heat" for words in segments)
    assert sum(int(words[5]) for words in segments) == 2  # the two moved pages, each in one segment


def test_stats_and_profile_start_without_the_model_stack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Reading a space needs no embedding model: `stats` and `profile` import none of torch,
    sentence-transformers, transformers or onnxruntime; `retrieve` on CPU, once the model's export is
    verified (the `add` before made it, if no earlier test had), runs on ONNX Runtime without the first
    three. The `add` runs in this process: only the reading process is watched."""
    code, _, _ = run(
        capsys, "--data-dir", str(tmp_path), "add", "--user", "lee",
        "--user-input", "I collect stamps.", "--agent-response", "Nice hobby.",
    )  # fmt: skip
    assert code == 0
    heavy = "['torch', 'sentence_transformers', 'transformers', 'onnxruntime']"
    probe = (
        "import sys; from memoryos.cli.main import main; "
        f"main(['--data-dir', {str(tmp_path)!r}, 'stats', '--user', 'lee']); "
        f"main(['--data-dir', {str(tmp_path)!r}, 'profile', '--user', 'lee']); "
        f"print('after reads:', [m for m in {heavy} if m in sys.modules]); "
        f"main(['--data-dir', {str(tmp_path)!r}, 'retrieve', '--user', 'lee', 'What do I collect?']); "
        f"print('after retrieve:', [m for m in {heavy} if m in sys.modules])"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert "short-term pages: 1" in result.stdout and "I collect stamps." in result.stdout
    assert "after reads: []" in result.stdout
    if not gpu_may_be_present():  # else torch chooses the device
        assert "after retrieve: ['onnxruntime']" in result.stdout
    assert result.stderr == ""


def test_the_model_loading_bar_shows_only_with_verbose(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """transformers' "Loading weights" bar, on a PyTorch load: quiet unless `--verbose` (`show_progress`).
    The quiet command is a first run, on an empty model cache: PyTorch loads, and on CPU the model is
    exported and its manifest written, all without a line on stderr (what a new user's first command and
    the README's snippet print). The verbose one loads PyTorch again (`embedding_runtime=torch`). Both run
    in one new process, quiet first: a quiet load that left the bar switched off would hide it from the
    verbose one, and a second process spent seconds importing PyTorch again."""
    base = ["--data-dir", str(tmp_path / "data")]
    assert (
        run(capsys, *base, "add", "--user", "kai", "--user-input", "I sail.", "--agent-response", "Nice.")[0]
        == 0
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYOS_")}
    env["MEMORYOS_MODEL_CACHE_DIR"] = str(tmp_path / "models")
    end = "-- command ended --"
    retrieve = [*base, "retrieve", "--user", "kai", "Do I sail?"]
    probe = (
        "import os, sys\n"
        "from memoryos.cli.main import main\n"
        "for flags, runtime in (([], 'auto'), (['--verbose'], 'torch')):\n"
        "    os.environ['MEMORYOS_EMBEDDING_RUNTIME'] = runtime\n"
        f"    assert main([*flags, *{retrieve!r}]) == 0\n"
        f"    print({end!r}, flush=True)\n"
        f"    print({end!r}, file=sys.stderr, flush=True)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True
    )
    quiet_out, verbose_out, _ = result.stdout.split(end)
    quiet_err, verbose_err, _ = result.stderr.split(end)
    assert "I sail." in quiet_out and "I sail." in verbose_out
    assert quiet_err == ""
    if not gpu_may_be_present():  # else torch chooses the device, and on a GPU nothing is exported
        assert len(list((tmp_path / "models" / "onnx").glob("*.onnx"))) == 1  # made by the quiet one
    assert "Loading weights" in verbose_err and "loaded all-MiniLM-L6-v2 on cpu with PyTorch" in verbose_err


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
    assert code == 2 and err.startswith("error: --user: ")  # named by the flag that gave it
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
    assert code == 2 and err == "error: --user-input: must not be empty or whitespace only\n"
    assert not (tmp_path / "default").exists()  # checked before the space was opened


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
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdin", io.StringIO("Where do I keep my bike?\n"))
    assert main(["--data-dir", str(tmp_path), "chat", "--user", "sam"]) == 0
    answers = [line for line in capsys.readouterr().out.splitlines() if "assistant: " in line]
    assert len(answers) == 1 and "blue shed" in answers[0]  # the second run's only answer, from memory


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
        code, out, err = run(
            capsys, *base, "reindex", "--user", "kim", "--model", "sentence-transformers/all-MiniLM-L6-v2"
        )
        assert code == 0 and json.loads(out)["pages"] == 1
        assert "re-embedding pages" in err  # the progress bar
        code, out, _ = run(capsys, *base, "retrieve", "--user", "kim", "What is my job?", "--json")
        assert code == 0 and "pilot" in out


def test_global_flags_count_after_the_command_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    after, before = tmp_path / "after", tmp_path / "before"
    assert run(capsys, "add", "--user", "ana", "--user-input", "I grow tomatoes", "--agent-response",
               "Nice!", "--data-dir", str(after))[0] == 0  # fmt: skip
    assert (after / "default" / "ana").is_dir()
    code, out, _ = run(capsys, "--data-dir", str(after), "stats", "--user", "ana", "--json", "-v")
    assert code == 0 and json.loads(out)["space_exists"] is True
    code, out, _ = run(capsys, "--data-dir", str(after), "stats", "--user", "ana", "--json", "--data-dir",
                       str(before))  # fmt: skip
    assert code == 0 and json.loads(out)["space_exists"] is False  # the later one wins, as in Unix tools


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "--data-dir", str(tmp_path), "add", "--user", "ana", "--user-input", "I grow tomatoes",
               "--agent-response", "Nice!")[0] == 0  # fmt: skip
    command = [
        sys.executable,
        "-m",
        "memoryos.cli.main",
        "--data-dir",
        str(tmp_path),
        "stats",
        "--user",
        "ana",
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # `| head` gone before the command writes
    error = process.stderr.read()
    assert process.wait(timeout=60) == 141 and error == b""  # SIGPIPE's status, no message
