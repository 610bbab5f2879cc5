"""`bench.gpu.report`'s engine, batcher and spaces sections: the engine's own embedding paths over LoCoMo
pages, against the raw `model.encode` of the same texts."""

import contextlib
import functools
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.gpu.ceilings import Sizes, best_seconds, device_sync, release
from bench.gpu.embedding import count_tokens
from bench.gpu.models import (
    Countdown,
    MemoryPages,
    distinct_page_texts,
    distinct_pairs,
    load_named_model,
    page_texts,
    parse_model_spec,
)


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
        tokens = count_tokens(raw, texts)
        common = {"model": label, "device": device, "texts": len(texts), "tokens": tokens}
        common["distinct_texts"] = len(set(texts))
        with torch.inference_mode():
            for batch_size in sizes.raw_batch_sizes:
                run = functools.partial(
                    raw.encode, texts, batch_size=batch_size, show_progress_bar=False, convert_to_numpy=True
                )
                seconds = best_seconds(run, sizes.repeats, device_sync(device))
                rows.append(_throughput_row("model.encode", batch_size, seconds, common))
        del raw
        release(device)
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

            seconds = best_seconds(ingest, sizes.repeats, device_sync(device))
            rows.append(_throughput_row("engine embedder", batch_size, seconds, common))
            del embedder, ingest
            release(device)
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
    sync = device_sync(device)
    rows: list[dict[str, Any]] = []
    try:
        raw = load_named_model(location, device)
        tokens = count_tokens(raw, texts)
        common = {"model": label, "device": device, "texts": len(texts), "tokens": tokens}
        with torch.inference_mode(), tokenizers_parallelism(None):
            first = texts[: sizes.batch1_texts]
            single = {**common, "texts": len(first), "tokens": count_tokens(raw, first)}
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
        release(device)
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
        release(device)
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
    from memoryos.llm.offline.backend import OfflineLLM
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
