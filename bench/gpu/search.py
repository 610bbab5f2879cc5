"""`bench.gpu.report`'s search sections: faiss flat search and, on CUDA, a torch matmul + top-k, against the
device's bandwidth and matmul ceilings."""

import functools
from typing import Any

import numpy as np

from bench.gpu.ceilings import Sizes, best_seconds, device_sync, faiss_gpus, release

TORCH_SEARCH_CHUNK = 1024
"""Queries per matmul in the torch flat search: bounds the score matrix (1024 × 1M fp32 = 4 GB)."""


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
    sync = device_sync(device)
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
        release(device)
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
