"""What a new user runs into on the command line (issue 11): reads that create nothing, one line per mistake
instead of a traceback, Ctrl-C, resumed work announced, the LLM backend chosen from a base URL alone, and
`forget`. Each behaviour goes through the real entry point (`python -m memoryos.cli.main`) once; its variants
run `main()` in process, since every interpreter start costs CI time."""

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from memoryos import Memoryos
from memoryos.cli.main import main
from memoryos.config import MemoryConfig
from memoryos.errors import InvalidInputError, SpaceNotFoundError
from memoryos.space.layout import ROOT_MARKER, STORE_FILE
from memoryos.space.memory_space import MemorySpace
from memoryos.space.ops import AddTurns
from memoryos.storage.space_lock import SpaceHold
from memoryos.types import Turn
from tests.support.openai_server import ScriptedOpenAIServer
from tests.support.openai_server import openai_server as openai_server  # the fixture

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
ASSISTANT = "default_assistant_profile"


def cli_env(**extra: str) -> dict[str, str]:
    """The test's environment without settings that would change what the CLI does."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MEMORYOS_") or k == "MEMORYOS_MODEL_CACHE_DIR"
    }
    return {**env, **extra}


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memoryos.cli.main", *args],
        cwd=REPO,
        env=env or cli_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def finish(process: "subprocess.Popen[str]", timeout: float = 60) -> tuple[str, str]:
    """The rest of stdout, and stderr, once the process exits; it fails the test if it hangs. (Read from the
    pipes' file objects: `communicate` would miss what `readline` already buffered.)"""
    assert process.stdout is not None and process.stderr is not None
    try:
        process.wait(timeout=timeout)  # what is left of the output fits the pipes
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError(f"hung after Ctrl-C: {process.stderr.read()}") from None
    return process.stdout.read(), process.stderr.read()


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error_line(err: str) -> str:
    """stderr holds exactly one line, `error: ...` (after any model-loading progress output)."""
    lines = [line for line in err.splitlines() if line.strip() and "Loading weights" not in line]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


def space_dir(data_dir: Path, user: str) -> Path:
    return data_dir / "default" / user / ASSISTANT


def pages_and_vectors(data_dir: Path, user: str) -> tuple[int, int]:
    """The pages committed in the user's space and how many have their vector, read on a read-only
    connection beside the process that holds the space."""
    store = space_dir(data_dir, user) / STORE_FILE
    with contextlib.closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True)) as db:
        pages, vectors = db.execute("SELECT count(*), count(vector) FROM pages").fetchone()
    return pages, vectors


# --- 1. reads never create anything ---------------------------------------------------------------------
def test_reads_of_an_unknown_user_or_data_dir_fail_clearly_and_create_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing_root = tmp_path / "typo"
    result = cli("--data-dir", str(missing_root), "retrieve", "--user", "maya", "What is my dog called?")
    line = one_error_line(result.stderr)
    assert result.returncode == 3 and result.stdout == ""
    assert line.startswith(f"error: no memory for user 'maya' (assistant '{ASSISTANT}') in {missing_root}")
    assert "does not exist" in line and "--data-dir" in line
    assert not missing_root.exists()

    root = tmp_path / "data"
    root.mkdir()
    result = cli("--data-dir", str(root), "stats", "--user", "maya", "--json")
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)
    assert stats["space_exists"] is False and stats["short_term_pages"] == 0 and stats["segments"] == []
    assert result.stderr.startswith("note: no memory for user 'maya'")

    # The other reads, in process: text output is an error, --json an explicit empty result.
    for command in (["profile", "--user", "maya"], ["stats", "--user", "maya"], ["forget", "--user", "maya"]):
        code, out, err = run(capsys, "--data-dir", str(root), *command)
        assert code == 3 and out == "" and one_error_line(err).startswith("error: no memory for user 'maya'")
    code, out, err = run(capsys, "--data-dir", str(root), "retrieve", "--user", "maya", "  dog? ", "--json")
    context = json.loads(out)
    assert code == 0 and context["space_exists"] is False and context["query"] == "dog?"
    assert context["retrieved_pages"] == [] and context["user_profile"] == ""
    code, _, err = run(capsys, "--data-dir", str(root), "reindex", "--user", "maya", "--model", "x")
    assert code == 3 and "no memory for user 'maya'" in err
    assert files_under(root) == []

    # The Python API: an existing-only open raises before anything is made.
    with pytest.raises(SpaceNotFoundError, match="no memory for user 'maya'"):
        Memoryos("maya", None, missing_root, create=False)
    assert not missing_root.exists()


