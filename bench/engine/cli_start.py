"""Cold-start figures of the `memoryos` command (issue 11): `python -m bench.engine.cli_start`.

Each figure is the wall time of a new process, from `exec` to exit, on a warm disk cache (every command
runs once untimed first), `--runs` times (5), median and max:

- `memoryos --help`, `stats`, `profile`, `retrieve` on a space holding our own 32-exchange conversation
  (`tests/data/own_conversation.json`), the model's ONNX export already made and verified;
- `add` of one turn: *acknowledged* is when its page id is on stdout (the page is durable then), *exit*
  when the process ends (the page embedded and consolidated first);
- the first-ever `retrieve`: a new, empty model cache (`MEMORYOS_MODEL_CACHE_DIR`), so the process loads
  PyTorch, exports the model, checks the export against PyTorch and writes its manifest (`--first-runs`).

The untimed run of each command runs under `python -X importtime`, which tells whether it imported torch.
The command is the `memoryos` console script beside this interpreter (not a pyenv or venv shim, whose own
start is not MemoryOS's), else `python -m memoryos.cli.main`. Every `MEMORYOS_*` variable is cleared.

Then, in this process, the torch-free encoder against PyTorch on the same texts: `--pages` (256) LoCoMo
exchanges (our own conversation's when LoCoMo is absent) encoded as the engine does (batches of
`embedding_batch_size`), the best of 3 runs at 1 and 2 threads, and the queries of the conversation one
by one; the largest difference between their vectors.

Writes docs/benchmarks/cli_start.{json,md}.
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "docs" / "benchmarks"
OWN_CONVERSATION = REPO / "tests" / "data" / "own_conversation.json"
USER = "nadia"
QUERY = "When did I start the pottery class?"
HEAVY_MODULES = ("torch", "sentence_transformers", "transformers", "onnxruntime")
TARGETS_S = {"retrieve": 1.5, "stats": 0.5, "profile": 0.5, "add (acknowledged)": 1.5}
BEFORE_NAME = "cli_start_before"
"""`--name cli_start_before --no-parity`, run at the commit before the torch-free path (6071906), gives the
table's "before" column."""


def command_prefix() -> list[str]:
    script = Path(sys.executable).parent / "memoryos"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "memoryos.cli.main"]


def clean_env(model_cache: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("MEMORYOS_")}
    env["MEMORYOS_MODEL_CACHE_DIR"] = str(model_cache)
    return env


