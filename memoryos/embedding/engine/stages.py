"""The embedding engine's view of a model: three stages, so that each runs on its own thread.

`tokenize` (the model's fast tokenizer over a whole request, on the connection's thread: `tokenizers`
runs outside the interpreter lock), `prepare` (padded arrays, pinned memory on CUDA, on the assembling
thread while the previous batch runs) and `forward` (the model alone, on the encoding thread). Each text is
tokenized once: its length is what the batches are counted in, and whether it was truncated is read from
that same encoding, never from a second tokenizer run.

- `OnnxStages`: the torch-free encoder (`onnx/encoder.py`), the engine's runtime on CPU.
- `TorchStages`: a sentence-transformers model on PyTorch (a GPU, in fp16 there; or a CPU before its
  export is verified). Built only for the plain layout (Transformer, Pooling, optional Normalize) and only
  when its vectors for a few probe texts match the model's own `encode`; anything else falls back.
- `PlainStages`: any other `Embedder` (an embeddings server, a test's): lengths estimated and capped at
  the window, the embedder's own `encode` as the forward pass.
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

from memoryos.embedding.base import Embedder, estimate_tokens, unit_rows
from memoryos.embedding.device import ForwardPlan, forward_plan, run_size
from memoryos.embedding.onnx.encoder import OnnxEncoder
from memoryos.embedding.sentence_transformers_backend import SentenceTransformerEmbedder

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger(__name__)

PROBE_TEXTS = ("a short probe", "a longer probe text about tea, coffee and the weather in spring " * 3)
"""Texts the staged PyTorch path must embed as the model's own `encode` does before the engine uses it."""
PROBE_TOLERANCE_FP32 = 1e-4
PROBE_TOLERANCE_FP16 = 2e-2
"""Largest difference from `encode` accepted on the probes: float rounding (fp16 rounds at 1e-3)."""


@dataclass(frozen=True)
class Tokenized:
    """One text as the model will read it."""

    length: int
    """Tokens the model reads: special tokens in, truncated at the model's window."""
    truncated: bool
    """The text was longer than the window (the model reads its beginning)."""
    encoding: Any
    """What `prepare` pads: a `tokenizers.Encoding`, or the text itself for `PlainStages`."""


class ModelStages(Protocol):
    """A model in the engine's three stages. `prepare` and `forward` take one batch of one kind (pages or
    queries); `forward` returns float32 unit rows in the batch's order."""

    @property
    def window(self) -> int | None:
        """Tokens the model reads at most (None: no known limit)."""
        ...

    def tokenize(self, texts: Sequence[str], is_query: bool) -> list[Tokenized]: ...

    def prepare(self, batch: Sequence[Tokenized], is_query: bool) -> object: ...

    def forward(self, prepared: object) -> np.ndarray: ...


class PlainStages:
    """Any `Embedder`: lengths estimated (characters / 4) and capped at `window`, `encode` as the forward."""

    def __init__(self, embedder: Embedder, window: int | None = None) -> None:
        self._embedder = embedder
        self._window = window

    @property
    def window(self) -> int | None:
        return self._window

    def tokenize(self, texts: Sequence[str], is_query: bool) -> list[Tokenized]:
        lengths = [estimate_tokens(text) for text in texts]
        if self._window is not None:
            lengths = [min(length, self._window) for length in lengths]
        return [Tokenized(length, False, text) for length, text in zip(lengths, texts, strict=True)]

    def prepare(self, batch: Sequence[Tokenized], is_query: bool) -> object:
        return [item.encoding for item in batch], is_query

    def forward(self, prepared: object) -> np.ndarray:
        texts, is_query = cast(tuple[list[str], bool], prepared)
        return self._embedder.encode(texts, is_query=is_query)


class OnnxStages:
    """The torch-free encoder: its tokenizer, its padded feeds in runs of `run_size`, its session."""

    def __init__(self, encoder: OnnxEncoder, run_size: int) -> None:
        self._encoder = encoder
        self._run_size = max(run_size, 1)

    @property
    def window(self) -> int | None:
        return self._encoder.manifest.max_seq_length

    def tokenize(self, texts: Sequence[str], is_query: bool) -> list[Tokenized]:
        return [
            Tokenized(len(encoding.ids), bool(encoding.overflowing), encoding)
            for encoding in self._encoder.tokenize(texts, is_query=is_query)
        ]

    def prepare(self, batch: Sequence[Tokenized], is_query: bool) -> object:
        encodings = [item.encoding for item in batch]
        return [
            self._encoder.feeds(encodings[start : start + self._run_size])
            for start in range(0, len(encodings), self._run_size)
        ]

    def forward(self, prepared: object) -> np.ndarray:
        runs = cast(list[tuple[dict[str, np.ndarray], np.ndarray]], prepared)
        return unit_rows(np.concatenate([self._encoder.forward(feeds, mask) for feeds, mask in runs]))


