"""The ONNX graph of a BERT or XLM-RoBERTa encoder, written from its safetensors without PyTorch.

A first install should embed without torch (hundreds of MB on CPU, several GB with CUDA): the transformer
of the default model is small and plain, so its graph is written here node by node with the `onnx`
package from `config.json` and `model.safetensors`, the same graph `torch.onnx.export` gives (inputs as the
tokenizer names them, int64; one output `hidden`, the last hidden state, float32; batch and token axes
dynamic; opset 17). Only the arithmetic is spelled out: ONNX Runtime's default optimizations fuse it
(attention, GELU, LayerNorm) as they do the exported graph. Whether it computes what PyTorch computes is
not decided here: `onnx/torch_free.py` compares its vectors with PyTorch's recorded ones.

Anything in `config.json` this graph does not implement is refused, naming the setting: a graph that
ignores part of a model would give plausible, wrong vectors.
"""

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from memoryos.errors import MemoryOSError

OPSET = 17
"""As the PyTorch export (`onnx.queries.OPSET`); LayerNormalization is standard from 17."""

INPUT_NAMES: dict[str, tuple[str, ...]] = {
    "bert": ("input_ids", "token_type_ids", "attention_mask"),
    "xlm-roberta": ("input_ids", "attention_mask"),
}
"""The graph's inputs per `model_type`, in the order their tokenizers in transformers name them
(`model_input_names`): XLM-RoBERTa's tokenizer gives no token types."""

MAX_WEIGHT_BYTES = 2**31 - 2**24
"""An ONNX file holds its weights in one protobuf, which cannot exceed 2 GiB (less some room for the
graph); larger models (bge-m3's 2.3 GB) need the PyTorch exporter and its external data."""


class UnsupportedModelError(MemoryOSError):
    """The model cannot be exported or checked without PyTorch (its architecture, a setting, no recorded
    reference); the message says which, the embedder adds how to install PyTorch."""


