"""Models and texts for `bench.gpu.report`: named models, local copies, and architecture-only stand-ins.

- A model spec is a name the engine resolves (`all-MiniLM-L6-v2` is the bundled package; others come
  from the local Hugging Face cache) or `LABEL=PATH`: the model in directory PATH, reported as LABEL (an
  fp16 copy of MiniLM carried to a machine that lacks the bundled package, for instance).
- An architecture-only model (`--architectures`) is built from the published configuration of bge-m3 or
  Qwen3-Embedding-0.6B with random weights, tokenized with the MiniLM tokenizer (its ids lie inside
  either vocabulary). Throughput does not depend on the weights' values, so this measures the
  architecture's speed where its weights cannot be had; the token counts are MiniLM's, not the real
  tokenizer's, and the vectors mean nothing. Every such row says so (`ARCHITECTURE_NOTE`).
- Texts: LoCoMo exchanges, embedded as the engine embeds a page (`exchange_text`), from the dev data's
  `pairs/` directory or a JSON file of pairs copied next to the model.
- `MemoryPages`: a `PageSource` over texts in memory, for timing the engine's `EmbeddingBatcher` without
  SQLite.
"""

import functools
import json
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ARCHITECTURE_NOTE = "architecture only, random weights; token counts from the MiniLM tokenizer"


def locomo_pairs_found() -> Path | None:
    """The `pairs/` conversion beside the raw LoCoMo file the one lookup finds (`find_locomo_raw`, so
    `$MEMORYOS_LOCOMO` pointed at nothing means none); a machine without them takes `--locomo FILE`."""
    from memoryos.eval.locomo import find_locomo_raw

    raw = find_locomo_raw()
    return raw.parent / "pairs" if raw is not None else None


_FALLBACK_TEXT = (
    "the user said they went hiking with their family last weekend and the assistant asked about the "
    "trail the weather and whether they would go back again next month with friends"
)
_FALLBACK_WORDS = _FALLBACK_TEXT.split(" ")


@dataclass(frozen=True)
class Architecture:
    """A published embedding model's shape: enough to build it with random weights."""

    label: str
    model_type: str
    config: dict[str, Any]
    tiny_config: dict[str, Any]
    """Overrides for a CPU smoke run: the same code path, a model that builds in a second."""
    pooling: str
    max_seq_length: int


ARCHITECTURES: dict[str, Architecture] = {
    "bge-m3": Architecture(
        label="BAAI/bge-m3",
        model_type="xlm-roberta",
        config={
            "hidden_size": 1024,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "intermediate_size": 4096,
            "vocab_size": 250002,
            "max_position_embeddings": 8194,
            "type_vocab_size": 1,
            "layer_norm_eps": 1e-5,
            "pad_token_id": 1,
            "bos_token_id": 0,
            "eos_token_id": 2,
        },
        tiny_config={
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "intermediate_size": 128,
        },
        pooling="cls",
        max_seq_length=8192,
    ),
    "qwen3-embedding-0.6b": Architecture(
        label="Qwen/Qwen3-Embedding-0.6B",
        model_type="qwen3",
        config={
            "hidden_size": 1024,
            "num_hidden_layers": 28,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "intermediate_size": 3072,
            "vocab_size": 151669,
            "max_position_embeddings": 32768,
            "rope_theta": 1000000.0,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
            "hidden_act": "silu",
        },
        tiny_config={
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "intermediate_size": 128,
        },
        pooling="lasttoken",
        max_seq_length=32768,
    ),
}


def parse_model_spec(spec: str) -> tuple[str, str]:
    """(label, location) of `LABEL=PATH` or of a plain name (resolved as the engine resolves it)."""
    if "=" in spec:
        label, path = spec.split("=", 1)
        return label, path
    from memoryos.embedding.model_location import resolve_model_location

    return spec, resolve_model_location(spec)


