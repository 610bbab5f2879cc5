"""`python -m bench.engine.index`: vector index figures (build, memory, open, search latency, recall@10).

Writes docs/benchmarks/index.{json,md}. Backends: FAISS flat (exact), FAISS IVF (`FaissIndex` past its
ANN threshold, nprobe self-calibrated), and ChromaDB (HNSW) at the smaller sizes.

Data. Recall is measured on embeddings of real text: every distinct LoCoMo dev turn, sentence, clause,
caption, observation and summary (about 9.3k texts) embedded with the configured model (all-MiniLM-L6-v2,
384-d), queried with the LoCoMo questions (not in the index). That is the largest real set at hand:
embedding a million texts would take ~2 hours on 2 cores. Larger sizes are the real vectors plus copies
of them with Gaussian noise (sigma per dimension `NOISE_SIGMA`), renormalized; a copy's cosine to its
source is about 0.86. Such copies cluster around real points, which is kinder to IVF than a million
distinct texts would be, so the 100k and 1M recall figures are an upper bound of the real one; the
real-only row is the honest one. Every row says which data it used.

Threads. Single-query latency runs with one faiss OpenMP thread (the engine's default); batch-of-64
latency with one and with two.
"""

import argparse
import contextlib
import ctypes
import hashlib
import json
import os
import platform
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faiss
import numpy as np
from tqdm import tqdm

from bench.corpus import locomo_raw
from bench.report import index_markdown
from memoryos.config import MemoryConfig
from memoryos.embedding.shared import shared_embedder
from memoryos.eval.locomo import DEV_SAMPLE_IDS
from memoryos.storage.vectors.faiss_index import FaissIndex

OUT_DIR = Path(__file__).resolve().parents[2] / "docs" / "benchmarks"
CACHE_DIR = Path(__file__).resolve().parents[1] / "out"
DEFAULT_SIZES = (10_000, 100_000, 1_000_000)
CHROMA_MAX_SIZE = 100_000
"""Chroma's adds run at ~2k vectors/s here; a million would take ~10 minutes and HNSW memory beyond that."""
NOISE_SIGMA = 0.03
K = 10
BATCH = 64
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_CLAUSE = re.compile(r"[,;:]\s+|\s+-\s+")
_DIA_ID = re.compile(r"D\d+:\d+")


def real_texts() -> tuple[list[str], list[str]]:
    """(corpus texts, question texts) from the LoCoMo dev conversations, deduplicated, questions held out."""
    samples = [s for s in json.loads(locomo_raw().read_text()) if s["sample_id"] in DEV_SAMPLE_IDS]
    texts: list[str] = []
    questions: list[str] = []
    for sample in samples:
        for turns in sample["conversation"].values():
            if isinstance(turns, list):
                for turn in turns:
                    texts += [turn["text"], turn.get("blip_caption") or ""]
        for qa in sample["qa"]:
            questions.append(qa["question"])
            texts.append(qa["answer"] if isinstance(qa.get("answer"), str) else "")
        for key in ("observation", "event_summary", "session_summary"):
            texts += [t for t in _strings(sample[key]) if not _DIA_ID.fullmatch(t)]
    sentences = [s for t in texts for s in _SENTENCE.split(t)]
    clauses = [c for s in sentences for c in _CLAUSE.split(s) if len(c.split()) >= 4]
    held_out = set(questions)
    corpus = sorted({t.strip() for t in [*texts, *sentences, *clauses] if len(t.split()) >= 3} - held_out)
    return corpus, sorted(held_out)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return [s for item in items for s in _strings(item)]


def real_embeddings(config: MemoryConfig) -> tuple[np.ndarray, np.ndarray, str]:
    """Unit vectors of the corpus and the questions, cached in bench/out/ (about a minute to compute)."""
    corpus, questions = real_texts()
    digest = hashlib.sha256(
        "\n".join([config.embedding_model_name, *corpus, *questions]).encode()
    ).hexdigest()
    cache = CACHE_DIR / f"index-embeddings-{digest[:16]}.npz"
    if cache.exists():
        saved = np.load(cache)
        return saved["corpus"], saved["questions"], config.embedding_model_name
    model = shared_embedder(config)
    started = time.perf_counter()
    corpus_vectors = model.encode(corpus).astype(np.float32)
    question_vectors = model.encode(questions, is_query=True).astype(np.float32)
    print(f"embedded {len(corpus) + len(questions):,} texts in {time.perf_counter() - started:.0f} s")
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    np.savez(cache, corpus=corpus_vectors, questions=question_vectors)
    return corpus_vectors, question_vectors, model.name


