"""`MemoryConfig` says only what is true: every setting is read, every file or test it names exists; and a
local model directory may be given as a `Path`."""

import io
import re
import tokenize
from pathlib import Path

import memoryos.config
from memoryos import MemoryConfig, Memoryos
from memoryos.embedding import create_embedder
from memoryos.llm.offline.backend import OfflineLLM
from tests.support.fakes import HashEmbedder

ROOT = Path(__file__).resolve().parents[2]
CONFIG_SOURCE = Path(memoryos.config.__file__)

NOT_READ_YET: dict[str, str] = {}
"""Settings that exist ahead of the code that reads them, each with the reason; the description says so."""

_READ = r"\.{name}\b|[\"']{name}[\"']"
"""How code reads a setting: `config.name`, or by name (`getattr`, `model_copy(update=...)`, a field set)."""
_FILE = re.compile(r"(?<![\w/.~$])((?:tests|memoryos|docs|bench)/[\w./-]*\w)(?:::(\w+))?")
"""A repository path such as `tests/unit/test_x.py` or `docs/retrieval.md`, optionally `::test_name`."""
_TEST_NAME = re.compile(r"(?<![\w/:])(test_\w+)")


def _engine_sources() -> dict[Path, str]:
    """The engine's code outside `config.py`, plus `config.py`'s code below the settings (its methods)."""
    sources = {path: path.read_text() for path in (ROOT / "memoryos").rglob("*.py") if path != CONFIG_SOURCE}
    methods = CONFIG_SOURCE.read_text().split("@field_validator", 1)[1]
    code = "\n".join(line for line in methods.splitlines() if not line.lstrip().startswith("@"))
    return {**sources, CONFIG_SOURCE: code}  # a validator's decorator names its field without reading it


def _config_prose() -> list[str]:
    """Every field's description, and the comments of `config.py`: what a reader takes as the truth."""
    descriptions = [field.description for field in MemoryConfig.model_fields.values() if field.description]
    tokens = tokenize.generate_tokens(io.StringIO(CONFIG_SOURCE.read_text()).readline)
    comments = [token.string for token in tokens if token.type == tokenize.COMMENT]
    return descriptions + comments


def _defined_tests() -> dict[Path, set[str]]:
    return {
        path: set(re.findall(r"^\s*(?:async\s+)?def (test_\w+)", path.read_text(), re.MULTILINE))
        for path in (ROOT / "tests").rglob("*.py")
    }


def test_every_setting_is_read_by_the_engine() -> None:
    """A setting nothing reads is a promise the engine does not keep: `chain_min_similarity` described a
    cosine continuity check while continuity was the time gap and the LLM's yes/no (offline: a shared
    content word), so setting it changed nothing."""
    sources = _engine_sources()
    unread = [
        name
        for name in MemoryConfig.model_fields
        if not any(re.search(_READ.format(name=name), text) for text in sources.values())
    ]

    assert sorted(unread) == sorted(NOT_READ_YET), (
        "unread settings; once one is read, drop it from NOT_READ_YET"
    )
    for name in NOT_READ_YET:
        assert "Not read yet" in (MemoryConfig.model_fields[name].description or "")


def test_field_descriptions_name_only_tests_and_files_that_exist() -> None:
    defined = _defined_tests()
    every_test = set().union(*defined.values()) | {path.stem for path in defined}
    missing: list[str] = []
    for text in _config_prose():
        for path, test in _FILE.findall(text):
            if not (ROOT / path).exists():
                missing.append(path)
            elif test and test not in defined.get(ROOT / path, set()):
                missing.append(f"{path}::{test}")
        missing += [name for name in _TEST_NAME.findall(text) if name not in every_test]

    assert missing == []


def test_the_prose_checker_sees_test_names_and_paths() -> None:
    """The check above is only as good as its patterns: each form a description could use is found."""
    text = "see tests/unit/test_x.py::test_y, test_z and docs/retrieval.md; cached in ~/.cache/memoryos."

    assert _FILE.findall(text) == [("tests/unit/test_x.py", "test_y"), ("docs/retrieval.md", "")]
    assert _TEST_NAME.findall(text) == ["test_z"]


def test_a_local_model_directory_may_be_given_as_a_path(tmp_path: Path) -> None:
    model_dir = tmp_path / "models" / "my-minilm"

    config = MemoryConfig(embedding_model_name=model_dir)
    assert config.embedding_model_name == str(model_dir)
    assert type(config.embedding_model_name) is str, "the store records the name"
    config.embedding_model_name = tmp_path / "other"  # assignment is validated the same way
    assert config.embedding_model_name == str(tmp_path / "other")
    assert MemoryConfig.model_validate_json(config.model_dump_json()) == config
    assert create_embedder(MemoryConfig(embedding_model_name=model_dir)).name == str(model_dir)


def test_the_facade_takes_a_model_directory_as_a_path(tmp_path: Path) -> None:
    model_dir = tmp_path / "models" / "my-minilm"

    with Memoryos(
        "alice",
        None,
        tmp_path / "data",
        embedding_model_name=model_dir,
        config=MemoryConfig(faiss_use_gpu="never", ingest_mode="inline"),
        embedder=HashEmbedder(),
        llm=OfflineLLM(),
    ) as memory:
        assert memory.config.embedding_model_name == str(model_dir)
