"""`bench.gpu.report`'s embedding section: tokens/s vs batch size per model, against the matmul ceiling."""

import functools
from collections.abc import Sequence
from typing import Any

from bench.gpu.ceilings import Sizes, best_seconds, device_sync, release
from bench.gpu.models import (
    model_loaders,
    parse_model_spec,
    sample_texts,
)


def _non_embedding_params(model: Any) -> int:
    import torch

    embedding = sum(
        p.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()
    )
    return int(sum(p.numel() for p in model.parameters()) - embedding)


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
        release(device)
    return rows


def _minilm_location(models: Sequence[str]) -> str:
    """The MiniLM whose tokenizer the architecture-only models use: the first --models entry naming it."""
    for spec in models:
        label, location = parse_model_spec(spec)
        if "minilm" in label.lower():
            return location
    return parse_model_spec("all-MiniLM-L6-v2")[1]


def count_tokens(model: Any, texts: Sequence[str]) -> int:
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
            tokens = count_tokens(model, texts)
            seconds = best_seconds(
                functools.partial(model.encode, texts, batch_size=batch_size),
                max(1, sizes.repeats - 2),
                device_sync(device),
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