def input_names(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The inputs of the graph `build_graph` writes for `config` (a parsed config.json); raises
    UnsupportedModelError for a `model_type` it does not write, or a setting its graph lacks."""
    model_type = config.get("model_type")
    if model_type not in INPUT_NAMES:
        raise UnsupportedModelError(
            f"model_type {model_type!r} has no torch-free ONNX builder (it writes {', '.join(INPUT_NAMES)})"
        )
    _check_settings(config)
    return INPUT_NAMES[model_type]


def build_graph(config: Mapping[str, Any], weights: Mapping[str, np.ndarray]) -> Any:
    """The `onnx.ModelProto` of the encoder described by `config` with `weights` (safetensors names, with
    or without the `bert.` / `roberta.` prefix a task model adds). Raises UnsupportedModelError."""
    names = input_names(config)
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    eps = float(config.get("layer_norm_eps", 1e-12))
    graph = _Graph(_strip_prefix(weights))
    embedded = graph.embeddings(config, names, eps)
    mask = graph.additive_mask()
    for layer in range(int(config["num_hidden_layers"])):
        embedded = graph.layer(embedded, mask, f"encoder.layer.{layer}", hidden, heads, eps)
    return graph.model(names, embedded, hidden)


def write_graph(config: Mapping[str, Any], weights_path: Path, path: Path) -> None:
    """Build the graph of the model `config` describes from `weights_path` (a model.safetensors) and
    write it to `path` atomically. Raises UnsupportedModelError for what it cannot build."""
    from safetensors.numpy import load_file

    from memoryos.storage.atomic import atomic_write_bytes

    input_names(config)  # refuse before reading the weights
    if not weights_path.is_file():
        raise UnsupportedModelError(f"there is no {weights_path}")
    if weights_path.stat().st_size > MAX_WEIGHT_BYTES:
        raise UnsupportedModelError(f"{weights_path} is over the 2 GiB an ONNX file can hold in one piece")
    try:
        weights = load_file(str(weights_path))
    except (TypeError, ValueError) as error:  # bfloat16, which numpy has no type for
        raise UnsupportedModelError(f"cannot read {weights_path} with numpy ({error})") from error
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, build_graph(config, weights).SerializeToString())


def _check_settings(config: Mapping[str, Any]) -> None:
    """Refuse what the graph does not implement: other activations, relative positions, a decoder."""
    unsupported = {
        "hidden_act": (config.get("hidden_act", "gelu"), "gelu"),
        "position_embedding_type": (config.get("position_embedding_type", "absolute"), "absolute"),
        "is_decoder": (bool(config.get("is_decoder", False)), False),
        "add_cross_attention": (bool(config.get("add_cross_attention", False)), False),
    }
    for key, (value, supported) in unsupported.items():
        if value != supported:
            raise UnsupportedModelError(
                f"{key} {value!r} is not implemented by the torch-free ONNX builder (only {supported!r}): "
            )
    if int(config["hidden_size"]) % int(config["num_attention_heads"]):
        raise UnsupportedModelError("hidden_size is not a multiple of num_attention_heads")


def _strip_prefix(weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Weight names as the bare encoder has them ("embeddings.…", "encoder.layer.N.…")."""
    key = next((name for name in weights if name.endswith("embeddings.word_embeddings.weight")), None)
    if key is None:
        raise UnsupportedModelError("the weights hold no embeddings.word_embeddings.weight")
    prefix = key.removesuffix("embeddings.word_embeddings.weight")
    return {name.removeprefix(prefix): array for name, array in weights.items() if name.startswith(prefix)}


class _Graph:
    """Nodes and float32 initializers of one encoder graph, named as the weights are."""

    def __init__(self, weights: Mapping[str, np.ndarray]) -> None:
        self._weights = weights
        self._nodes: list[Any] = []
        self._initializers: list[Any] = []
        self._count = 0

    def weight(self, name: str, transpose: bool = False) -> str:
        """An initializer from the weights (float16 widened: the graph computes in float32)."""
        try:
            array = self._weights[name]
        except KeyError:
            raise UnsupportedModelError(f"the weights hold no {name}") from None
        return self.constant(array.T if transpose else array, name)

    def constant(self, value: Any, name: str | None = None) -> str:
        from onnx import numpy_helper

        array = np.asarray(value)
        array = array.astype(np.float32) if array.dtype.kind == "f" else array.astype(np.int64)
        name = name or self._name("const")
        self._initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def op(self, op_type: str, *inputs: str, **attributes: Any) -> str:
        from onnx import helper

        output = self._name(op_type)
        self._nodes.append(helper.make_node(op_type, list(inputs), [output], name=output, **attributes))
        return output

    def _name(self, kind: str) -> str:
        self._count += 1
        return f"{kind}_{self._count}"

    def linear(self, x: str, prefix: str) -> str:
        """x @ W.T + b, as torch.nn.Linear (W stored transposed: no Transpose node)."""
        product = self.op("MatMul", x, self.weight(f"{prefix}.weight", transpose=True))
        return self.op("Add", product, self.weight(f"{prefix}.bias"))

    def layer_norm(self, x: str, prefix: str, eps: float) -> str:
        return self.op(
            "LayerNormalization",
            x,
            self.weight(f"{prefix}.weight"),
            self.weight(f"{prefix}.bias"),
            axis=-1,
            epsilon=eps,
        )

    def embeddings(self, config: Mapping[str, Any], names: tuple[str, ...], eps: float) -> str:
        """Word + token type + position embeddings, then LayerNorm (transformers' order of sums).

        BERT numbers positions 0..T-1; XLM-RoBERTa numbers the real tokens from padding_idx + 1 and gives
        padding position padding_idx (cumsum of the non-padding mask, as `create_position_ids_from_input_ids`)."""
        words = self.op("Gather", self.weight("embeddings.word_embeddings.weight"), "input_ids")
        types = self.weight("embeddings.token_type_embeddings.weight")
        if "token_type_ids" in names:
            summed = self.op("Add", words, self.op("Gather", types, "token_type_ids"))
        else:  # no token types given: all of type 0
            summed = self.op(
                "Add", words, self.constant(self._weights["embeddings.token_type_embeddings.weight"][0])
            )
        table = self.weight("embeddings.position_embeddings.weight")
        if config["model_type"] == "xlm-roberta":
            padding = int(config.get("pad_token_id", 1))
            real = self.op(
                "Cast", self.op("Not", self.op("Equal", "input_ids", self.constant(padding))), to=7
            )
            counted = self.op("Mul", self.op("CumSum", real, self.constant(1)), real)
            positions = self.op("Gather", table, self.op("Add", counted, self.constant(padding)))
        else:  # the first T rows of the table, broadcast over the batch
            tokens = self.op("Shape", "input_ids", start=1, end=2)
            positions = self.op("Slice", table, self.constant([0]), tokens, self.constant([0]))
        return self.layer_norm(self.op("Add", summed, positions), "embeddings.LayerNorm", eps)

    def additive_mask(self) -> str:
        """(batch, 1, 1, tokens): 0 for real tokens, float32's lowest for padding (transformers' eager mask)."""
        mask = self.op("Cast", "attention_mask", to=1)
        blocked = self.op("Sub", self.constant(np.float32(1.0)), mask)
        lowest = self.op("Mul", blocked, self.constant(np.finfo(np.float32).min))
        return self.op("Unsqueeze", lowest, self.constant([1, 2]))

    def layer(self, x: str, mask: str, prefix: str, hidden: int, heads: int, eps: float) -> str:
        """One post-LayerNorm transformer layer: self-attention, then the GELU feed-forward block."""
        size = hidden // heads
        split = self.constant([0, 0, heads, size])

        def heads_first(name: str, perm: list[int]) -> str:
            projected = self.linear(x, f"{prefix}.attention.self.{name}")
            return self.op("Transpose", self.op("Reshape", projected, split), perm=perm)

        query = heads_first("query", [0, 2, 1, 3])
        key = heads_first("key", [0, 2, 3, 1])
        value = heads_first("value", [0, 2, 1, 3])
        scores = self.op("Mul", self.op("MatMul", query, key), self.constant(np.float32(1 / math.sqrt(size))))
        weights = self.op("Softmax", self.op("Add", scores, mask), axis=-1)
        context = self.op("Transpose", self.op("MatMul", weights, value), perm=[0, 2, 1, 3])
        merged = self.op("Reshape", context, self.constant([0, 0, hidden]))
        attended = self.op("Add", self.linear(merged, f"{prefix}.attention.output.dense"), x)
        attended = self.layer_norm(attended, f"{prefix}.attention.output.LayerNorm", eps)
        inner = self.gelu(self.linear(attended, f"{prefix}.intermediate.dense"))
        output = self.op("Add", self.linear(inner, f"{prefix}.output.dense"), attended)
        return self.layer_norm(output, f"{prefix}.output.LayerNorm", eps)

    def gelu(self, x: str) -> str:
        """x * 0.5 * (1 + erf(x / sqrt(2))): transformers' "gelu" (the exact form, not the tanh one)."""
        erf = self.op("Erf", self.op("Div", x, self.constant(np.float32(math.sqrt(2.0)))))
        return self.op(
            "Mul",
            self.op("Mul", x, self.op("Add", erf, self.constant(np.float32(1.0)))),
            self.constant(np.float32(0.5)),
        )

    def model(self, names: tuple[str, ...], output: str, hidden: int) -> Any:
        from onnx import TensorProto, helper

        inputs = [
            helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "tokens"]) for name in names
        ]
        result = helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "tokens", hidden])
        self._nodes.append(helper.make_node("Identity", [output], ["hidden"], name="hidden"))
        graph = helper.make_graph(self._nodes, "encoder", inputs, [result], self._initializers)
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="memoryos.onnx_build"
        )
        model.ir_version = 8  # what ONNX Runtime 1.20+ reads for opset 17
        return model