def test_an_existing_only_open_that_waited_for_a_forget_does_not_recreate_the_space(tmp_path: Path) -> None:
    """An opener (`create=False`) blocked while a forget holds the space exclusively finds it gone once the
    forget is done, and raises, rather than making the directory again."""
    config = MemoryConfig(data_dir=tmp_path, space_lock_timeout_s=10)
    directory = space_dir(tmp_path, "maya")
    MemorySpace(directory, config, "hash", lambda: 8).close()
    forget = SpaceHold(directory, 1)
    forget.claim("forget")
    outcome: list[BaseException | None] = []

    def open_existing() -> None:
        try:
            MemorySpace(directory, config, "hash", lambda: 8, create=False).close()
            outcome.append(None)
        except BaseException as error:
            outcome.append(error)

    opener = threading.Thread(target=open_existing)
    opener.start()
    time.sleep(0.3)  # the opener now waits for the shared hold
    shutil.rmtree(directory)
    forget.release()
    opener.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], SpaceNotFoundError)
    assert not directory.exists()


# --- 2. one line per mistake, never a traceback -----------------------------------------------------------
def test_add_mistakes_are_one_line_naming_the_flag_file_or_line_and_store_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    turns = tmp_path / "turns.jsonl"
    good = json.dumps({"user_input": "I like tea.", "agent_response": "Noted."})
    turns.write_text(f'\n{good}\n{{"user_input": "x" "agent_response": "y"}}\n')
    result = cli("--data-dir", str(data), "add", "--user", "maya", "--file", str(turns))
    assert result.returncode == 2
    assert one_error_line(result.stderr) == (
        f"error: {turns} line 3: invalid JSON: Expecting ',' delimiter (column 20)"
    )  # the file's own line number, blank lines counted

    base = ["--data-dir", str(data), "add", "--user", "maya"]
    cases = {
        "[1, 2]": f"{turns} line 2: expected a JSON object (one turn), got a list",
        '{"user_input": "a", "agent_response": "b", "colour": "red"}': f"{turns} line 2: unknown key 'colour'",
        '{"user_input": " ", "agent_response": "b"}': f"{turns} line 2: user_input: must not be empty",
        '{"user_input": "a", "agent_response": "b", "timestamp": "soon"}': f"{turns} line 2: timestamp: could not parse",
    }
    for second_line, expected in cases.items():
        turns.write_text(f"{good}\n{second_line}\n")
        code, _, err = run(capsys, *base, "--file", str(turns))
        assert code == 2 and one_error_line(err).startswith(f"error: {expected}"), err
    flag_cases = [
        (
            ["--file", str(tmp_path / "nope.jsonl")],
            f"error: --file: cannot read {tmp_path / 'nope.jsonl'}: no such file",
        ),
        (["--file", str(tmp_path)], f"error: --file: cannot read {tmp_path}: is a directory"),
        (["--user-input", "hi"], "error: --agent-response: missing"),
        ([], "error: --user-input and --agent-response: missing"),
        (["--file", str(turns), "--user-input", "hi"], "error: --file: cannot be combined with --user-input"),
        (["--user-input", "hi", "--agent-response", "yo", "--meta", "{oops"], "error: --meta: invalid JSON"),
        (
            ["--user-input", "hi", "--agent-response", "yo", "--meta", "[1]"],
            "error: --meta: must be a JSON object",
        ),
        (
            ["--user-input", "hi", "--agent-response", "yo", "--timestamp", "soon"],
            "error: --timestamp: could not parse",
        ),
    ]
    for flags, expected in flag_cases:
        code, _, err = run(capsys, *base, *flags)
        assert code == 2 and one_error_line(err).startswith(expected), (flags, err)
    assert not data.exists()  # every turn is checked before the space is opened

    # Unknown keys are an error in the Python API too, naming the key; nothing of the batch is stored.
    with Memoryos("maya", None, data) as memory:
        with pytest.raises(InvalidInputError, match=r"turns\[1\]: unknown key 'speaker'"):
            memory.add_memories(
                [
                    {"user_input": "a", "agent_response": "b"},
                    {"user_input": "a", "agent_response": "b", "speaker": "x"},
                ]
            )
        assert memory.space.max_page_id() == 0


