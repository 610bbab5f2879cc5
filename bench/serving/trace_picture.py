"""The picture of one real trace in docs/service.md ("Tracing"): one write through the API, the queue and
a worker to its applied batch and its embedding in the worker's embedding engine, its spans as OTLP
decoded in a real run, drawn as a waterfall (no trace UI installs here).

    python -m bench.serving.trace_picture capture --out docs/benchmarks/trace_write.json
    python -m bench.serving.trace_picture render --json docs/benchmarks/trace_write.json \\
        --out docs/images/trace_write.png

`capture` starts a `redis-server`, `memoryos serve --redis-url` and a worker with its embedding engine
(`bench.serving.instant_worker`: the worker's code with the tests' hash embedder, in the engine process),
all exporting over OTLP/HTTP to `bench.serving.otlp_sink --keep`, sends two writes of one space (the
first creates it, so the second is a write as most are), and writes to the JSON the decoded spans of the
second's trace, of the `apply batch` span that links it, of the batcher's `embed` span that links that
batch and of the engine's `embedding batch` span that links the `embed` (each with its own trace).
`render` draws that JSON: one bar per span from its start to its end, by process, each link as a dashed
arrow.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.serving.ingest import free_ports, worker_processes
from bench.serving.tracing_overhead import base_env, served_api
from services.queue.settings import QueueSettings
from tests.support.redis_server import running_redis

WRITE_SPANS = {"create_memory", "enqueue create_memory", "apply create_memory"}
LINKING_SPANS = ("apply batch", "embed", "embedding batch")
"""The chain of batch spans from a write to its embedding, each linking the one before (the first links
the write's `apply create_memory`); each starts a trace of its own."""
"""The spans of a write's own trace the capture waits for (beside the API's server span)."""
SPANS_TIMEOUT_S = 30.0


@contextmanager
def keeping_sink() -> Iterator[str]:
    """`bench.serving.otlp_sink --keep` on a free port; its URL."""
    port = free_ports(1)
    command = [sys.executable, "-m", "bench.serving.otlp_sink", str(port), "--keep"]
    sink = subprocess.Popen(command, stdout=subprocess.PIPE)
    try:
        assert sink.stdout is not None and b"serving" in sink.stdout.readline()
        yield f"http://127.0.0.1:{port}"
    finally:
        sink.terminate()
        sink.wait(timeout=30)


def linking(spans: list[dict[str, Any]], name: str, targets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The spans named `name` that link one of `targets`."""
    wanted = [{"trace_id": t["trace_id"], "span_id": t["span_id"]} for t in targets]
    return [s for s in spans if s["name"] == name and any(link in s["links"] for link in wanted)]


def write_trace(spans: list[dict[str, Any]], writes: int) -> list[dict[str, Any]] | None:
    """The spans of the last of `writes` writes' trace and of the chain of batches that links it (each
    with its trace: `LINKING_SPANS`), once all have arrived; else None."""
    applied = sorted((s for s in spans if s["name"] == "apply create_memory"), key=lambda s: s["start_ns"])
    if len(applied) < writes:
        return None
    for apply in applied[-1:]:
        mine = [s for s in spans if s["trace_id"] == apply["trace_id"]]
        names = {s["name"] for s in mine}
        server = any(s["kind"] == "server" for s in mine)
        chain, targets = [], [apply]
        for name in LINKING_SPANS:
            targets = linking(spans, name, targets)
            chain += targets
        if names >= WRITE_SPANS and server and targets:
            batch_traces = {s["trace_id"] for s in chain}
            return mine + [s for s in spans if s["trace_id"] in batch_traces]
    return None


def wait_applied(status_url: str) -> None:
    """Until the write's status says it is stored (its owner applied it)."""
    deadline = time.monotonic() + SPANS_TIMEOUT_S
    while httpx.get(status_url).status_code != 200:
        if time.monotonic() > deadline:
            raise RuntimeError("the write was not applied")
        time.sleep(0.05)


def capture(out: Path) -> None:
    """Two writes of one space through a real deployment with tracing on (the first creates the space);
    the second's trace, and its batch's, to `out`."""
    with tempfile.TemporaryDirectory(prefix="memoryos-trace-") as tmp, keeping_sink() as sink:
        root = Path(tmp)
        with running_redis(root / "redis") as redis_server:
            settings = QueueSettings(redis_url=redis_server.url, redis_namespace="picture", shard_count=4)
            env = base_env(settings, root / "worker") | {
                "OTEL_EXPORTER_OTLP_ENDPOINT": sink,
                "OTEL_BSP_SCHEDULE_DELAY": "100",
            }
            worker_env = env | {
                "MEMORYOS_WORKER_METRICS_PORT": str(free_ports(1)),
                "MEMORYOS_WORKER_EMBEDDING_ENGINE": "true",  # pages embedded in the engine's process
            }
            with (
                worker_processes(settings, worker_env, 1, True, root / "worker.log"),
                served_api(env, root / "api", root / "api.log") as (url, _),
            ):
                space = f"{url}/v1/users/alice@example.com/assistants/bot"
                for turn, write_id in enumerate(("w-first", "w-pictured")):
                    written = httpx.post(
                        f"{space}/memories",
                        json={
                            "user_input": f"Turn {turn}: I planted a lemon orchard behind the mill.",
                            "agent_response": "Lovely!",
                            "write_id": write_id,
                        },
                    )
                    written.raise_for_status()
                    wait_applied(f"{space}/writes/{write_id}")
                deadline = time.monotonic() + SPANS_TIMEOUT_S
                while (found := write_trace(httpx.get(f"{sink}/spans").json(), 2)) is None:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the write's spans did not all arrive")
                    time.sleep(0.1)
    record = {
        "captured": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python -m bench.serving.trace_picture capture",
        "what": "the second POST .../memories of a space through memoryos serve --redis-url, a Redis stream and a worker "
        "process (bench.serving.instant_worker) whose pages its embedding engine process embeds (the tests' hash "
        "embedder), exported over OTLP/HTTP protobuf and decoded",
        "spans": sorted(found, key=lambda span: span["start_ns"]),
    }
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"{len(found)} spans written to {out}")


