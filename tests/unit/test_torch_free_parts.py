"""The pieces of the torch-free embedding path, without the model: pooling against sentence-transformers'
own module, the device decided without torch, the model directory's fingerprint, manifest reading, and the
CLI's words and flags around it."""

import argparse
import json
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from memoryos.cli.session import config_of, pending_message
from memoryos.config import MemoryConfig
from memoryos.embedding.device import cpu_without_torch, gpu_may_be_present
from memoryos.embedding.onnx.encoder import pool
from memoryos.embedding.onnx.manifest import (
    FORMAT,
    POOLING_MODES,
    ExportManifest,
    directory_fingerprint,
    manifest_path,
    read_manifest,
    stale_because,
    vectors_text,
)


@pytest.mark.parametrize("mode", POOLING_MODES)
@pytest.mark.parametrize("side", ["right", "left"])
def test_pooling_matches_sentence_transformers(mode: str, side: str) -> None:
    import torch
    from sentence_transformers.sentence_transformer.modules import Pooling

    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(3, 7, 8)).astype(np.float32)
    lengths = [7, 4, 1]
    mask = np.zeros((3, 7), dtype=np.int64)
    for row, length in enumerate(lengths):
        mask[row, 7 - length :] = 1 if side == "left" else 0
        mask[row, :length] = 1 if side == "right" else 0
    features = {"token_embeddings": torch.from_numpy(hidden), "attention_mask": torch.from_numpy(mask)}
    expected = Pooling(8, pooling_mode=mode)(features)["sentence_embedding"].numpy()
    np.testing.assert_allclose(pool(hidden, mask, mode), expected, atol=1e-6)


def test_an_unknown_pooling_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="weightedmean"):
        pool(np.zeros((1, 2, 3), dtype=np.float32), np.ones((1, 2), dtype=np.int64), "weightedmean")


def test_the_device_is_decided_without_torch_only_where_no_gpu_can_be(tmp_path: Path) -> None:
    absent = [str(tmp_path / "no-driver")]
    empty_list = tmp_path / "gpus"
    empty_list.mkdir()
    assert not gpu_may_be_present({}, absent)
    assert not gpu_may_be_present({}, [str(empty_list)])  # the driver loaded, no GPU
    (empty_list / "0000:00:1e.0").mkdir()
    assert gpu_may_be_present({}, [str(empty_list)])
    node = tmp_path / "nvidia0"
    node.touch()
    assert gpu_may_be_present({}, [str(node)])
    for hidden in ("", "-1"):  # every device hidden from CUDA
        assert not gpu_may_be_present({"CUDA_VISIBLE_DEVICES": hidden}, [str(node)])
    assert gpu_may_be_present({"CUDA_VISIBLE_DEVICES": "0"}, [str(node)])

    assert cpu_without_torch("cpu", None)
    assert not cpu_without_torch("cuda", None)
    assert not cpu_without_torch("cpu", "cuda:1")  # a device in embedding_model_kwargs wins
    assert cpu_without_torch("cuda", "cpu")
    hidden_env = {"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": ""}
    assert cpu_without_torch("auto", None, hidden_env)


def test_the_model_fingerprint_follows_names_sizes_and_mtimes(tmp_path: Path) -> None:
    model = tmp_path / "model"
    (model / "1_Pooling").mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "1_Pooling" / "config.json").write_text('{"pooling_mode": "mean"}')
    first = directory_fingerprint(model)
    (model / ".cache").mkdir()
    (model / ".cache" / "lock").write_text("x")  # hidden entries do not count
    assert directory_fingerprint(model) == first
    pooling = model / "1_Pooling" / "config.json"
    pooling.write_text('{"pooling_mode": "cls"}')  # same size, new mtime
    os.utime(pooling, ns=(1, 1))
    changed = directory_fingerprint(model)
    assert changed != first
    (model / "extra.json").write_text("{}")
    assert directory_fingerprint(model) not in (first, changed)

    cache = tmp_path / "cache"
    assert manifest_path(cache, model, {}) != manifest_path(cache, model, {"truncate_dim": 128})
    assert manifest_path(cache, model, {}) == manifest_path(cache, model, {})


def manifest(**changes: object) -> ExportManifest:
    fields: dict[str, object] = {
        "format": FORMAT,
        "verified": True,
        "model_name": "m",
        "model_dir": "/models/m",
        "model_kwargs": {},
        "fingerprint": "abc",
        "export": "e.onnx",
        "export_size": 10,
        "tokenizer": "t.json",
        "input_names": ["input_ids", "attention_mask"],
        "max_seq_length": 256,
        "truncation_side": "right",
        "pad_id": 0,
        "pad_type_id": 0,
        "padding_side": "right",
        "pooling": "mean",
        "normalize": True,
        "truncate_dim": None,
        "query_prompt": "",
        "dim": 2,
        "versions": {"onnxruntime": "1.0", "tokenizers": "0.1"},
        "probe_texts": ["a"],
        "probe_is_query": [True],
        "torch_vectors": vectors_text(np.array([[0.6, 0.8]])),
        "onnx_vectors": vectors_text(np.array([[0.6, 0.8]])),
        "max_difference": 0.0,
    }
    return ExportManifest.model_validate({**fields, **changes})


def test_manifests_are_read_checked_and_refused_with_a_reason(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    assert read_manifest(path)[0] is None and "no export manifest yet" in read_manifest(path)[1]
    for text in ("{not json", json.dumps({"format": FORMAT}), "[]"):
        path.write_text(text)
        found, why = read_manifest(path)
        assert found is None and "not a valid manifest" in why
    path.write_text(manifest(format=FORMAT + 1).model_dump_json())
    assert "has format" in read_manifest(path)[1]
    good = manifest()
    path.write_text(good.model_dump_json())
    assert read_manifest(path) == (good, "")
    np.testing.assert_array_equal(good.probe_vectors("onnx"), np.array([[0.6, 0.8]], dtype=np.float32))

    versions = {"onnxruntime": "1.0", "tokenizers": "0.1"}
    assert stale_because(good, "abc", versions) == ""
    assert "changed since" in stale_because(good, "other", versions)
    assert "onnxruntime is 1.1" in stale_because(good, "abc", {**versions, "onnxruntime": "1.1"})
    unverified = manifest(verified=False, reason="pooling mode 'weightedmean' is not one of ...")
    assert "weightedmean" in stale_because(unverified, "abc", versions)


def test_the_pending_pages_message_says_when_pytorch_loads() -> None:
    def memory(will_load: bool) -> SimpleNamespace:
        return SimpleNamespace(
            pending_pages_at_open=832, embedder=SimpleNamespace(will_load_pytorch=lambda: will_load)
        )

    quiet = pending_message(memory(False))  # type: ignore[arg-type]
    loud = pending_message(memory(True))  # type: ignore[arg-type]
    assert quiet.startswith("embedding 832 pages left pending by an earlier run (interrupted?) first")
    assert "PyTorch" not in quiet
    assert "no verified ONNX export of the model yet, so this loads PyTorch" in loud


def test_show_progress_comes_from_the_environment_or_verbose(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMORYOS_SHOW_PROGRESS", raising=False)
    assert MemoryConfig().show_progress is False
    quiet = argparse.Namespace(data_dir=None, verbose=False)
    assert config_of(quiet).show_progress is False
    assert config_of(argparse.Namespace(data_dir=None, verbose=True)).show_progress is True
    monkeypatch.setenv("MEMORYOS_SHOW_PROGRESS", "1")
    assert config_of(quiet).show_progress is True