def test_a_new_user_on_a_read_only_data_dir_is_one_line(tmp_path: Path) -> None:
    data = tmp_path / "readonly"
    data.mkdir()
    args = [
        "--data-dir",
        str(data),
        "add",
        "--user",
        "maya",
        "--user-input",
        "Hi",
        "--agent-response",
        "Hello",
    ]
    command = [sys.executable, "-m", "memoryos.cli.main", *args]
    if os.geteuid() != 0:
        data.chmod(0o555)
        reason = "permission denied"
    else:  # root writes through permissions: mount a read-only filesystem there, in a mount namespace
        if (
            not shutil.which("unshare")
            or subprocess.run(
                ["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o ro tmpfs {data}"], capture_output=True
            ).returncode
        ):
            pytest.skip("running as root without mount namespaces: no way to make a read-only directory")
        command = [
            "unshare",
            "-m",
            "sh",
            "-c",
            'mount -t tmpfs -o ro tmpfs "$0" && exec "$@"',
            str(data),
            *command,
        ]
        reason = "read-only file system"
    try:
        result = subprocess.run(command, cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=120)
    finally:
        data.chmod(0o755)
    assert result.returncode == 1
    assert one_error_line(result.stderr) == f"error: cannot create memory in {data}: {reason}"


# --- 2 and 3. Ctrl-C, and the work it left announced on the next open ----------------------------------
TURNS = 100
"""Turns of the interrupted `add --file`: more than one page batch (64), so pages usually wait behind the
batch in flight when Ctrl-C comes; each one the next open embeds costs the test time (200 took seconds)."""


def test_ctrl_c_during_add_file_exits_130_keeps_what_was_acknowledged_and_is_resumed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    turns = tmp_path / "turns.jsonl"
    turns.write_text(
        "\n".join(
            json.dumps(
                {"user_input": f"On day {i} I walked {i % 17} km by the river.", "agent_response": "Nice."}
            )
            for i in range(TURNS)
        )
    )
    adder = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "memoryos.cli.main",
            "--data-dir",
            str(data),
            "add",
            "--user",
            "ana",
            "--file",
            str(turns),
        ],
        cwd=REPO,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert adder.stdout is not None
    first = adder.stdout.readline()  # the page ids, printed once the pages are stored, before embedding
    adder.send_signal(signal.SIGINT)
    rest, err = finish(adder)  # no hang at exit
    assert adder.returncode == 130, err
    assert "Traceback" not in err and "terminate called" not in err and "Task was destroyed" not in err
    assert [line for line in err.splitlines() if line.startswith("interrupted")] == [
        line for line in err.splitlines() if line.strip() and "Loading weights" not in line
    ]
    acknowledged = json.loads(first + rest)["page_ids"]
    assert acknowledged == list(range(1, TURNS + 1))

    # One more page stored without its vector, as a run interrupted before embedding leaves it: the next
    # open must announce everything pending, whatever the interrupted run managed to embed.
    config = MemoryConfig(data_dir=data)
    space = MemorySpace(
        space_dir(data, "ana"), config, config.embedding_model_name, lambda: 384, create=False
    )
    turn = Turn(user_input="I also swam.", agent_response="Great.", timestamp="2026-01-01 10:00:00")
    space.apply(AddTurns(turns=[turn], at=time.time()))
    pending = len(space.pending_page_ids(1000))
    space.close()
    result = cli("--data-dir", str(data), "stats", "--user", "ana", "--json")
    assert result.returncode == 0, result.stderr
    assert f"embedding {pending} pages left pending by an earlier run" in result.stderr
    stats = json.loads(result.stdout)
    assert stats["short_term_pages"] + stats["mid_term_pages"] + stats["archived_pages"] == TURNS + 1


