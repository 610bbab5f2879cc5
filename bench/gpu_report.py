"""`python -m bench.gpu_report`: embedding and FAISS throughput as a fraction of the device's own ceilings.

Two ceilings are measured once per device: dense matmul FLOP/s (fp16 on CUDA, and fp32 too; fp32 on CPU;
a timed large square matmul, 2·n³ FLOPs) and memory bandwidth (a timed large copy, 2 bytes moved per
byte copied). Then:

- Embedding: tokens/s vs batch size per model, in fp16 on CUDA. Tokens are counted with the model's own
  tokenizer (real tokens, no padding); FLOPs ≈ 2 × non-embedding parameters × tokens (attention's
  sequence-squared term and padding are not counted, so the fraction is a lower bound of the hardware
  use). `--architectures` adds bge-m3 / Qwen3-Embedding-0.6B built from their configurations with random
  weights where the weights cannot be had (`bench/gpu_models.py`; every such row is labelled).
- Engine: the engine's own page embedding (`create_embedder`, `SentenceTransformerEmbedder.encode`) over
  LoCoMo page texts in chunks of `embedding_batch_size`, as background ingest calls it, against the raw
  `model.encode` of the same texts at several batch sizes. The embedder's LRU cache is off so repeated
  passes reach the model (the pages are 4 passes over the 756 LoCoMo dev exchanges).
- Batcher: the engine's `EmbeddingBatcher` fed by many sources at once (`MemoryPages`, in-memory page
  sources of 3 LoCoMo pages each, all notified together), timed from the notifications to the last vector
  applied, with the engine's default limits and larger ones; beside it, on the same texts, the raw
  `model.encode` at batch 1, at several batch sizes (all texts in one call, sorted by length: the best
  case) and called per chunk of 64 (what padding costs a batch whose texts arrive together), and the
  engine embedder's own `encode` per chunk of 64, with and without the tokenizers' thread pool and with
  the truncation check of before the fix (every batch tokenized a second time) emulated.
- Spaces: the whole engine, `Memoryos` spaces (offline LLM, data under a temporary directory) sharing one
  embedder and one scheduler, each adding its turns at once from its own thread and then reading them
  back with `retrieve` (which waits for their vectors): turns/s until every space finds its turns, and
  the batcher's counters.
- FAISS flat inner-product search on the CPU (fp32 `IndexFlatIP`, and the engine's fp16
  `IndexScalarQuantizer` for small batches), and on the GPU when faiss has one: one query batch reads
  the whole database once, n × dim × bytes, so the bandwidth floor is that over the measured bandwidth;
  also shown is 2·n·dim·queries FLOPs against the matmul ceiling, which binds large batches.
- On CUDA, the same flat search as a torch matmul + top-k (not faiss: no faiss GPU build here), with the
  database resident in fp32 and fp16, queries uploaded and results downloaded inside the timing.

The same script runs on a CUDA machine unchanged. `--tiny` uses all-MiniLM-L6-v2 (bundled), small sizes
and the CPU, finishing in under a minute: that is how it is tested where there is no GPU and no bge-m3/Qwen3 weights.
"""

import argparse
import contextlib
import functools
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.gpu_models import (
    ARCHITECTURES,
    Countdown,
    MemoryPages,
    distinct_page_texts,
    distinct_pairs,
    load_locomo_pairs,
    load_named_model,
    model_loaders,
    page_texts,
    parse_model_spec,
    sample_texts,
)

DEFAULT_MODELS = ("BAAI/bge-m3", "Qwen/Qwen3-Embedding-0.6B", "all-MiniLM-L6-v2")
TINY_MODELS = ("all-MiniLM-L6-v2",)
OUT = Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "gpu_report.json"
TINY_OUT = OUT.with_name("gpu_report-tiny.json")
"""A smoke run never overwrites the real report."""
SECTIONS = ("embedding", "engine", "batcher", "spaces", "faiss", "torch_flat")
"""Measured in this order, after the ceilings (always measured: every fraction is against them)."""
TORCH_SEARCH_CHUNK = 1024
"""Queries per matmul in the torch flat search: bounds the score matrix (1024 × 1M fp32 = 4 GB)."""


class Sizes:
    """Problem sizes: full for a GPU report, tiny for a CPU smoke run."""

    def __init__(self, tiny: bool) -> None:
        self.matmul_n = 1024 if tiny else 8192
        self.copy_bytes = (64 if tiny else 2048) * 2**20
        self.batch_sizes: tuple[int, ...] = (1, 8) if tiny else (1, 8, 32, 128, 512, 2048)
        self.text_words = 16 if tiny else 120
        self.min_texts = 4 if tiny else 256
        self.max_texts = 64 if tiny else 8192
        """Texts per timed pass: 8 batches, within these bounds."""
        self.engine_texts = 32 if tiny else 3024
        self.engine_batch_sizes: tuple[int, ...] = (8, 16) if tiny else (16, 64, 256, 512)
        """Chunk sizes for the engine; each below the 756 distinct pages, so no chunk holds a duplicate."""
        self.raw_batch_sizes: tuple[int, ...] = (8, 32) if tiny else (64, 256, 1024)
        self.faiss_n = 20_000 if tiny else 1_000_000
        self.faiss_dims: tuple[int, ...] = (384,) if tiny else (384, 1024)
        self.faiss_queries: tuple[int, ...] = (1, 16) if tiny else (1, 16, 64, 256, 4096)
        self.sq_max_queries = 16 if tiny else 64
        """The fp16 scalar-quantizer scan has no BLAS path: larger batches would take minutes on a CPU."""
        self.repeats = 3 if tiny else 5
        self.search_repeats = 3
        self.batcher_sources = 8 if tiny else 1000
        self.pages_per_source = 3
        self.batch1_texts = 8 if tiny else 300
        """Texts for the raw batch-1 row (one forward pass each): a prefix of the batcher's texts."""
        self.batcher_raw_batch_sizes: tuple[int, ...] = (8, 24) if tiny else (64, 256, 1024, 3000)
        self.chunk = 8 if tiny else 64
        """Texts per call of the per-chunk rows: the engine's default `embedding_batch_size`."""
        self.batcher_limits: tuple[tuple[int | None, int | None], ...] = (
            ((None, None), (16, None)) if tiny else ((None, None), (256, None), (1024, 131072))
        )
        """(max_batch_size, max_batch_tokens) of each batcher row; None: the engine's default."""
        self.spaces = 3 if tiny else 200
        self.turns_per_space = 2 if tiny else 5
        self.timeout_s = 300.0
        """Longest wait for a pooled run or the spaces to finish: a stuck batcher fails the section."""


