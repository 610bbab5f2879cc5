"""What the torch-free builder refuses, by name, before reading any weights: other architectures, settings
its graph or the encoder do not implement, and embedding_model_kwargs that need the model loaded."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from memoryos.embedding.model_location import resolve_model_location
from memoryos.embedding.model_pipeline import read_pipeline
from memoryos.embedding.onnx.build import UnsupportedModelError, build_graph, input_names


@pytest.fixture
def model_dir(tmp_path) -> Path:
    """The bundled MiniLM's small files (no weights: nothing here reads them)."""
    copy = tmp_path / "minilm"
    shutil.copytree(
        resolve_model_location("all-MiniLM-L6-v2"), copy, ignore=shutil.ignore_patterns("model.safetensors")
    )
    return copy


def edit(path: Path, **changes: object) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_the_bundled_layout_reads_as_sentence_transformers_loads_it(model_dir):
    fields = read_pipeline(model_dir, {"device": "cpu"}).fields
    assert fields == {
        "input_names": ["input_ids", "token_type_ids", "attention_mask"],
        "max_seq_length": 256,
        "truncation_side": "right",
        "pad_id": 0,
        "pad_type_id": 0,
        "padding_side": "right",
        "pooling": "mean",
        "normalize": True,
        "truncate_dim": None,
        "query_prompt": "",
    }


@pytest.mark.parametrize("model_type", ["gpt2", "qwen3", "roberta"])
def test_another_architecture_is_refused_naming_its_model_type(model_dir, model_type):
    edit(model_dir / "config.json", model_type=model_type)
    with pytest.raises(
        UnsupportedModelError, match=f"model_type '{model_type}' has no torch-free ONNX builder"
    ):
        read_pipeline(model_dir, {})
    with pytest.raises(UnsupportedModelError, match=model_type):
        input_names({"model_type": model_type})


@pytest.mark.parametrize(
    ("setting", "value"),
    [("hidden_act", "gelu_new"), ("position_embedding_type", "relative_key"), ("is_decoder", True)],
)
def test_a_config_setting_the_graph_lacks_is_refused(model_dir, setting, value):
    config = {**json.loads((model_dir / "config.json").read_text()), setting: value}
    with pytest.raises(UnsupportedModelError, match=f"{setting} {value!r} is not implemented"):
        build_graph(config, {"embeddings.word_embeddings.weight": np.zeros((2, 384), np.float32)})


def test_pipelines_the_encoder_lacks_are_refused(model_dir):
    pooling = model_dir / "1_Pooling" / "config.json"
    edit(pooling, pooling_mode_mean_tokens=False, pooling_mode_weightedmean_tokens=True)
    with pytest.raises(UnsupportedModelError, match="pooling mode 'weightedmean'"):
        read_pipeline(model_dir, {})
    edit(pooling, pooling_mode_weightedmean_tokens=False, pooling_mode_cls_token=True)
    assert read_pipeline(model_dir, {}).fields["pooling"] == "cls"  # the pre-6.0 flags

    edit(model_dir / "sentence_bert_config.json", do_lower_case=True)
    with pytest.raises(UnsupportedModelError, match="sets do_lower_case to True"):
        read_pipeline(model_dir, {})
    edit(model_dir / "sentence_bert_config.json", do_lower_case=False)

    edit(
        model_dir / "config_sentence_transformers.json",
        prompts={"query": "query: "},
        default_prompt_name="query",
    )
    with pytest.raises(UnsupportedModelError, match="default prompt 'query'"):
        read_pipeline(model_dir, {})
    edit(model_dir / "config_sentence_transformers.json", default_prompt_name=None)
    fields = read_pipeline(model_dir, {"truncate_dim": 64}).fields
    assert (fields["query_prompt"], fields["truncate_dim"]) == ("query: ", 64)

    modules = json.loads((model_dir / "modules.json").read_text())
    (model_dir / "modules.json").write_text(json.dumps([*modules, {"path": "3_Dense", "type": "x.Dense"}]))
    with pytest.raises(UnsupportedModelError, match="'Dense'"):
        read_pipeline(model_dir, {})


def test_kwargs_that_change_what_pytorch_loads_are_refused(model_dir):
    with pytest.raises(UnsupportedModelError, match=r"embedding_model_kwargs \['model_kwargs', 'prompts'\]"):
        read_pipeline(model_dir, {"model_kwargs": {"torch_dtype": "float16"}, "prompts": {"query": "q: "}})