def ordered(spans: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """The spans as rows: each trace depth first from its root (children by start), the write's trace
    (the one with a server span) first; with each span's depth."""
    by_parent: dict[str, list[dict[str, Any]]] = {}
    ids = {span["span_id"] for span in spans}
    for span in sorted(spans, key=lambda s: s["start_ns"]):
        parent = span["parent_span_id"] if span["parent_span_id"] in ids else ""
        by_parent.setdefault(parent, []).append(span)
    roots = sorted(by_parent.get("", []), key=lambda s: (s["kind"] != "server", s["start_ns"]))
    rows: list[tuple[int, dict[str, Any]]] = []

    def walk(span: dict[str, Any], depth: int) -> None:
        rows.append((depth, span))
        for child in by_parent.get(span["span_id"], []):
            walk(child, depth + 1)

    for root in roots:
        walk(root, 0)
    return rows


LABELLED = {
    "memoryos.shard": "shard",
    "memoryos.batch.size": "batch",
    "memoryos.queue.wait_s": "queue wait s",
    "gen_ai.memory.record.id": "pages",
    "memoryos.batch.tokens": "tokens",
    "memoryos.batch.padded_tokens": "padded",
}
"""Attributes written beside a bar (ids are pseudonyms; no span carries memory text)."""


def render(source: Path, out: Path) -> None:
    """Draw the JSON's spans as a waterfall PNG at `out`."""
    import matplotlib

    matplotlib.use("Agg")  # files only
    import matplotlib.pyplot as plt

    record = json.loads(source.read_text())
    rows = ordered(record["spans"])
    start = min(span["start_ns"] for _, span in rows)
    end = max(span["end_ns"] for _, span in rows)
    services = sorted({span["service"] for _, span in rows})
    colours = dict(zip(services, ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3"], strict=False))
    figure, axes = plt.subplots(figsize=(13, 0.5 * len(rows) + 1.8))
    position = {}
    labels = []
    for row, (depth, span) in enumerate(rows):
        left = (span["start_ns"] - start) / 1e6
        width = max((span["end_ns"] - span["start_ns"]) / 1e6, 0.05)
        axes.barh(row, width, left=left, color=colours[span["service"]], height=0.6)
        labels.append(f"trace {span['trace_id'][:8]}  " + "   " * depth + f"{span['name']} ({span['kind']})")
        details = [
            f"{label}={span['attributes'][name]}"
            for name, label in LABELLED.items()
            if name in span["attributes"]
        ]
        text = f"{width:.2f} ms" + ("  " + ", ".join(details) if details else "")
        axes.text(left + width, row, "  " + text, va="center", fontsize=7)
        position[span["span_id"]] = (row, left)
    for row, (_, span) in enumerate(rows):
        if span["name"] not in LINKING_SPANS:
            continue
        for link in span["links"]:  # the write's span links its batch back: one line per pair
            if link["span_id"] in position:
                other_row, other_left = position[link["span_id"]]
                axes.annotate(
                    "link",
                    xy=(other_left, other_row),
                    xytext=((span["start_ns"] - start) / 1e6 - 0.02 * (end - start) / 1e6, row),
                    fontsize=7,
                    ha="right",
                    arrowprops={"arrowstyle": "->", "linestyle": "--", "color": "grey"},
                )
    axes.set_yticks(range(len(rows)), labels, fontsize=8, family="monospace")
    for tick in axes.get_yticklabels():
        tick.set_horizontalalignment("left")  # the tree's indentation shows
    axes.tick_params(axis="y", pad=5 + 4.9 * max(map(len, labels)))  # monospace 8 pt: ~4.8 pt a character
    axes.invert_yaxis()
    axes.set_xlabel("ms since the request's first span")
    axes.set_xlim(0, (end - start) / 1e6 * 2.1)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[name]) for name in services]
    axes.legend(handles, services, loc="upper right", fontsize=8)
    axes.set_title(
        "One write in Redis mode: API -> Redis stream -> worker -> its applied batch -> its embedding\n"
        "(the batcher's embed, the engine's batch): each batch a trace of its own, linked",
        fontsize=10,
    )
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
    print(f"{len(rows)} spans drawn to {out}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    captured = commands.add_parser("capture", help="one real write's trace to JSON")
    captured.add_argument("--out", type=Path, required=True)
    drawn = commands.add_parser("render", help="the JSON's trace to a PNG")
    drawn.add_argument("--json", type=Path, required=True)
    drawn.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.command == "capture":
        capture(args.out)
    else:
        if not args.json.is_file():
            parser.error(f"--json: no file {args.json}")
        render(args.json, args.out)


if __name__ == "__main__":
    main()
