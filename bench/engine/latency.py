"""Engine figures: add_memory and retrieve latency as the store grows, batch ingest, bytes and LLM calls."""

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from bench.corpus import ReusingEmbedder, dev_conversations, exchanges
from memoryos.config import MemoryConfig
from memoryos.embedding.base import Embedder
from memoryos.facade.memoryos import Memoryos

FILL_BATCH = 500
TIMED_CALLS = 200


def _percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    return {
        "p50_ms": round(statistics.median(ordered), 2),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 2),
    }


def _timed(calls: list[Callable[[], Any]]) -> list[float]:
    samples = []
    for call in calls:
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def latency_at_size(pages: int, model: Embedder, workdir: Path) -> dict[str, Any]:
    """Fill a space to `pages`, then time single add_memory and retrieve calls with real encodes."""
    conversations = dev_conversations()
    # Texts carry the size so no size reuses an earlier size's cached embedding: every timed call encodes.
    questions = [f"{q.question} ({pages:,} pages)" for c in conversations for q in c.qa][:TIMED_CALLS]
    fill = exchanges(pages, conversations)
    reusing = ReusingEmbedder(model)
    memory = Memoryos(
        user_id=f"bench{pages}", openai_api_key=None, data_storage_path=workdir, embedder=reusing
    )
    started = time.perf_counter()
    for start in tqdm(range(0, pages, FILL_BATCH), desc=f"fill {pages:,} pages", unit="batch", leave=False):
        memory.add_memories(fill[start : start + FILL_BATCH])
    memory.flush()
    fill_s = time.perf_counter() - started
    calls_per_turn = sum(u.calls for u in memory.llm.usage.values()) / pages
    memory.close()
    started = time.perf_counter()
    memory = Memoryos(user_id=f"bench{pages}", openai_api_key=None, data_storage_path=workdir, embedder=model)
    memory.close()
    open_s = time.perf_counter() - started
    memory = Memoryos(user_id=f"bench{pages}", openai_api_key=None, data_storage_path=workdir, embedder=model)
    retrieve = _timed([lambda q=q: memory.retrieve(q) for q in questions])
    new_turns = [
        (f"new note {i} at {pages}: {t['user_input']}", t["agent_response"])
        for i, t in enumerate(exchanges(TIMED_CALLS, conversations))
    ]
    add = _timed([lambda u=u, a=a: memory.add_memory(u, a) for u, a in new_turns])
    memory.flush()
    searchable = _timed(
        [lambda u=u, a=a: (memory.add_memory(f"again {u}", a), memory.flush()) for u, a in new_turns]
    )
    encode = _timed([lambda u=u: model.encode([f"{u} encode-only at {pages}"]) for u, _ in new_turns])
    encode_query = _timed([lambda q=q: model.encode([f"{q} query-only"], is_query=True) for q in questions])
    stored = memory.stats()
    total_pages = stored.short_term_pages + stored.mid_term_pages + stored.archived_pages
    memory.close()
    return {
        "pages": pages,
        "fill_s": round(fill_s, 1),
        "open_and_close_s": round(open_s, 3),
        "retrieve": _percentiles(retrieve),
        "add_memory": _percentiles(add),
        "add_until_searchable": _percentiles(searchable),
        "encode_one": _percentiles(encode),
        "encode_query": _percentiles(encode_query),
        "bytes_per_page": round(_directory_bytes(workdir / "default" / f"bench{pages}") / total_pages),
        "llm_calls_per_turn": round(calls_per_turn, 2),
        "segments": len(stored.segments),
    }


def ingest_throughput(model: Embedder, batch_sizes: tuple[int, ...], turns: int) -> list[dict[str, Any]]:
    """Turns per second through `add_memories` until searchable (real encodes), at several batch sizes."""
    rows = []
    sample = exchanges(turns, dev_conversations())
    for batch in batch_sizes:
        with tempfile.TemporaryDirectory() as scratch:
            memory = Memoryos(
                user_id=f"ingest{batch}", openai_api_key=None, data_storage_path=scratch, embedder=model
            )
            started = time.perf_counter()
            for start in range(0, turns, batch):
                memory.add_memories(
                    [
                        {**t, "user_input": f"{t['user_input']} [{batch}]"}
                        for t in sample[start : start + batch]
                    ]
                )
            memory.flush()  # embedded and consolidated, not just accepted
            elapsed = time.perf_counter() - started
            memory.close()
        rows.append({"batch_size": batch, "turns": turns, "turns_per_s": round(turns / elapsed, 1)})
    return rows


def run_engine(sizes: list[int], config: MemoryConfig, model: Embedder) -> dict[str, Any]:
    results: dict[str, Any] = {"latency": [], "ingest": []}
    for pages in sizes:
        with tempfile.TemporaryDirectory() as scratch:
            results["latency"].append(latency_at_size(pages, model, Path(scratch)))
            print(results["latency"][-1], flush=True)
    results["ingest"] = ingest_throughput(model, (1, 16, 64, 256), turns=512)
    return results