def best_seconds(
    run: Callable[[], object], repeats: int, sync: Callable[[], None], *, warm_up: bool = True
) -> float:
    """Fastest of `repeats` timed runs, after one untimed run unless the caller warmed up already: the
    ceiling, not the average."""
    if warm_up:
        run()
        sync()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        sync()
        best = min(best, time.perf_counter() - started)
    return best


def _sync(device: str) -> Callable[[], None]:
    import torch

    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def matmul_ceiling(device: str, n: int, repeats: int, dtype_name: str | None = None) -> dict[str, Any]:
    import torch

    dtype = getattr(torch, dtype_name) if dtype_name else torch.float16 if device == "cuda" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    seconds = best_seconds(lambda: torch.mm(a, b), repeats, _sync(device))
    return {"dtype": str(dtype).removeprefix("torch."), "n": n, "flops_per_s": 2 * n**3 / seconds}


def bandwidth_ceiling(device: str, nbytes: int, repeats: int) -> dict[str, Any]:
    import torch

    source = torch.ones(nbytes // 4, device=device, dtype=torch.float32)
    target = torch.empty_like(source)
    seconds = best_seconds(lambda: target.copy_(source), repeats, _sync(device))
    return {"bytes_copied": nbytes, "bytes_per_s": 2 * nbytes / seconds}


def _non_embedding_params(model: Any) -> int:
    import torch

    embedding = sum(
        p.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()
    )
    return int(sum(p.numel() for p in model.parameters()) - embedding)


def _release(device: str) -> None:
    import gc

    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def embedding_rows(
    models: Sequence[str],
    device: str,
    sizes: Sizes,
    matmul_flops: float,
    *,
    architectures: Sequence[str] = (),
    pairs: Sequence[tuple[str, str]] = (),
    tiny: bool = False,
) -> list[dict[str, Any]]:
    """Rows per model and batch size; a model that cannot be loaded or built gets one row saying why."""
    tokenizer = _minilm_location(models) if architectures else None
    rows: list[dict[str, Any]] = []
    for label, fields, load in model_loaders(models, architectures, tokenizer, device, tiny):
        try:
            model = load()
        except Exception as error:  # a missing model is reported, not fatal: the others still run
            rows.append({"model": label, **fields, "skipped": f"{type(error).__name__}: {str(error)[:200]}"})
            continue
        rows += [{**row, **fields} for row in _model_rows(label, model, device, sizes, matmul_flops, pairs)]
        del model
        _release(device)
    return rows


def _minilm_location(models: Sequence[str]) -> str:
    """The MiniLM whose tokenizer the architecture-only models use: the first --models entry naming it."""
    for spec in models:
        label, location = parse_model_spec(spec)
        if "minilm" in label.lower():
            return location
    return parse_model_spec("all-MiniLM-L6-v2")[1]


def _count_tokens(model: Any, texts: Sequence[str]) -> int:
    encoded = model.tokenizer(list(texts), truncation=True, max_length=model.max_seq_length)
    return sum(len(ids) for ids in encoded["input_ids"])


def _model_rows(
    name: str,
    model: Any,
    device: str,
    sizes: Sizes,
    matmul_flops: float,
    pairs: Sequence[tuple[str, str]],
) -> list[dict[str, Any]]:
    import torch

    params = _non_embedding_params(model)
    largest = max(sizes.batch_sizes)
    rows = []
    with torch.inference_mode():
        model.encode(sample_texts(pairs, largest, sizes.text_words), batch_size=largest)  # warm-up
        for batch_size in sizes.batch_sizes:
            count = min(max(sizes.min_texts, 8 * batch_size), max(sizes.max_texts, batch_size))
            texts = sample_texts(pairs, count, sizes.text_words)
            tokens = _count_tokens(model, texts)
            seconds = best_seconds(
                functools.partial(model.encode, texts, batch_size=batch_size),
                max(1, sizes.repeats - 2),
                _sync(device),
                warm_up=False,
            )
            flops = 2 * params * tokens / seconds
            rows.append(
                {
                    "model": name,
                    "device": device,
                    "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
                    "non_embedding_params": params,
                    "batch_size": batch_size,
                    "texts": len(texts),
                    "tokens": tokens,
                    "seconds": seconds,
                    "texts_per_s": len(texts) / seconds,
                    "tokens_per_s": tokens / seconds,
                    "flops_per_s": flops,
                    "fraction_of_matmul": flops / matmul_flops,
                }
            )
    return rows


def engine_rows(
    spec: str, device: str, sizes: Sizes, pairs: Sequence[tuple[str, str]]
) -> list[dict[str, Any]]:
    """The engine's page embedding at several `embedding_batch_size`s, then the raw model's encode."""
    import torch

    from memoryos.config import MemoryConfig
    from memoryos.embedding import create_embedder

    label, location = parse_model_spec(spec)
    texts = page_texts(pairs, sizes.engine_texts)
    threads = torch.get_num_threads()  # the embedder sets torch's threads at load; restored below
    rows: list[dict[str, Any]] = []
    try:
        raw = load_named_model(location, device)
        tokens = _count_tokens(raw, texts)
        common = {"model": label, "device": device, "texts": len(texts), "tokens": tokens}
        common["distinct_texts"] = len(set(texts))
        with torch.inference_mode():
            for batch_size in sizes.raw_batch_sizes:
                run = functools.partial(
                    raw.encode, texts, batch_size=batch_size, show_progress_bar=False, convert_to_numpy=True
                )
                seconds = best_seconds(run, sizes.repeats, _sync(device))
                rows.append(_throughput_row("model.encode", batch_size, seconds, common))
        del raw
        _release(device)
        for batch_size in sizes.engine_batch_sizes:
            config = MemoryConfig(
                embedding_device=device,
                embedding_model_name=location,
                embedding_batch_size=batch_size,
                embedding_cache_size=0,
            )
            embedder = create_embedder(config)
            assert embedder.dim > 0  # loads the model outside the timing

            def ingest(embedder: Any = embedder, batch_size: int = batch_size) -> None:
                for start in range(0, len(texts), batch_size):
                    embedder.encode(texts[start : start + batch_size])

            seconds = best_seconds(ingest, sizes.repeats, _sync(device))
            rows.append(_throughput_row("engine embedder", batch_size, seconds, common))
            del embedder, ingest
            _release(device)
    finally:
        torch.set_num_threads(threads)
    return rows


def _throughput_row(path: str, batch_size: int, seconds: float, common: dict[str, Any]) -> dict[str, Any]:
    return {
        **common,
        "path": path,
        "batch_size": batch_size,
        "seconds": seconds,
        "texts_per_s": common["texts"] / seconds,
        "tokens_per_s": common["tokens"] / seconds,
    }


@contextlib.contextmanager
def tokenizers_parallelism(value: str | None) -> Iterator[None]:
    """`TOKENIZERS_PARALLELISM` set to `value` (None: unset, the tokenizers' default of a thread pool) while
    inside; the tokenizers read it on every call, so a loaded model follows it."""
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    if value is None:
        os.environ.pop("TOKENIZERS_PARALLELISM", None)
    else:
        os.environ["TOKENIZERS_PARALLELISM"] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = before


def _engine_parallelism(device: str) -> str | None:
    """What the engine's embedder leaves `TOKENIZERS_PARALLELISM` at on `device` (a value set beforehand
    wins there, so the bench sets it explicitly for every row)."""
    return None if device.startswith("cuda") else "false"


def batcher_rows(
    spec: str, device: str, sizes: Sizes, pairs: Sequence[tuple[str, str]]
) -> list[dict[str, Any]]:
    """The engine's `EmbeddingBatcher` over many in-memory sources, next to the raw model and the engine
    embedder on the same texts (see the module docstring)."""
    import torch

    from memoryos.config import MemoryConfig
    from memoryos.embedding import create_embedder
    from memoryos.embedding.sentence_transformers_backend import SentenceTransformerEmbedder

    label, location = parse_model_spec(spec)
    texts = distinct_page_texts(pairs, sizes.batcher_sources * sizes.pages_per_source)
    threads = torch.get_num_threads()  # the embedder sets torch's threads at load; restored below
    sync = _sync(device)
    rows: list[dict[str, Any]] = []
    try:
        raw = load_named_model(location, device)
        tokens = _count_tokens(raw, texts)
        common = {"model": label, "device": device, "texts": len(texts), "tokens": tokens}
        with torch.inference_mode(), tokenizers_parallelism(None):
            first = texts[: sizes.batch1_texts]
            single = {**common, "texts": len(first), "tokens": _count_tokens(raw, first)}
            run = functools.partial(raw.encode, first, batch_size=1, show_progress_bar=False)
            seconds = best_seconds(run, max(1, sizes.repeats - 2), sync)
            rows.append(_throughput_row("model.encode", 1, seconds, single) | {"parallelism": "default"})
            raw_rows = []
            for batch_size in sizes.batcher_raw_batch_sizes:
                run = functools.partial(raw.encode, texts, batch_size=batch_size, show_progress_bar=False)
                seconds = best_seconds(run, max(1, sizes.repeats - 2), sync)
                raw_rows.append(_throughput_row("model.encode", batch_size, seconds, common))
            best = max(raw_rows, key=lambda row: row["texts_per_s"])
            rows += [row | {"parallelism": "default", "best": row is best} for row in raw_rows]

            def raw_chunks(model: Any = raw) -> None:
                for start in range(0, len(texts), sizes.chunk):
                    model.encode(
                        texts[start : start + sizes.chunk], batch_size=sizes.chunk, show_progress_bar=False
                    )

            seconds = best_seconds(raw_chunks, max(1, sizes.repeats - 2), sync)
            rows.append(
                _throughput_row("model.encode per chunk", sizes.chunk, seconds, common)
                | {"parallelism": "default"}
            )
        del raw
        _release(device)
        config = MemoryConfig(
            embedding_device=device,
            embedding_model_name=location,
            embedding_batch_size=sizes.chunk,
            embedding_cache_size=0,
        )
        embedder = create_embedder(config)
        assert isinstance(embedder, SentenceTransformerEmbedder)
        assert embedder.dim > 0  # loads the model outside the timing
        rows += _engine_chunk_rows(embedder, texts, sizes, common, sync)
        with tokenizers_parallelism(_engine_parallelism(device)):
            reference = embedder.encode(texts)
            for max_size, max_tokens, reuse in [(*limit, False) for limit in sizes.batcher_limits] + [
                (None, None, True)
            ]:
                rows.append(
                    _pooled_row(embedder, texts, sizes, config, max_size, max_tokens, common, sync, reuse)
                )
                rows[-1]["max_abs_diff_vs_engine"] = float(np.abs(rows[-1].pop("vectors") - reference).max())
                rows[-1]["parallelism"] = _engine_parallelism(device) or "default"
        del embedder
        _release(device)
    finally:
        torch.set_num_threads(threads)
    return rows


def _engine_chunk_rows(
    embedder: Any, texts: list[str], sizes: Sizes, common: dict[str, Any], sync: Callable[[], None]
) -> list[dict[str, Any]]:
    """The engine embedder per chunk of `sizes.chunk`: as fixed, with and without the tokenizers' pool,
    and with the check before the fix (every chunk tokenized again, no pool) emulated."""
    model = embedder._loaded_model()

    def fixed() -> None:
        for start in range(0, len(texts), sizes.chunk):
            embedder.encode(texts[start : start + sizes.chunk])

    def before_fix() -> None:
        for start in range(0, len(texts), sizes.chunk):
            chunk = texts[start : start + sizes.chunk]
            embedder._count_truncated(model, chunk, model.max_seq_length)  # what it did for every batch
            embedder.encode(chunk)

    def in_a_new_thread() -> None:  # as each pooled run's batcher thread (a diagnostic)
        worker = threading.Thread(target=fixed, name="gpu-report-chunks")
        worker.start()
        worker.join()

    rows = []
    for path, run, parallelism in (
        ("engine embedder, check before the fix (emulated)", before_fix, "false"),
        ("engine embedder", fixed, "false"),
        ("engine embedder", fixed, None),
        ("engine embedder, each run in a new thread", in_a_new_thread, None),
    ):
        with tokenizers_parallelism(parallelism):
            seconds = best_seconds(run, max(1, sizes.repeats - 2), sync)
        rows.append(
            _throughput_row(path, sizes.chunk, seconds, common) | {"parallelism": parallelism or "default"}
        )
    return rows


def _pooled_row(
    embedder: Any,
    texts: list[str],
    sizes: Sizes,
    config: Any,
    max_size: int | None,
    max_tokens: int | None,
    common: dict[str, Any],
    sync: Callable[[], None],
    reuse: bool = False,
) -> dict[str, Any]:
    """The fastest of a few pooled runs: every source notified at once, timed to the last vector applied.
    `config` is the embedder's (its `embedding_batch_size` is the sub-batch of each encode call). Each run
    starts a new batcher (and so a new thread), unless `reuse`: then one batcher serves the warm-up and
    every timed run, as the engine's one batcher thread per model does."""
    from memoryos.config import MemoryConfig
    from memoryos.scheduler.batcher import EmbeddingBatcher

    defaults = MemoryConfig()  # the engine's own limits, as its scheduler passes them
    limits: dict[str, Any] = {
        "max_batch_size": max_size or defaults.embedding_batch_size,
        "max_batch_tokens": max_tokens or defaults.embedding_max_batch_tokens,
        "max_wait_ms": defaults.embedding_max_wait_ms,
    }
    per = sizes.pages_per_source
    shared = EmbeddingBatcher(embedder, name="gpu-report-embed", **limits) if reuse else None

    def pooled() -> tuple[float, dict[str, float], np.ndarray]:
        countdown = Countdown(len(texts))
        clock = time.perf_counter
        sources = [MemoryPages(texts[i : i + per], countdown, clock) for i in range(0, len(texts), per)]
        batcher = shared or EmbeddingBatcher(embedder, name="gpu-report-embed", **limits)
        before = batcher.stats()
        try:
            started = clock()
            for source in sources:
                batcher.notify(source)
            if not countdown.done.wait(sizes.timeout_s):
                raise TimeoutError(f"the batcher did not embed {len(texts)} pages in {sizes.timeout_s} s")
            sync()
            after = batcher.stats()
        finally:
            if shared is None:
                batcher.close()
        failed = sum(len(source.errors) for source in sources)
        if failed:
            raise RuntimeError(f"{failed} batches failed: {sources[0].errors[:1]}")
        vectors = np.stack([source.vectors[i] for source in sources for i in sorted(source.vectors)])
        batches = after.batches - before.batches
        counted = {
            "batches": batches,
            "mean_batch_size": (after.texts - before.texts) / batches if batches else 0.0,
            "largest_batch": after.largest_batch,
        }
        return countdown.finished_at - started, counted, vectors

    try:
        pooled()  # warm-up
        seconds, counted, vectors = min(
            (pooled() for _ in range(max(1, sizes.repeats - 2))), key=lambda r: r[0]
        )
    finally:
        if shared is not None:
            shared.close()
    path = "EmbeddingBatcher, one thread for every run" if reuse else "EmbeddingBatcher"
    return {
        **_throughput_row(path, limits["max_batch_size"], seconds, common),
        **limits,
        "sources": len(texts) // per,
        "pages_per_source": per,
        "embedder_batch_size": config.embedding_batch_size,
        **counted,
        "vectors": vectors,
    }


def spaces_rows(
    spec: str, device: str, sizes: Sizes, pairs: Sequence[tuple[str, str]]
) -> list[dict[str, Any]]:
    """`sizes.spaces` real `Memoryos` spaces sharing one embedder and one scheduler, each adding
    `sizes.turns_per_space` turns at once from its own thread, then `retrieve` until it finds them."""
    import torch

    from memoryos import Memoryos
    from memoryos.config import MemoryConfig
    from memoryos.embedding import create_embedder
    from memoryos.llm.offline import OfflineLLM
    from memoryos.scheduler import Scheduler

    label, location = parse_model_spec(spec)
    per = sizes.turns_per_space
    chosen = distinct_pairs(pairs, sizes.spaces * per)
    threads = torch.get_num_threads()
    data_dir = Path(tempfile.mkdtemp(prefix="gpu-report-spaces-"))
    try:
        config = MemoryConfig(data_dir=data_dir, embedding_device=device, embedding_model_name=location)
        embedder = create_embedder(config)
        embedder.encode(["warm-up page"])
        embedder.encode(["warm-up query"], is_query=True)
        scheduler = Scheduler(config, name="gpu-report")
        llm = OfflineLLM()
        started = time.perf_counter()
        spaces = [
            Memoryos.from_config(f"user-{i}", config, embedder=embedder, llm=llm, scheduler=scheduler)
            for i in range(sizes.spaces)
        ]
        opened = time.perf_counter() - started
        go = threading.Barrier(sizes.spaces + 1)
        results: list[tuple[float, float, bool] | BaseException] = [RuntimeError("not run")] * sizes.spaces

        def write_then_read(index: int) -> None:
            memory = spaces[index]
            turns = [
                {"user_input": u, "agent_response": a} for u, a in chosen[index * per : (index + 1) * per]
            ]
            try:
                go.wait()
                page_ids = memory.add_memories(turns)
                written = time.perf_counter()
                context = memory.retrieve(turns[0]["user_input"])
                found = {page.page_id for page in context.short_term_memory + context.retrieved_pages}
                results[index] = (written, time.perf_counter(), set(page_ids) <= found)
            except BaseException as error:
                results[index] = error

        workers = [
            threading.Thread(target=write_then_read, args=(i,), name=f"gpu-report-space-{i}")
            for i in range(sizes.spaces)
        ]
        with tokenizers_parallelism(_engine_parallelism(device)):
            for worker in workers:
                worker.start()
            go.wait()
            started = time.perf_counter()
            for worker in workers:
                worker.join(sizes.timeout_s)
            stats = scheduler.batcher(embedder).stats()
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            raise RuntimeError(f"{len(failures)} spaces failed, e.g. {failures[0]!r}")
        done = [r for r in results if not isinstance(r, BaseException)]
        searchable = max(r[1] for r in done) - started
        closing = time.perf_counter()
        for memory in spaces:
            memory.close()
        scheduler.close()
        closed = time.perf_counter() - closing
        turns = sizes.spaces * per
        return [
            {
                "model": label,
                "device": device,
                "path": "Memoryos spaces",
                "spaces": sizes.spaces,
                "turns_per_space": per,
                "turns": turns,
                "parallelism": _engine_parallelism(device) or "default",
                "open_seconds": opened,
                "written_seconds": max(r[0] for r in done) - started,
                "seconds": searchable,
                "turns_per_s": turns / searchable,
                "all_found": all(r[2] for r in done),
                "close_seconds": closed,
                "max_batch_size": config.embedding_batch_size,
                "max_batch_tokens": config.embedding_max_batch_tokens,
                "max_wait_ms": config.embedding_max_wait_ms,
                "batches": stats.batches,
                "batched_texts": stats.texts,
                "queries": stats.queries,
                "mean_batch_size": stats.mean_batch_size,
                "largest_batch": stats.largest_batch,
            }
        ]
    finally:
        torch.set_num_threads(threads)
        shutil.rmtree(data_dir, ignore_errors=True)


def faiss_gpus() -> int:
    import faiss

    return int(faiss.get_num_gpus()) if hasattr(faiss, "get_num_gpus") else 0


def faiss_rows(sizes: Sizes, ceilings: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    import faiss

    rows = []
    for dim in sizes.faiss_dims:
        rng = np.random.default_rng(dim)
        base = rng.standard_normal((sizes.faiss_n, dim), dtype=np.float32)
        flat = faiss.IndexFlatIP(dim)
        flat.add(base)
        sq = faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
        sq.add(base)
        del base
        indexes: list[tuple[str, str, Any, int]] = [
            ("cpu", "faiss IndexFlatIP fp32", flat, 4),
            ("cpu", "faiss IndexScalarQuantizer fp16 (the engine's)", sq, 2),
        ]
        if faiss_gpus() > 0 and "cuda" in ceilings:
            resources = faiss.StandardGpuResources()
            indexes.append(
                ("cuda", "faiss GpuIndexFlatIP fp32", faiss.index_cpu_to_gpu(resources, 0, flat), 4)
            )
        for backend, kind, index, bytes_per_value in indexes:
            for queries in sizes.faiss_queries:
                if bytes_per_value == 2 and queries > sizes.sq_max_queries:
                    continue
                batch = rng.standard_normal((queries, dim), dtype=np.float32)
                seconds = best_seconds(
                    functools.partial(index.search, batch, 10), sizes.search_repeats, lambda: None
                )
                matmul = ceilings[backend]["matmul" if backend == "cpu" else "matmul_float32"]
                rows.append(
                    _search_row(backend, kind, sizes.faiss_n, dim, queries, bytes_per_value, seconds)
                    | _fractions(
                        sizes.faiss_n, dim, queries, bytes_per_value, seconds, ceilings[backend], matmul
                    )
                )
        del flat, sq, indexes
    return rows


def torch_flat_rows(sizes: Sizes, ceilings: dict[str, dict[str, Any]], device: str) -> list[dict[str, Any]]:
    """Exact inner-product top-10 as a matmul + top-k on `device`: what a GPU flat scan costs here."""
    import torch

    rows = []
    sync = _sync(device)
    generator = torch.Generator(device=device).manual_seed(0)
    for dim in sizes.faiss_dims:
        rng = np.random.default_rng(dim)
        database32 = torch.randn(sizes.faiss_n, dim, device=device, generator=generator)
        for dtype, bytes_per_value in ((torch.float32, 4), (torch.float16, 2)):
            database = database32 if dtype == torch.float32 else database32.half()
            ceiling = ceilings[device]
            matmul = ceiling["matmul_float32" if dtype == torch.float32 and device == "cuda" else "matmul"]
            for queries in sizes.faiss_queries:
                batch = rng.standard_normal((queries, dim), dtype=np.float32)

                def search(batch: np.ndarray = batch, database: Any = database, dtype: Any = dtype) -> object:
                    found = []
                    for chunk in torch.from_numpy(batch).to(device, dtype).split(TORCH_SEARCH_CHUNK):
                        scores, ids = (chunk @ database.T).topk(10, dim=1)
                        found.append((scores.float().cpu(), ids.cpu()))
                    return found

                seconds = best_seconds(search, sizes.search_repeats, sync)
                kind = f"torch matmul + topk {str(dtype).removeprefix('torch.')} (not faiss)"
                rows.append(
                    _search_row(device, kind, sizes.faiss_n, dim, queries, bytes_per_value, seconds)
                    | _fractions(sizes.faiss_n, dim, queries, bytes_per_value, seconds, ceiling, matmul)
                )
            del database
        del database32
        _release(device)
    return rows


def _search_row(
    backend: str, kind: str, n: int, dim: int, queries: int, bytes_per_value: int, seconds: float
) -> dict[str, Any]:
    scanned = n * dim * bytes_per_value
    return {
        "backend": backend,
        "index": kind,
        "vectors": n,
        "dim": dim,
        "queries": queries,
        "seconds": seconds,
        "queries_per_s": queries / seconds,
        "bytes_scanned": scanned,
        "bytes_per_s": scanned / seconds,
    }


def _fractions(
    n: int,
    dim: int,
    queries: int,
    bytes_per_value: int,
    seconds: float,
    ceiling: dict[str, Any],
    matmul: dict[str, Any],
) -> dict[str, Any]:
    scanned = n * dim * bytes_per_value
    return {
        "fraction_of_bandwidth": scanned / seconds / ceiling["bandwidth"]["bytes_per_s"],
        "fraction_of_matmul": 2 * n * dim * queries / seconds / matmul["flops_per_s"],
        "matmul_ceiling_dtype": matmul["dtype"],
    }


def _package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def _nvidia_smi() -> dict[str, str]:
    query = "name,driver_version,memory.total"
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    name, driver, memory = (part.strip() for part in out.splitlines()[0].split(","))
    return {"nvidia_smi_name": name, "driver": driver, "gpu_memory": memory}


def device_description(device: str) -> dict[str, Any]:
    import faiss
    import torch

    described: dict[str, Any] = {
        "device": device,
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "sentence_transformers": _package_version("sentence-transformers"),
        "transformers": _package_version("transformers"),
        "faiss": getattr(faiss, "__version__", "unknown"),
        "faiss_threads": faiss.omp_get_max_threads(),
        "faiss_gpus": faiss_gpus(),
    }
    if device == "cuda":
        properties = torch.cuda.get_device_properties(0)
        described["gpu"] = torch.cuda.get_device_name(0)
        described["cuda"] = torch.version.cuda
        described["multiprocessors"] = properties.multi_processor_count
        described |= _nvidia_smi()
    return described


def run(
    models: Sequence[str],
    tiny: bool,
    device: str,
    *,
    architectures: Sequence[str] = (),
    locomo: Path | None = None,
    sections: Sequence[str] = SECTIONS,
    sizes: Sizes | None = None,
    sink: Callable[[dict[str, Any]], None] = lambda report: None,
) -> dict[str, Any]:
    """The report; `sink` gets it after every section, so a run cut short still leaves what it measured."""
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() and not tiny else "cpu"
    sizes = sizes or Sizes(tiny)
    started = time.perf_counter()

    def done(section: str) -> None:
        print(
            f"[gpu_report] {section} done at {time.perf_counter() - started:.1f} s",
            file=sys.stderr,
            flush=True,
        )
        sink(report)

    pairs = load_locomo_pairs(locomo)
    report: dict[str, Any] = {"machine": device_description(device), "tiny": tiny, "ceilings": {}}
    for name in ["cpu"] + (["cuda"] if device == "cuda" else []):
        report["ceilings"][name] = {
            "matmul": matmul_ceiling(name, sizes.matmul_n, sizes.repeats),
            "bandwidth": bandwidth_ceiling(name, sizes.copy_bytes, sizes.repeats),
        }
        if name == "cuda":
            report["ceilings"][name]["matmul_float32"] = matmul_ceiling(
                name, sizes.matmul_n, sizes.repeats, "float32"
            )
    done("ceilings")
    if "embedding" in sections:
        report["embedding"] = embedding_rows(
            models,
            device,
            sizes,
            report["ceilings"][device]["matmul"]["flops_per_s"],
            architectures=architectures,
            pairs=pairs,
            tiny=tiny,
        )
        done("embedding")
    if "engine" in sections:
        try:
            report["engine"] = engine_rows(_engine_spec(models), device, sizes, pairs)
        except Exception as error:  # reported, not fatal: the search sections still run
            report["engine"] = [{"skipped": f"{type(error).__name__}: {str(error)[:300]}"}]
        done("engine")
    for section, measure in (("batcher", batcher_rows), ("spaces", spaces_rows)):
        if section in sections:
            try:
                report[section] = measure(_engine_spec(models), device, sizes, pairs)
            except Exception as error:  # reported, not fatal: the next sections still run
                report[section] = [{"skipped": f"{type(error).__name__}: {str(error)[:300]}"}]
            done(section)
    if "faiss" in sections:
        report["faiss"] = faiss_rows(sizes, report["ceilings"])
        done("faiss")
    if "torch_flat" in sections and device == "cuda":
        report["torch_flat"] = torch_flat_rows(sizes, report["ceilings"], device)
        done("torch_flat")
    return report


def _engine_spec(models: Sequence[str]) -> str:
    """The engine runs MiniLM, its default: the first --models entry naming it, else the bundled one."""
    return next((spec for spec in models if "minilm" in spec.lower()), "all-MiniLM-L6-v2")


def merge(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One report from several runs (a device lease too short for every section at once): each section
    from the last run that measured it, every run's machine, ceilings and command kept under `runs`.
    Each row's fractions stay against its own run's ceilings. A report merged before counts as its runs
    (their rows and notes kept), so a new run is merged into the published report."""
    merged: dict[str, Any] = {"machine": reports[0]["machine"], "tiny": any(r["tiny"] for r in reports)}
    merged["ceilings"] = reports[0]["ceilings"]
    merged["runs"] = []
    notes: list[str] = []
    for report in reports:
        offset = len(merged["runs"])
        if "runs" in report:  # merged before: keep its runs, renumbered after those already here
            notes += report.get("notes", [])
            for earlier in report["runs"]:
                merged["runs"].append({**earlier, "run": earlier["run"] + offset})
            for section in SECTIONS:
                if section in report:
                    merged[section] = [{**row, "run": row["run"] + offset} for row in report[section]]
            continue
        number = offset + 1
        sections = [section for section in SECTIONS if section in report]
        for section in sections:
            merged[section] = [{**row, "run": number} for row in report[section]]
        run: dict[str, Any] = {"run": number, "sections": sections}
        run |= {key: report[key] for key in ("command", "machine", "ceilings") if key in report}
        merged["runs"].append(run)
    if notes:
        merged = {"notes": notes, **merged}
    return merged


def table(report: dict[str, Any]) -> str:
    lines = [*(f"- {note}" for note in report.get("notes", [])), *([""] if "notes" in report else [])]
    for run in report.get("runs", []):
        command = f" `{run['command']}`" if "command" in run else ""
        lines.append(f"Run {run['run']}:{command} measured {', '.join(run['sections'])}.")
        lines += [f"Run {run['run']} machine: {json.dumps(run['machine'])}"]
        lines += [f"Run {run['run']} {line}" for line in _ceiling_lines(run["ceilings"])] + [""]
    if "runs" not in report:
        lines += [f"Command: `{report['command']}`"] if "command" in report else []
        lines += [f"Machine: {json.dumps(report['machine'])}", "", *_ceiling_lines(report["ceilings"])]
    lines += _embedding_table(report.get("embedding", []))
    lines += _engine_table(report.get("engine", []))
    lines += _batcher_table(report.get("batcher", []))
    lines += _spaces_table(report.get("spaces", []))
    lines += _search_table("faiss flat", report.get("faiss", []))
    lines += _search_table("torch flat search", report.get("torch_flat", []))
    return "\n".join(lines) + "\n"


def _ceiling_lines(ceilings: dict[str, Any]) -> list[str]:
    lines = []
    for device, ceiling in ceilings.items():
        matmuls = [ceiling["matmul"]] + ([ceiling["matmul_float32"]] if "matmul_float32" in ceiling else [])
        described = ", ".join(f"{m['flops_per_s'] / 1e12:.3f} TFLOP/s ({m['dtype']})" for m in matmuls)
        lines.append(
            f"{device} ceilings: matmul {described}, bandwidth {ceiling['bandwidth']['bytes_per_s'] / 1e9:.1f} GB/s"
        )
    return lines


def _embedding_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = [
        "",
        "| model | weights | batch | texts/s | tokens/s | TFLOP/s | of matmul ceiling |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    notes = sorted({row["note"] for row in rows if "note" in row})
    for row in rows:
        if "skipped" in row:
            lines.append(f"| {row['model']} | skipped: {row['skipped']} | | | | | |")
            continue
        weights = row.get("weights", "real") + (" *" if "note" in row else "")
        lines.append(
            f"| {row['model']} | {weights} | {row['batch_size']} | {row['texts_per_s']:,.0f} "
            f"| {row['tokens_per_s']:,.0f} | {row['flops_per_s'] / 1e12:.3f} | {row['fraction_of_matmul']:.3f} |"
        )
    return lines + [f"\n\\* {note}" for note in notes]


def _engine_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = [
        "",
        "| page embedding | model | batch | texts | texts/s | tokens/s |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        if "skipped" in row:
            lines.append(f"| skipped: {row['skipped']} | | | | | |")
            continue
        lines.append(
            f"| {row['path']} | {row['model']} | {row['batch_size']} | {row['texts']:,} "
            f"| {row['texts_per_s']:,.0f} | {row['tokens_per_s']:,.0f} |"
        )
    return lines


def _batcher_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = [
        "",
        "| pooled page embedding | model | batch | texts | texts/s | tokens/s | batches, mean size "
        "| tokenizers pool |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        if "skipped" in row:
            lines.append(f"| skipped: {row['skipped']} | | | | | | | |")
            continue
        path = row["path"] + (" (best)" if row.get("best") else "")
        batches = f"{row['batches']:,}, {row['mean_batch_size']:.1f}" if "batches" in row else ""
        if "max_batch_tokens" in row:
            path += f" ≤{row['max_batch_tokens']:,} tokens, {row['max_wait_ms']:g} ms"
        lines.append(
            f"| {path} | {row['model']} | {row['batch_size']} | {row['texts']:,} | {row['texts_per_s']:,.0f} "
            f"| {row['tokens_per_s']:,.0f} | {batches} | {row.get('parallelism', '')} |"
        )
    return lines


def _spaces_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = [
        "",
        "| Memoryos spaces | turns | written (s) | all searchable (s) | turns/s | batches, mean size "
        "| all found |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        if "skipped" in row:
            lines.append(f"| skipped: {row['skipped']} | | | | | | |")
            continue
        lines.append(
            f"| {row['spaces']} × {row['turns_per_space']} turns, {row['model']} | {row['turns']:,} "
            f"| {row['written_seconds']:.2f} | {row['seconds']:.2f} | {row['turns_per_s']:,.0f} "
            f"| {row['batches']:,}, {row['mean_batch_size']:.1f} | {row['all_found']} |"
        )
    return lines


def _search_table(title: str, rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = [
        "",
        f"| {title} | index | vectors × dim | queries | ms | GB/s scanned | of bandwidth | of matmul |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        lines.append(
            f"| {row['backend']} | {row['index']} | {row['vectors']:,} × {row['dim']} | {row['queries']} "
            f"| {row['seconds'] * 1000:.2f} | {row['bytes_per_s'] / 1e9:.1f} "
            f"| {row['fraction_of_bandwidth']:.3f} | {row['fraction_of_matmul']:.3f} ({row['matmul_ceiling_dtype']}) |"
        )
    return lines


def write(report: dict[str, Any], out: Path) -> None:
    """The JSON report at `out` and its tables beside it (`.md`)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    out.with_suffix(".md").write_text(table(report), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_report", description=__doc__)
    parser.add_argument(
        "--models",
        nargs="+",
        default=None,
        help=f"names or LABEL=PATH (a local model directory); default {' '.join(DEFAULT_MODELS)}",
    )
    parser.add_argument(
        "--architectures",
        nargs="*",
        default=[],
        choices=sorted(ARCHITECTURES),
        help="also time these architectures with RANDOM weights (their weights are not here); "
        "tokenized with the MiniLM tokenizer, rows labelled 'architecture only'",
    )
    parser.add_argument(
        "--locomo",
        type=Path,
        default=None,
        help="LoCoMo pairs/ directory or pairs JSON (default: the dev data)",
    )
    parser.add_argument(
        "--sections",
        nargs="+",
        choices=SECTIONS,
        default=list(SECTIONS),
        help="what to measure (default: all)",
    )
    parser.add_argument("--faiss-dims", type=int, nargs="+", default=None, help="flat-search dimensions")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per measurement")
    parser.add_argument("--sources", type=int, default=None, help="batcher: page sources (3 pages each)")
    parser.add_argument("--spaces", type=int, default=None, help="spaces: Memoryos spaces")
    parser.add_argument(
        "--merge", type=Path, nargs="+", default=None, help="measure nothing: merge these reports into --out"
    )
    parser.add_argument(
        "--note", action="append", default=[], help="with --merge: a line to print above the tables"
    )
    parser.add_argument("--tiny", action="store_true", help="MiniLM, small sizes, CPU: a smoke run")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"JSON report, .md beside it (default {OUT}; --tiny: {TINY_OUT.name})",
    )
    args = parser.parse_args(argv)
    models = args.models or (TINY_MODELS if args.tiny else DEFAULT_MODELS)
    out = args.out or (TINY_OUT if args.tiny else OUT)
    if args.merge:
        merged = merge([json.loads(path.read_text(encoding="utf-8")) for path in args.merge])
        if args.note:
            merged = {"notes": [*merged.pop("notes", []), *args.note], **merged}
        write(merged, out)
        print(table(merged), end="")
        return 0
    command = " ".join(["python -m bench.gpu_report", *(sys.argv[1:] if argv is None else argv)])
    sizes = Sizes(args.tiny)
    if args.faiss_dims:
        sizes.faiss_dims = tuple(args.faiss_dims)
    if args.repeats:
        sizes.repeats = sizes.search_repeats = args.repeats
    if args.sources:
        sizes.batcher_sources = args.sources
        sizes.batch1_texts = min(sizes.batch1_texts, args.sources * sizes.pages_per_source)
    if args.spaces:
        sizes.spaces = args.spaces
    report = run(
        models,
        args.tiny,
        args.device,
        architectures=args.architectures,
        locomo=args.locomo,
        sections=args.sections,
        sizes=sizes,
        sink=lambda partial: write({"command": command, **partial}, out),
    )
    print(table({"command": command, **report}), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