def scaled(real: np.ndarray, size: int, seed: int = 0) -> np.ndarray:
    """`size` unit vectors: the real ones first, then noisy renormalized copies of random real ones."""
    out = np.empty((size, real.shape[1]), dtype=np.float32)
    kept = min(size, len(real))
    out[:kept] = real[:kept]
    rng = np.random.default_rng(seed)
    for start in range(kept, size, 100_000):
        stop = min(size, start + 100_000)
        rows = real[rng.integers(0, len(real), stop - start)]
        rows = rows + NOISE_SIGMA * rng.standard_normal(rows.shape, dtype=np.float32)
        out[start:stop] = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return out


def _rss_bytes() -> int:
    """Resident bytes now, after handing freed heap back to the OS so earlier garbage does not count."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _percentiles(samples_s: list[float]) -> dict[str, float | int]:
    ordered = sorted(samples_s)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(p99 * 1000, 3),
        "samples": len(ordered),
    }


def _timed(call: Callable[[], object], repeats: int) -> dict[str, float | int]:
    call()  # warm-up: first-touch page faults and lazy allocations are not search latency
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return _percentiles(samples)


def _recall(found: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(set(f[:K]) & set(e[:K])) / K for f, e in zip(found, exact, strict=True)]))


def _latencies(
    search: Callable[[np.ndarray, int], object], queries: np.ndarray, slow: bool
) -> dict[str, Any]:
    """Single-query (1 thread) and batch-of-64 (1 and 2 threads) latency percentiles."""
    single_repeats, batch_repeats = (40, 5) if slow else (300, 30)
    faiss.omp_set_num_threads(1)
    cursor = iter(range(10**9))
    single = _timed(lambda: search(queries[next(cursor) % len(queries)][None, :], K), single_repeats)
    batch = queries[:BATCH]
    batch_1t = _timed(lambda: search(batch, K), batch_repeats)
    faiss.omp_set_num_threads(2)
    batch_2t = _timed(lambda: search(batch, K), batch_repeats)
    faiss.omp_set_num_threads(1)
    return {"single": single, "batch64_1t": batch_1t, "batch64_2t": batch_2t}


def bench_faiss(
    kind: str, vectors: np.ndarray, queries: np.ndarray, exact: np.ndarray, workdir: Path
) -> dict[str, Any]:
    """Build (one add of every vector, as a space reaching this size rebuilds), save, reload, search."""
    size, dim = vectors.shape
    ids = np.arange(1, size + 1, dtype=np.int64)
    faiss.omp_set_num_threads(2)  # builds use both cores, as a background rebuild would
    rss_before = _rss_bytes()
    started = time.perf_counter()
    index = FaissIndex(dim, ann_threshold=1 if kind == "ivf" else size + 1, gpu_policy="never")
    index.add(ids, vectors)
    index.wait_for_rebuild()  # IVF builds run in the background; the build time is until it serves
    build_s = time.perf_counter() - started
    rss_delta = _rss_bytes() - rss_before
    snapshot = workdir / f"{kind}-{size}.faiss"
    index.save(snapshot, size)
    del index
    started = time.perf_counter()
    index, _ = FaissIndex.load(
        snapshot, dim, ann_threshold=1 if kind == "ivf" else size + 1, gpu_policy="never"
    )
    load_s = time.perf_counter() - started
    stats = index.stats()
    faiss.omp_set_num_threads(2)
    found = index.search(queries, K).ids - 1
    row = {
        "backend": f"faiss-{kind}",
        "build_s": round(build_s, 2),
        "index_bytes": snapshot.stat().st_size,
        "rss_delta_bytes": rss_delta,
        "open_s": round(load_s, 3),
        **_latencies(index.search, queries, slow=kind == "flat" and size >= 500_000),
        "recall_at_10": round(_recall(found, exact), 4),
        "calibrated_recall": stats["measured_recall"],
        "nlist": stats["nlist"],
        "nprobe": stats["nprobe"],
    }
    snapshot.unlink()
    if kind != "ivf":
        return row
    return row | _recalibrated_on_questions(index, queries, exact)


def _recalibrated_on_questions(index: FaissIndex, queries: np.ndarray, exact: np.ndarray) -> dict[str, Any]:
    """The engine's own recalibration: half the questions are searched (the index keeps them as recent
    queries), `recalibrate()` re-picks nprobe on them in the background, and recall is measured on the
    other half, which the calibration never saw."""
    tune, held_out = np.arange(0, len(queries), 2), np.arange(1, len(queries), 2)
    for start in range(0, len(tune), BATCH):
        index.search(queries[tune[start : start + BATCH]], K)
    started = time.perf_counter()
    if not index.recalibrate():
        raise RuntimeError("recalibration did not start: too few recent queries or a job in flight")
    index.wait_for_rebuild()
    recalibrate_s = time.perf_counter() - started
    stats = index.stats()
    return {
        "query_calibrated": {
            "nprobe": stats["nprobe"],
            "calibrated_recall": stats["measured_recall"],
            "recalibrate_s": round(recalibrate_s, 2),
            "recall_at_10_held_out": round(
                _recall(index.search(queries[held_out], K).ids - 1, exact[held_out]), 4
            ),
            **_latencies(index.search, queries[held_out], slow=False),
        }
    }


def bench_chroma(
    vectors: np.ndarray, queries: np.ndarray, exact: np.ndarray, workdir: Path
) -> dict[str, Any]:
    from memoryos.storage.vectors.chroma_index import ChromaIndex

    size, dim = vectors.shape
    ids = np.arange(1, size + 1, dtype=np.int64)
    rss_before = _rss_bytes()
    started = time.perf_counter()
    index = ChromaIndex.create(workdir / f"chroma-{size}", dim)
    for start in range(0, size, 5000):  # as a space would feed it: many writes, each durable
        index.add(ids[start : start + 5000], vectors[start : start + 5000])
    build_s = time.perf_counter() - started
    rss_delta = _rss_bytes() - rss_before
    index.save(workdir / f"chroma-{size}.json", size)
    index.close()
    started = time.perf_counter()
    index, _ = ChromaIndex.load(workdir / f"chroma-{size}.json", workdir / f"chroma-{size}", dim)
    load_s = time.perf_counter() - started
    found = index.search(queries, K).ids - 1
    row = {
        "backend": "chroma",
        "build_s": round(build_s, 2),
        "index_bytes": sum(f.stat().st_size for f in (workdir / f"chroma-{size}").rglob("*") if f.is_file()),
        "rss_delta_bytes": rss_delta,
        "open_s": round(load_s, 3),
        **_latencies(index.search, queries, slow=False),
        "recall_at_10": round(_recall(found, exact), 4),
        "calibrated_recall": None,
        "nlist": None,
        "nprobe": None,
    }
    index.close()
    return row


def run_index_bench(sizes: list[int], chroma_max_size: int = CHROMA_MAX_SIZE) -> dict[str, Any]:
    """Every backend at every size, plus a real-vectors-only row; the function `python -m bench` may call."""
    config = MemoryConfig(torch_threads=2)
    real, queries, model_name = real_embeddings(config)
    runs: list[dict[str, Any]] = []
    load_before = os.getloadavg()[0]
    datasets = [("real", len(real)), *(("real+noise" if s > len(real) else "real", s) for s in sizes)]
    steps = sum(3 if size <= chroma_max_size else 2 for _, size in datasets)
    with (
        tempfile.TemporaryDirectory(prefix="bench-index-") as scratch,
        tqdm(total=steps, desc="index runs", unit="run") as progress,
    ):
        workdir = Path(scratch)
        for data, size in datasets:
            vectors = scaled(real, size)
            faiss.omp_set_num_threads(2)
            exact = faiss.knn(queries, vectors, K, metric=faiss.METRIC_INNER_PRODUCT)[1]
            backends = ["flat", "ivf", *(["chroma"] if size <= chroma_max_size else [])]
            for backend in backends:
                started = time.perf_counter()
                if backend == "chroma":
                    row = bench_chroma(vectors, queries, exact, workdir)
                else:
                    row = bench_faiss(backend, vectors, queries, exact, workdir)
                row = {"size": size, "data": data, "real_vectors": min(size, len(real)), **row}
                runs.append(row)
                progress.update()
                progress.write(
                    f"{size:>9,} {data:<10} {row['backend']:<11} in {time.perf_counter() - started:.0f} s: "
                    f"single p50 {row['single']['p50_ms']} ms, recall@10 {row['recall_at_10']}"
                )
            del vectors
    copies = scaled(real[:2000], 4000)[2000:]
    rng = np.random.default_rng(0)
    return {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "faiss": faiss.__version__,
        "embedding_model": model_name,
        "dim": int(real.shape[1]),
        "real_vectors": len(real),
        "queries": f"{len(queries)} LoCoMo questions (held out of the index)",
        "noise_sigma": NOISE_SIGMA,
        "noisy_copy_cosine_to_source": round(float(np.mean(np.max(copies @ real[:2000].T, axis=1))), 3),
        "real_nearest_neighbour_cosine": round(float(np.median(_nearest_other(real, rng))), 3),
        "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "runs": runs,
    }


def _nearest_other(vectors: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    sample = vectors[rng.choice(len(vectors), 500, replace=False)]
    scores = faiss.knn(sample, vectors, 2, metric=faiss.METRIC_INNER_PRODUCT)[0]
    return scores[:, 1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES))
    parser.add_argument("--chroma-max-size", type=int, default=CHROMA_MAX_SIZE, help="0 skips Chroma")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args()
    write_index_results(
        run_index_bench([int(s) for s in args.sizes.split(",")], args.chroma_max_size), args.out
    )


def write_index_results(results: dict[str, Any], out: Path) -> None:
    """index.json and index.md under `out`, and the table on stdout."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "index.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "index.md").write_text(index_markdown(results))
    print(index_markdown(results))


if __name__ == "__main__":
    main()
