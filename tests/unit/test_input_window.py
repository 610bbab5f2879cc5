"""`InputWindow`: texts cut to a served model's window on the client, by its tokenizer when one is on
this machine, else by characters (tests/integration/test_embeddings_api_limits.py sends them)."""

import logging
from pathlib import Path

import pytest

from memoryos.embedding.truncation import CHARS_PER_TOKEN, InputWindow
from tests.support.embeddings_server import token_count, word_level_tokenizer

WORDS = [f"word{index}" for index in range(100)]
TEXT = " ".join(WORDS)


def test_without_a_window_only_a_character_bound_cuts() -> None:
    window = InputWindow("no-such-model", None)
    assert window.cut(TEXT) == TEXT
    assert window.cut(TEXT, 10) == TEXT[:10]
    assert window.max_tokens is None and not window.exact


def test_without_the_tokenizer_a_window_cuts_at_three_characters_per_token() -> None:
    window = InputWindow("no-such-model", 10)
    assert window.cut(TEXT) == TEXT[: (10 - 2) * CHARS_PER_TOKEN]
    assert window.cut("short") == "short"
    assert not window.exact


def test_a_stated_window_is_learned_only_when_smaller() -> None:
    window = InputWindow("no-such-model", None)
    assert window.learn(64) and window.max_tokens == 64
    assert not window.learn(128) and window.max_tokens == 64
    assert window.learn(16) and window.max_tokens == 16


def test_the_models_tokenizer_cuts_after_the_last_token_that_fits(tmp_path: Path) -> None:
    word_level_tokenizer(tmp_path / "model", WORDS)
    window = InputWindow(str(tmp_path / "model"), 12)
    assert window.exact
    cut = window.cut(TEXT)
    assert cut == " ".join(WORDS[:10]) and token_count(cut) == 12
    assert window.cut(" ".join(WORDS[:10])) == " ".join(WORDS[:10])  # fits: unchanged
    accented = " ".join(f"é{word}" for word in WORDS)  # not ASCII: always tokenized
    assert window.cut(accented) == " ".join(f"é{word}" for word in WORDS[:10])


def test_an_unreadable_tokenizer_falls_back_to_characters_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "tokenizer.json").write_text("{not json")
    window = InputWindow(str(tmp_path), 10)
    assert not window.exact
    assert window.cut(TEXT) == TEXT[: (10 - 2) * CHARS_PER_TOKEN]
    assert any(record.levelno == logging.WARNING for record in caplog.records)
