"""The random-weight stand-ins of bench.gpu.models: saved marked, refused by the embedder for real
storage, loaded only with `embedding_speed_only` (for speed benches)."""

import json
from pathlib import Path

import pytest

from bench.gpu.models import save_architecture_model
from memoryos import MemoryConfig, Memoryos
from memoryos.embedding.model_location import resolve_model_location
from memoryos.embedding.random_weights import RANDOM_WEIGHTS_MARKER
from memoryos.embedding.sentence_transformers_backend import (
    SentenceTransformerEmbedder,
)
from memoryos.errors import MemoryOSError


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bge-m3-shaped model (tiny shapes: the same builder) saved as the GPU bench saves one."""
    directory = tmp_path_factory.mktemp("bge-m3-random")
    save_architecture_model("bge-m3", resolve_model_location("all-MiniLM-L6-v2"), directory, "cpu", tiny=True)
    return directory


def test_the_builder_marks_the_directory(stand_in: Path) -> None:
    note = json.loads((stand_in / RANDOM_WEIGHTS_MARKER).read_text())
    assert note["architecture"] == "BAAI/bge-m3" and "random weights" in note["note"]


def test_a_space_refuses_to_store_with_random_weights(stand_in: Path, tmp_path: Path) -> None:
    config = MemoryConfig(data_dir=tmp_path, embedding_model_name=str(stand_in), embedding_device="cpu")
    with pytest.raises(MemoryOSError, match="embedding_speed_only"):
        SentenceTransformerEmbedder(config).encode(["a page"])
    with pytest.raises(MemoryOSError, match="random weights"), Memoryos.from_config("maya", config) as memory:
        memory.add_memory("I moved to Lisbon in May", "Nice!")
    assert not list(tmp_path.glob("**/memory.sqlite-wal"))  # nothing of the text was committed


def test_speed_only_loads_and_encodes_them(stand_in: Path, tmp_path: Path) -> None:
    config = MemoryConfig(
        data_dir=tmp_path,
        embedding_model_name=str(stand_in),
        embedding_device="cpu",
        embedding_speed_only=True,
    )
    vectors = SentenceTransformerEmbedder(config).encode(["a page", "another page"])
    assert vectors.shape == (2, 64)