class TorchStages:
    """A plain sentence-transformers model on PyTorch, fed tensors prepared ahead (`ForwardPlan`)."""

    def __init__(self, model: "SentenceTransformer", plan: ForwardPlan) -> None:
        import tokenizers

        transformer = model[0]
        self._model = model
        self._plan = plan
        self._device = model.device
        self._window: int | None = model.max_seq_length
        self._lower = bool(getattr(transformer, "do_lower_case", False))
        self._prompt = model.prompts.get("query") or ""
        tokenizer = tokenizers.Tokenizer.from_str(model.tokenizer.backend_tokenizer.to_str())
        tokenizer.no_padding()
        if self._window is not None:
            tokenizer.enable_truncation(max_length=self._window)
        else:
            tokenizer.no_truncation()
        self._tokenizer = tokenizer
        self._pad_id = int(model.tokenizer.pad_token_id or 0)
        self._left = model.tokenizer.padding_side == "left"
        names = set(model.tokenizer.model_input_names)
        self._types = "token_type_ids" in names

    @property
    def window(self) -> int | None:
        return self._window

    def tokenize(self, texts: Sequence[str], is_query: bool) -> list[Tokenized]:
        prompt = self._prompt if is_query else ""
        inputs = [prompt + text for text in texts] if prompt else list(texts)
        if self._lower:
            inputs = [text.lower() for text in inputs]
        return [
            Tokenized(len(encoding.ids), bool(encoding.overflowing), encoding)
            for encoding in self._tokenizer.encode_batch(inputs)
        ]

    def prepare(self, batch: Sequence[Tokenized], is_query: bool) -> object:
        import torch

        size = self._plan.run_size or len(batch)
        runs = []
        for start in range(0, len(batch), size):
            encodings = [item.encoding for item in batch[start : start + size]]
            width = max(len(encoding.ids) for encoding in encodings)
            ids = np.full((len(encodings), width), self._pad_id, dtype=np.int64)
            types = np.zeros((len(encodings), width), dtype=np.int64)
            mask = np.zeros((len(encodings), width), dtype=np.int64)
            for row, encoding in enumerate(encodings):
                length = len(encoding.ids)
                span = slice(width - length, width) if self._left else slice(0, length)
                ids[row, span] = encoding.ids
                types[row, span] = encoding.type_ids
                mask[row, span] = 1
            arrays = {"input_ids": ids, "attention_mask": mask} | (
                {"token_type_ids": types} if self._types else {}
            )
            tensors = {name: torch.from_numpy(array) for name, array in arrays.items()}
            if self._plan.pin_memory:
                tensors = {name: tensor.pin_memory() for name, tensor in tensors.items()}
            runs.append(tensors)
        return runs

    def forward(self, prepared: object) -> np.ndarray:
        import torch

        runs = cast(list[dict[str, Any]], prepared)
        parts = []
        with torch.inference_mode():
            for tensors in runs:
                features = {
                    name: tensor.to(self._device, non_blocking=self._plan.non_blocking)
                    for name, tensor in tensors.items()
                }
                parts.append(self._model(features)["sentence_embedding"].float().cpu().numpy())
        return unit_rows(np.concatenate(parts))


def stages_of(embedder: Embedder, cpu_run_size: int) -> ModelStages:
    """The stages the engine runs `embedder` in: a sentence-transformers embedder's own runtime where it
    can be split (ONNX on CPU; PyTorch for a plain model that reproduces its own `encode`), else
    `PlainStages` over its `encode`."""
    if not isinstance(embedder, SentenceTransformerEmbedder):
        return PlainStages(embedder)
    runtime = embedder.page_runtime()
    if isinstance(runtime, OnnxEncoder):
        return OnnxStages(runtime, run_size("cpu", 1 << 30, cpu_run_size))
    stages = _checked_torch_stages(runtime, cpu_run_size)
    return stages or PlainStages(embedder, runtime.max_seq_length)


def _checked_torch_stages(model: "SentenceTransformer", cpu_run_size: int) -> TorchStages | None:
    """`TorchStages` over `model` if its layout is the plain one and it reproduces `model.encode` on the
    probes; else None, with the reason at INFO."""
    import torch

    kinds = [type(module).__name__ for module in model]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        log.info("embedding engine: the model's modules %s run through its own encode", kinds)
        return None
    if model.prompts.get("query") and getattr(model[1], "include_prompt", True) is False:
        log.info("embedding engine: a prompt excluded from pooling runs through the model's own encode")
        return None
    plan = forward_plan(str(model.device), torch.cuda.is_available(), cpu_run_size)
    stages = TorchStages(model, plan)
    tolerance = (
        PROBE_TOLERANCE_FP16 if next(model.parameters()).dtype == torch.float16 else PROBE_TOLERANCE_FP32
    )
    for is_query in (False, True):
        staged = stages.forward(stages.prepare(stages.tokenize(PROBE_TEXTS, is_query), is_query))
        own = unit_rows(
            model.encode(
                list(PROBE_TEXTS),
                prompt_name="query" if is_query and model.prompts.get("query") else None,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        )
        difference = float(np.abs(staged - own).max())
        if not difference <= tolerance:
            log.info("embedding engine: staged PyTorch differs from encode by %.1e; using encode", difference)
            return None
    return stages
