"""`python -m bench.gpu.forward`: the device's ceiling for one embedding model, in real tokens per second.

The embedding engine's own rate (`EngineStats.tokens_per_s`) is tokens per second spent inside `encode`,
which also tokenizes, moves the batch to the device and brings the vectors back. Its ceiling on the same
device is the model's forward pass alone: here the ingest bench's LoCoMo page texts are cut into batches
shaped as the engine cuts them (its own `take_batch`: at most `--batch-size` texts and the budget in
padded tokens, within the oldest text's length bucket, longest first), tokenized and moved to the device before
the clock, then run through the sentence-transformers model (transformer, pooling, normalization; fp16
on CUDA) under `inference_mode`; the best of `--repeats` passes. A second row with larger batches
(`--batch-sizes`) shows what the device gives when batches are not the engine's size.

Tokens are the tokenizer's (attention-mask sums: no padding counted). The engine counts estimated tokens
(`memoryos.embedding.base.estimate_tokens`: characters / 4 + 2, no tokenizer on its batching thread), so
the report also gives `real_over_estimated_tokens` on the same texts: the engine's figure times it is
comparable with this one.

    python -m bench.gpu.forward --model DIR [--device auto|cpu|cuda] [--texts 2000] [--batch-sizes 64 256]
        [--max-batch-tokens 16384] [--repeats 3] [--out FILE]
"""

import argparse
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.corpus import dev_conversations, exchanges, page_texts
from bench.gpu.ceilings import device_sync
from bench.gpu.models import load_named_model, parse_model_spec
from bench.output import emit
from memoryos.config import MemoryConfig
from memoryos.embedding.base import estimate_tokens
from memoryos.embedding.engine.batching import take_batch


def engine_shaped_batches(
    texts: Sequence[str], max_batch_size: int, max_batch_tokens: int
) -> list[list[str]]:
    """The engine's page batches for texts queued in this order: its own `take_batch`, on the same
    estimated tokens."""
    queue = deque(texts)
    batches: list[list[str]] = []
    while queue:
        batches.append(take_batch(queue, estimate_tokens, max_batch_size, max_batch_tokens))
    return batches


def real_over_estimated(model: Any, texts: Sequence[str]) -> float:
    """The model's tokenizer's count (truncated at its window, as the model sees it) over the engine's
    estimate, on the same texts."""
    encoded = model.tokenizer(list(texts), truncation=True, max_length=model.max_seq_length)
    real = sum(len(ids) for ids in encoded["input_ids"])
    return real / sum(estimate_tokens(text) for text in texts)


def forward_row(
    model: Any, device: str, texts: Sequence[str], batch_size: int, max_batch_tokens: int, repeats: int
) -> dict[str, Any]:
    """The best of `repeats` timed passes of the model's forward over the pre-tokenized batches."""
    import torch

    batches = engine_shaped_batches(texts, batch_size, max_batch_tokens)
    features = []
    for batch in batches:
        tokenized = (getattr(model, "preprocess", None) or model.tokenize)(batch)  # renamed in 6.x
        features.append({k: v.to(device) if torch.is_tensor(v) else v for k, v in tokenized.items()})
    tokens = sum(int(f["attention_mask"].sum()) for f in features)
    padded = sum(int(f["attention_mask"].numel()) for f in features)
    sync = device_sync(device)
    best = float("inf")
    with torch.inference_mode():
        for f in features:  # each shape's first run picks its kernels: not timed
            model(dict(f))
        sync()
        for _ in range(repeats):
            started = time.perf_counter()
            for f in features:
                model(dict(f))  # the modules add their outputs to the dict they are given
            sync()
            best = min(best, time.perf_counter() - started)
    return {
        "batch_size": batch_size,
        "max_batch_tokens": max_batch_tokens,
        "batches": len(batches),
        "mean_batch": round(len(texts) / len(batches), 1),
        "texts": len(texts),
        "tokens": tokens,
        "padding_share": round(1 - tokens / padded, 3),
        "seconds": round(best, 4),
        "texts_per_s": round(len(texts) / best, 1),
        "tokens_per_s": round(tokens / best),
    }


def forward_ceiling(
    location: str,
    device: str,
    texts: Sequence[str],
    batch_sizes: Sequence[int],
    max_batch_tokens: int,
    repeats: int,
) -> dict[str, Any]:
    """Rows per batch size, the best of them (`tokens_per_s`), and the estimate's ratio on these texts."""
    import torch

    model = load_named_model(location, device)
    rows = [forward_row(model, device, texts, size, max_batch_tokens, repeats) for size in batch_sizes]
    return {
        "model": location,
        "device": device,
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "torch": torch.__version__,
        "real_over_estimated_tokens": round(real_over_estimated(model, texts), 3),
        "rows": rows,
        "tokens_per_s": max(row["tokens_per_s"] for row in rows),
        "texts_per_s": max(row["texts_per_s"] for row in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    defaults = MemoryConfig.model_fields
    parser.add_argument("--model", required=True, help="a model directory (or a name in the local cache)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--texts", type=int, default=2000, help="LoCoMo page texts, as the ingest bench's")
    parser.add_argument(
        "--batch-sizes",
        type=int,
        nargs="+",
        default=[defaults["embedding_batch_size"].default, 256],
        help="texts per batch at most; the first is the engine's (MEMORYOS_EMBEDDING_BATCH_SIZE)",
    )
    parser.add_argument(
        "--max-batch-tokens",
        type=int,
        default=defaults["embedding_max_batch_tokens"].default,
        help="estimated tokens per batch at most (MEMORYOS_EMBEDDING_MAX_BATCH_TOKENS)",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    for flag, value in (
        ("--texts", args.texts),
        ("--repeats", args.repeats),
        *(("--batch-sizes", size) for size in args.batch_sizes),
        ("--max-batch-tokens", args.max_batch_tokens),
    ):
        if value < 1:
            parser.error(f"{flag} must be at least 1, got {value}")
    device = args.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    texts = page_texts(exchanges(args.texts, dev_conversations()))
    report = forward_ceiling(
        parse_model_spec(args.model)[1], device, texts, args.batch_sizes, args.max_batch_tokens, args.repeats
    )
    emit({"forward_ceiling": report}, args.out)


if __name__ == "__main__":
    main()