def load_named_model(location: str, device: str) -> Any:
    """A sentence-transformers model from a path or a name in the local cache, fp16 on CUDA."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(location, device=device, local_files_only=True)
    return model.half() if device == "cuda" else model


def _load_spec(spec: str, device: str) -> Any:
    """Resolved inside the loader: a name that cannot be resolved becomes a skipped row, not a crash."""
    return load_named_model(parse_model_spec(spec)[1], device)


def build_architecture_model(key: str, tokenizer_location: str, device: str, tiny: bool) -> Any:
    """`ARCHITECTURES[key]` with random weights (seeded), the MiniLM tokenizer, and the real pooling.

    Built through transformers' own loader (saved to a temporary directory, then loaded as any local
    model) so that encoding runs the same sentence-transformers path as a downloaded model would.
    """
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Normalize, Pooling, Transformer
    from transformers import AutoConfig, AutoModel

    arch = ARCHITECTURES[key]
    config = AutoConfig.for_model(arch.model_type, **{**arch.config, **(arch.tiny_config if tiny else {})})
    dtype = torch.float16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    try:
        with torch.device(device):  # initializing 0.5B parameters is seconds on a GPU, longer on a CPU
            model = AutoModel.from_config(config).to(dtype)
    except (RuntimeError, ValueError, NotImplementedError):
        model = AutoModel.from_config(config).to(dtype)
    directory = tempfile.mkdtemp(prefix=f"gpu-report-{key}-")
    try:
        model.save_pretrained(directory)
        del model
        transformer = Transformer(
            directory,
            tokenizer_name_or_path=tokenizer_location,
            max_seq_length=arch.max_seq_length,
            model_kwargs={"dtype": dtype},
        )
        pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode=arch.pooling)
        return SentenceTransformer(modules=[transformer, pooling, Normalize()], device=device)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def save_architecture_model(
    key: str, tokenizer_location: str, directory: Path, device: str, tiny: bool
) -> None:
    """`build_architecture_model` saved as a sentence-transformers directory the engine can load by path,
    marked as random weights (`memoryos.embedding.random_weights`): a worker refuses it unless
    `embedding_speed_only` is set, so it can time the real worker path and never store a memory."""
    from memoryos.embedding.random_weights import RANDOM_WEIGHTS_MARKER

    build_architecture_model(key, tokenizer_location, device, tiny).save(str(directory))
    note = {"architecture": ARCHITECTURES[key].label, "note": ARCHITECTURE_NOTE, "tiny": tiny}
    (directory / RANDOM_WEIGHTS_MARKER).write_text(json.dumps(note) + "\n")


def model_loaders(
    specs: Sequence[str],
    architectures: Sequence[str],
    tokenizer_location: str | None,
    device: str,
    tiny: bool,
) -> list[tuple[str, dict[str, Any], Callable[[], Any]]]:
    """(label, row fields, loader) per model, loaded one at a time by the caller so only one is resident."""
    loaders: list[tuple[str, dict[str, Any], Callable[[], Any]]] = []
    for spec in specs:
        label = spec.split("=", 1)[0]
        loaders.append((label, {"weights": "real"}, functools.partial(_load_spec, spec, device)))
    for key in architectures:
        if tokenizer_location is None:
            raise ValueError("--architectures needs the MiniLM tokenizer: pass a MiniLM model in --models")
        arch = ARCHITECTURES[key]
        fields = {"weights": "random", "note": ARCHITECTURE_NOTE, "pooling": arch.pooling}
        if tiny:
            fields["note"] += "; tiny shapes for a smoke run"
        loaders.append(
            (
                f"{arch.label} (architecture only)",
                fields,
                functools.partial(build_architecture_model, key, tokenizer_location, device, tiny),
            )
        )
    return loaders


def load_locomo_pairs(source: Path | None) -> list[tuple[str, str]]:
    """(user_input, agent_response) of every exchange in a `pairs/` directory or a JSON file of pairs
    (`{"pairs": [...]}` or a list); empty when there is no such data here."""
    path = source or locomo_pairs_found()
    if path is None or not path.exists():
        if source is not None:
            raise FileNotFoundError(f"--locomo: {path} does not exist")
        return []
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    pairs: list[tuple[str, str]] = []
    for file in files:
        data = json.loads(file.read_text(encoding="utf-8"))
        for pair in data["pairs"] if isinstance(data, dict) else data:
            pairs.append((pair["user_input"], pair["agent_response"]))
    return pairs


def page_texts(pairs: Sequence[tuple[str, str]], count: int) -> list[str]:
    """`count` page texts as the engine embeds them, cycling through the exchanges in order."""
    from memoryos.types import exchange_text

    if not pairs:
        pairs = [(" ".join(_FALLBACK_WORDS[:12]), " ".join(_FALLBACK_WORDS[12:]))]
    return [exchange_text(*pairs[i % len(pairs)]) for i in range(count)]


def sample_texts(pairs: Sequence[tuple[str, str]], count: int, words: int) -> list[str]:
    """Deterministic texts of `words` words drawn from the LoCoMo vocabulary (a fixed list without it)."""
    # An array once: `rng.choice` on a list converts it on every call (seconds for thousands of texts).
    vocabulary = np.array(" ".join(u + " " + a for u, a in pairs).split() or _FALLBACK_WORDS)
    rng = np.random.default_rng(0)
    return [" ".join(rng.choice(vocabulary, size=words)) for _ in range(count)]


def distinct_pairs(pairs: Sequence[tuple[str, str]], count: int) -> list[tuple[str, str]]:
    """`count` exchanges, all different: the exchanges in order, and from the second pass over them on,
    each answer with its pass number appended (" (2)"). Repeated texts would be encoded once per batch
    (the embedder drops duplicates, and its cache keeps them), so a pooled batch must not hold any."""
    if not pairs:
        pairs = [(" ".join(_FALLBACK_WORDS[:12]), " ".join(_FALLBACK_WORDS[12:]))]
    cycle = len(pairs)
    chosen = []
    for i in range(count):
        user, agent = pairs[i % cycle]
        chosen.append((user, agent if i < cycle else f"{agent} ({i // cycle + 1})"))
    return chosen


def distinct_page_texts(pairs: Sequence[tuple[str, str]], count: int) -> list[str]:
    """The page texts of `distinct_pairs`, as the engine embeds them."""
    from memoryos.types import exchange_text

    return [exchange_text(user, agent) for user, agent in distinct_pairs(pairs, count)]


class Countdown:
    """Set once `count` vectors have been applied across every source sharing it."""

    def __init__(self, count: int) -> None:
        self._left = count
        self._lock = threading.Lock()
        self.done = threading.Event()
        self.finished_at = 0.0
        if count <= 0:
            self.done.set()

    def applied(self, count: int, at: float) -> None:
        with self._lock:
            self._left -= count
            if self._left <= 0 and not self.done.is_set():
                self.finished_at = at
                self.done.set()


class MemoryPages:
    """A `PageSource` (memoryos.scheduler.batcher) holding its pending texts in memory: what one space's
    store gives the batcher, without SQLite. It records the vectors it is given and counts them down."""

    def __init__(self, texts: Sequence[str], countdown: Countdown, clock: Callable[[], float]) -> None:
        self._pending = dict(enumerate(texts))
        self._lock = threading.Lock()
        self._countdown = countdown
        self._clock = clock
        self.vectors: dict[int, np.ndarray] = {}
        self.errors: list[BaseException] = []

    def pending_texts(self, limit: int) -> list[tuple[int, str]]:
        with self._lock:
            return list(self._pending.items())[:limit]

    def apply_vectors(self, page_ids: list[int], vectors: np.ndarray) -> None:
        with self._lock:
            for page_id, vector in zip(page_ids, vectors, strict=True):
                if self._pending.pop(page_id, None) is not None:
                    self.vectors[page_id] = vector
        self._countdown.applied(len(page_ids), self._clock())

    def embedding_failed(self, error: BaseException) -> None:
        self.errors.append(error)


def main() -> None:
    """`python -m bench.gpu.models save ARCH DIR --tokenizer MINILM_DIR [--device cuda] [--tiny]`."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    save = commands.add_parser("save", help="a random-weight model of ARCH's size, marked, in DIR")
    save.add_argument("architecture", choices=sorted(ARCHITECTURES))
    save.add_argument("directory", type=Path)
    save.add_argument("--tokenizer", required=True, help="the MiniLM model directory (its tokenizer)")
    save.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    save.add_argument("--tiny", action="store_true", help="tiny shapes: the same code path, for a CPU test")
    args = parser.parse_args()
    save_architecture_model(args.architecture, args.tokenizer, args.directory, args.device, args.tiny)
    print(args.directory)


if __name__ == "__main__":
    main()
