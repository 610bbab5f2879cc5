"""What a sentence-transformers model directory computes, read from its files without loading the model.

With PyTorch, `onnx.queries._pipeline` asks the loaded `SentenceTransformer` for its tokenizer, pooling,
normalization, prompt and limits. Without it, the same facts come from the files sentence-transformers
itself reads: `modules.json` (which modules, where), the Transformer's `sentence_bert_config.json`, the
Pooling module's `config.json`, `config_sentence_transformers.json` (prompts), `tokenizer.json` and
`tokenizer_config.json`. Only the plain layout is accepted — Transformer, Pooling, optional Normalize,
no lowercasing or chat template, one pooling mode — and anything else is refused by name, since a
misread setting gives vectors that look right and are not.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memoryos.embedding.onnx.build import UnsupportedModelError, input_names
from memoryos.embedding.onnx.manifest import POOLING_MODES

TORCH_FREE_KWARGS = frozenset({"device", "revision", "cache_folder", "truncate_dim"})
"""`embedding_model_kwargs` a torch-free build honours: where the model is, and the dimension cut.
The others (`model_kwargs`, `prompts`, `tokenizer_kwargs` ...) change what PyTorch would load."""

LEGACY_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
"""Pooling configs written before sentence-transformers 6 name the mode with one flag per mode."""

PLAIN_TRANSFORMER_CONFIG: dict[str, Any] = {
    "do_lower_case": False,
    "transformer_task": "feature-extraction",
    "modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}},
    "module_output_name": "token_embeddings",
    "processing_kwargs": {},
    "unpad_inputs": None,
    "query_length": None,
    "document_length": None,
    "query_expansion": None,
}
"""The Transformer module settings (`sentence_bert_config.json`) that leave it a plain text encoder; a
key set to another value, or an unknown key, is refused."""


@dataclass(frozen=True)
class FilePipeline:
    """The manifest's pipeline fields (`fields`), the tokenizer as `tokenizers` JSON, the model's config.json
    and the directory holding the transformer's weights."""

    fields: dict[str, Any]
    tokenizer_json: str
    config: dict[str, Any]
    transformer_dir: Path


def read_pipeline(model_dir: Path, kwargs: Mapping[str, Any]) -> FilePipeline:
    """The pipeline `model_dir` describes with `kwargs` (`embedding_model_kwargs`), as `_pipeline` reads it
    from the loaded model. Raises UnsupportedModelError for anything outside the plain layout."""
    import tokenizers

    unknown = sorted(set(kwargs) - TORCH_FREE_KWARGS)
    if unknown:
        raise UnsupportedModelError(f"embedding_model_kwargs {unknown} need the model loaded")
    modules = _json(model_dir / "modules.json")
    kinds = [str(module.get("type", "")).rsplit(".", 1)[-1] for module in modules]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise UnsupportedModelError(f"modules are {kinds}, not Transformer, Pooling [+ Normalize]")
    transformer_dir = model_dir / modules[0].get("path", "")
    config = _json(transformer_dir / "config.json")
    names = input_names(config)
    settings = _optional_json(transformer_dir / "sentence_bert_config.json")
    for key, value in settings.items():
        if key != "max_seq_length" and PLAIN_TRANSFORMER_CONFIG.get(key, object()) != value:
            raise UnsupportedModelError(f"sentence_bert_config.json sets {key} to {value!r}")
    model_settings = _optional_json(model_dir / "config_sentence_transformers.json")
    if model_settings.get("default_prompt_name"):
        raise UnsupportedModelError(f"pages get the default prompt {model_settings['default_prompt_name']!r}")
    prompt = str((model_settings.get("prompts") or {}).get("query") or "")
    pooling = _optional_json(model_dir / modules[1].get("path", "") / "config.json")
    mode = _pooling_mode(pooling)
    if prompt and pooling.get("include_prompt") is False:
        raise UnsupportedModelError("the query prompt is excluded from pooling")
    tokenizer_settings = _optional_json(transformer_dir / "tokenizer_config.json")
    try:
        tokenizer = tokenizers.Tokenizer.from_file(str(transformer_dir / "tokenizer.json"))
    except Exception as error:  # absent (a slow-tokenizer-only model) or unreadable by this version
        raise UnsupportedModelError(f"cannot read tokenizer.json with `tokenizers`: {error}") from error
    tokenizer.no_truncation()  # the encoder sets truncation and padding itself
    tokenizer.no_padding()
    pad_token = _token_text(tokenizer_settings.get("pad_token"))
    pad_id = tokenizer.token_to_id(pad_token) if pad_token is not None else None
    truncate_dim = kwargs.get("truncate_dim")
    fields = {
        "input_names": list(names),
        "max_seq_length": _max_seq_length(settings, tokenizer_settings, config),
        "truncation_side": tokenizer_settings.get("truncation_side", "right"),
        "pad_id": int(pad_id or 0),
        "pad_type_id": 0,
        "padding_side": tokenizer_settings.get("padding_side", "right"),
        "pooling": mode,
        "normalize": kinds[-1] == "Normalize",
        "truncate_dim": int(truncate_dim) if truncate_dim is not None else None,
        "query_prompt": prompt,
    }
    return FilePipeline(fields, tokenizer.to_str(), config, transformer_dir)


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UnsupportedModelError(f"cannot read {path}: {error}") from error


def _optional_json(path: Path) -> dict[str, Any]:
    return _json(path) if path.is_file() else {}


def _pooling_mode(config: Mapping[str, Any]) -> str:
    """The one pooling mode, from `pooling_mode` or the older per-mode flags (sentence-transformers'
    `_convert_legacy_pooling_kwargs`: no flag set means mean)."""
    mode: Any = config.get("pooling_mode")
    if mode is None:
        modes = [name for key, name in LEGACY_POOLING_KEYS.items() if config.get(key)]
        mode = modes[0] if len(modes) == 1 else (modes or "mean")
    if isinstance(mode, list) and len(mode) == 1:
        mode = mode[0]
    if not isinstance(mode, str) or mode not in POOLING_MODES:
        raise UnsupportedModelError(f"pooling mode {mode!r} is not one of {', '.join(POOLING_MODES)}")
    return mode


def _token_text(token: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or an AddedToken dict."""
    if isinstance(token, dict):
        token = token.get("content")
    return token if isinstance(token, str) else None


def _max_seq_length(
    settings: Mapping[str, Any], tokenizer_settings: Mapping[str, Any], config: Mapping[str, Any]
) -> int | None:
    """sentence_bert_config.json's max_seq_length, else the tokenizer's model_max_length capped at the
    model's max_position_embeddings (sentence-transformers' Transformer); None for "no limit"."""
    limit = settings.get("max_seq_length")
    if limit is None:
        candidates = [tokenizer_settings.get("model_max_length"), config.get("max_position_embeddings")]
        known = [int(value) for value in candidates if isinstance(value, int | float) and value > 0]
        limit = min(known) if known else None
    return int(limit) if limit is not None and limit < 1_000_000 else None