def timed(argv: list[str], env: dict[str, str], ack_marker: str | None = None) -> tuple[float, float | None]:
    """Wall seconds until the process exits, and until a stdout line containing `ack_marker` appeared."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    acknowledged = None
    if ack_marker is not None:
        for line in process.stdout:
            if ack_marker in line:
                acknowledged = time.perf_counter() - start
                break
    _, err = process.communicate()
    total = time.perf_counter() - start
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({process.returncode}): {err}")
    return total, acknowledged


def imported_heavy(argv: list[str], env: dict[str, str]) -> list[str]:
    """Which of `HEAVY_MODULES` the command imports (one run under -X importtime)."""
    prefix = command_prefix()
    rest = argv[len(prefix) :]
    probe = [sys.executable, "-X", "importtime", "-m", "memoryos.cli.main", *rest]
    result = subprocess.run(probe, env=env, capture_output=True, text=True, check=True)
    names = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    return [name for name in HEAVY_MODULES if name in names]


def summary(values: list[float]) -> dict[str, float]:
    return {"median_s": round(statistics.median(values), 3), "max_s": round(max(values), 3)}


def cold_start(runs: int, first_runs: int, work: Path) -> dict[str, Any]:
    prefix = command_prefix()
    data, cache = work / "data", work / "model-cache"
    env = clean_env(cache)
    base = [*prefix, "--data-dir", str(data)]
    turns = work / "turns.jsonl"
    pairs = json.loads(OWN_CONVERSATION.read_text())["pairs"]
    turns.write_text(
        "\n".join(
            json.dumps({k: pair[k] for k in ("user_input", "agent_response", "timestamp")}) for pair in pairs
        )
    )
    prepare, _ = timed([*base, "add", "--user", USER, "--file", str(turns)], env)  # makes the export too
    commands: dict[str, list[str]] = {
        "--help": [*prefix, "--help"],
        "stats": [*base, "stats", "--user", USER],
        "profile": [*base, "profile", "--user", USER],
        "retrieve": [*base, "retrieve", "--user", USER, QUERY],
    }
    rows: dict[str, Any] = {}
    for name, argv in commands.items():
        heavy = imported_heavy(argv, env)  # also the warm-up run
        times = [timed(argv, env)[0] for _ in range(runs)]
        rows[name] = {**summary(times), "runs": times, "imports": heavy}
    add_argv = [
        *base,
        "add",
        "--user",
        USER,
        "--user-input",
        "I bought a blue kayak today.",
        "--agent-response",
    ]
    heavy = imported_heavy([*add_argv, "Enjoy the lake!"], env)
    exits, acks = [], []
    for i in range(runs):
        total, ack = timed([*add_argv, f"Enjoy the lake! ({i})"], env, ack_marker="]")
        assert ack is not None
        exits.append(total)
        acks.append(ack)
    rows["add (acknowledged)"] = {**summary(acks), "runs": acks, "imports": heavy}
    rows["add (exit)"] = {**summary(exits), "runs": exits, "imports": heavy}
    if first_runs:
        heavy = imported_heavy(commands["retrieve"], clean_env(work / "fresh-cache-probe"))
        firsts = []
        for i in range(first_runs):
            fresh = work / f"fresh-cache-{i}"
            firsts.append(timed(commands["retrieve"], clean_env(fresh))[0])
            shutil.rmtree(fresh, ignore_errors=True)
        rows["retrieve, first ever (exports)"] = {**summary(firsts), "runs": firsts, "imports": heavy}
    interpreter = [timed([sys.executable, "-c", "pass"], env)[0] for _ in range(runs)]
    return {
        "command": prefix,
        "prepare_s": round(prepare, 3),
        "rows": rows,
        "python_c_pass": summary(interpreter),
    }


def parity(pages: int) -> dict[str, Any]:
    """The torch-free encoder against PyTorch: vectors and page throughput."""
    from memoryos.config import MemoryConfig
    from memoryos.embedding.sentence_transformers_backend import SentenceTransformerEmbedder
    from memoryos.types import exchange_text

    texts, queries, source = _parity_texts(pages)
    out: dict[str, Any] = {"source": source, "pages": len(texts), "queries": len(queries), "threads": {}}
    for threads in (1, 2):
        runtimes = {}
        for runtime in ("torch", "auto"):
            config = MemoryConfig(embedding_cache_size=0, embedding_runtime=runtime, torch_threads=threads)
            embedder = SentenceTransformerEmbedder(config)
            embedder.encode(["warm up"])
            if runtime == "auto" and not embedder.torch_free:
                raise SystemExit("the torch-free encoder was not used: run the cold-start part first")
            best, vectors = float("inf"), np.empty(0)
            for _ in range(3):
                start = time.perf_counter()
                vectors = embedder.encode([exchange_text(u, a) for u, a in texts])
                best = min(best, time.perf_counter() - start)
            query_times, query_vectors = [], []
            for query in queries:
                start = time.perf_counter()
                query_vectors.append(embedder.encode([query], is_query=True)[0])
                query_times.append(time.perf_counter() - start)
            runtimes["torch" if runtime == "torch" else "onnx"] = {
                "pages_per_s": round(len(texts) / best, 1),
                "query_p50_ms": round(1000 * statistics.median(query_times), 2),
                "pages": vectors,
                "query_vectors": np.stack(query_vectors),
            }
        torch_side, onnx_side = runtimes["torch"], runtimes["onnx"]
        out["threads"][str(threads)] = {
            "pytorch_pages_per_s": torch_side["pages_per_s"],
            "onnx_pages_per_s": onnx_side["pages_per_s"],
            "pytorch_query_p50_ms": torch_side["query_p50_ms"],
            "onnx_query_p50_ms": onnx_side["query_p50_ms"],
            "max_difference_pages": float(np.abs(torch_side["pages"] - onnx_side["pages"]).max()),
            "max_difference_queries": float(
                np.abs(torch_side["query_vectors"] - onnx_side["query_vectors"]).max()
            ),
        }
    return out


def _parity_texts(pages: int) -> tuple[list[tuple[str, str]], list[str], str]:
    from memoryos.eval.locomo import DEV_SAMPLE_IDS, find_locomo_raw, load_conversations

    raw = find_locomo_raw()
    if raw is not None:
        conversations = load_conversations(raw, DEV_SAMPLE_IDS)
        pairs = [(p.user_input, p.agent_response) for c in conversations for p in c.pairs][:pages]
        queries = [q.question for q in conversations[0].qa][:200]
        return pairs, queries, f"LoCoMo {', '.join(DEV_SAMPLE_IDS)}"
    own = json.loads(OWN_CONVERSATION.read_text())
    base = [(p["user_input"], p["agent_response"]) for p in own["pairs"]]
    pairs = [
        (u + (f" (#{i // len(base)})" if i >= len(base) else ""), a) for i, (u, a) in enumerate(base * 8)
    ]
    return pairs[:pages], [q["question"] for q in own["qa"]], "own conversation"


def markdown(results: dict[str, Any], before: dict[str, Any] | None = None) -> str:
    """The tables; `before`: the same figures of an earlier commit (median, and what it imported)."""
    cold = results["cold_start"]
    lines = [
        "| command (cold process, warm disk cache) | median | max | target | imports | before: median | imports |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    old_rows = before["cold_start"]["rows"] if before else {}
    for name, row in cold["rows"].items():
        target = TARGETS_S.get(name)
        old = old_rows.get(name)
        then = f"{old['median_s']:.2f} s | {_imports(old)}" if old else "— | —"
        lines.append(
            f"| `{name}` | {row['median_s']:.2f} s | {row['max_s']:.2f} s | "
            f"{f'≤ {target} s' if target else '—'} | {_imports(row)} | {then} |"
        )
    lines.append(
        f"| `python -c pass` (the interpreter alone) | {cold['python_c_pass']['median_s']:.2f} s | "
        f"{cold['python_c_pass']['max_s']:.2f} s | — | — | — | — |"
    )
    par = results.get("parity")
    if par:
        lines += [
            "",
            f"| {par['pages']} pages ({par['source']}), batches of 64; {par['queries']} queries one by one | "
            "PyTorch pages/s | ONNX Runtime pages/s | PyTorch query p50 | ONNX query p50 | max difference pages / queries |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for threads, row in par["threads"].items():
            lines.append(
                f"| {threads} thread{'s' if threads != '1' else ''} | {row['pytorch_pages_per_s']} | "
                f"{row['onnx_pages_per_s']} | {row['pytorch_query_p50_ms']} ms | {row['onnx_query_p50_ms']} ms | "
                f"{row['max_difference_pages']:.1e} / {row['max_difference_queries']:.1e} |"
            )
    return "\n".join(lines) + "\n"


def _imports(row: dict[str, Any]) -> str:
    return ", ".join(row["imports"]) or "none of them"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--first-runs", type=int, default=3, help="first-ever retrieves (each exports)")
    parser.add_argument("--pages", type=int, default=256)
    parser.add_argument("--no-parity", action="store_true", help="only the cold-start part")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    parser.add_argument("--name", default="cli_start", help=f"file stem; {BEFORE_NAME} for the before column")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="memoryos-cli-start-") as scratch:
        cold = cold_start(args.runs, args.first_runs, Path(scratch))
        os.environ["MEMORYOS_MODEL_CACHE_DIR"] = str(Path(scratch) / "model-cache")
        results: dict[str, Any] = {
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
            "cold_start": cold,
        }
        if not args.no_parity:
            results["parity"] = parity(args.pages)
    args.out.mkdir(parents=True, exist_ok=True)
    before_file = args.out / f"{BEFORE_NAME}.json"
    before = (
        json.loads(before_file.read_text()) if before_file.is_file() and args.name != BEFORE_NAME else None
    )
    (args.out / f"{args.name}.json").write_text(json.dumps(results, indent=1) + "\n")
    (args.out / f"{args.name}.md").write_text(markdown(results, before))
    print(markdown(results, before))


if __name__ == "__main__":
    main()