# --- 2 and 4. chat: a base URL without a key reaches the server; Ctrl-C ends it cleanly -------------------
def test_chat_with_only_a_base_url_uses_that_server_and_ends_cleanly_on_ctrl_c(
    tmp_path: Path, openai_server: ScriptedOpenAIServer
) -> None:
    openai_server.respond_always("Your bike is in the blue shed.")
    env = cli_env(MEMORYOS_OPENAI_BASE_URL=openai_server.base_url)
    chat = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "memoryos.cli.main",
            "--verbose",
            "--data-dir",
            str(tmp_path),
            "chat",
            "--user",
            "sam",
        ],
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert chat.stdin is not None and chat.stdout is not None
    chat.stdin.write("Where is my bike?\n")
    chat.stdin.flush()
    answer = chat.stdout.readline()
    while "assistant: " not in answer:  # after the greeting; the prompt "you> " ends no line
        assert answer, "the chat ended before answering"
        answer = chat.stdout.readline()
    deadline = time.monotonic() + 60
    while pages_and_vectors(tmp_path, "sam") != (1, 1):  # nothing pending when Ctrl-C comes (a hang once)
        assert time.monotonic() < deadline, "the exchange was not embedded"
        time.sleep(0.02)
    chat.send_signal(signal.SIGINT)  # at the next prompt, stdin still open
    _, err = finish(chat)
    assert answer.endswith("assistant: Your bike is in the blue shed.\n")
    assert chat.returncode == 130, err
    assert "Traceback" not in err and "terminate called" not in err
    assert sum(line.startswith("interrupted") for line in err.splitlines()) == 1
    request = openai_server.requests[0]
    assert {k.lower(): v for k, v in request.headers.items()}[
        "authorization"
    ] == "Bearer not-needed"  # a placeholder: local servers accept any
    host = openai_server.base_url.split("//")[1].split("/")[0]
    choice = [line for line in err.splitlines() if "LLM backend" in line]
    assert choice == [f"memoryos.llm: LLM backend: OpenAI-compatible, model gpt-4o-mini ({host}, no API key)"]


def test_the_python_api_with_an_empty_key_and_a_base_url_reaches_the_server(
    tmp_path: Path, openai_server: ScriptedOpenAIServer
) -> None:
    """The reference's own demo passes `openai_api_key=""` with its local server's URL."""
    openai_server.respond_always("You work as a data scientist.")
    with Memoryos("tom", "", tmp_path, openai_base_url=openai_server.base_url) as memory:
        memory.add_memory("I work as a data scientist.", "Interesting!")
        assert memory.get_response("What do you remember about my job?") == "You work as a data scientist."
    answers = [r for r in openai_server.requests if "my job" in json.dumps(r.body)]
    assert (
        answers
        and {k.lower(): v for k, v in answers[0].headers.items()}["authorization"] == "Bearer not-needed"
    )


# --- 5 and 6. forget -------------------------------------------------------------------------------------
def test_forget_asks_for_yes_reports_what_it_erased_and_leaves_no_directory_it_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "made-by-memoryos"
    with Memoryos("maya", None, data) as memory:
        memory.add_memories(
            [{"user_input": f"I like topic {i}.", "agent_response": "Noted."} for i in range(3)]
        )
    assert (data / ROOT_MARKER).is_file()  # MemoryOS made this data directory: it may remove it

    code, _, err = run(capsys, "--data-dir", str(data), "forget", "--user", "maya")
    assert code == 2 and one_error_line(err).startswith(
        "error: --yes: forget erases all memory of user 'maya'"
    )
    with Memoryos("maya", None, data, create=False) as holder:  # another holder: refused, naming it
        code, _, err = run(capsys, "--data-dir", str(data), "forget", "--user", "maya", "--yes")
        assert code == 4 and "cannot forget" in one_error_line(err)
        assert holder.space.max_page_id() == 3
    result = cli("--data-dir", str(data), "forget", "--user", "maya", "--yes")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(
        f"erased all memory of user 'maya' (assistant '{ASSISTANT}') in {data}: 3 short term pages, "
        "0 mid term pages, 0 archived pages, 0 user facts, 0 assistant facts, 0 profile versions; removed "
    )
    assert not data.exists()  # nothing else was in it

    own = tmp_path / "users-own"  # a data directory the user made is kept, empty or not
    own.mkdir()
    with Memoryos("maya", None, own) as memory:
        memory.add_memory("Hello.", "Hi.")
    code, out, _ = run(capsys, "--data-dir", str(own), "forget", "--user", "maya", "--yes")
    assert code == 0 and out.startswith("erased") and own.is_dir() and files_under(own) == []
