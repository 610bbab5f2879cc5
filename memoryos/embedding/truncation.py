"""Texts against a model's input window.

A local model truncates by itself; whether a call truncated any text is told cheaply: a character bound
rules most texts out without the tokenizer (`may_exceed`), and a hook reads the width of the batches
sentence-transformers tokenized anyway (`WidthProbe`); only the rest are tokenized again
(`count_truncated`). A served model may refuse a text past its window instead (TEI without
`--auto-truncate` answers 413, vLLM 400), so the embeddings server's client cuts texts to it first
(`InputWindow`).
"""

import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tokenizers
    from sentence_transformers import SentenceTransformer

log = logging.getLogger(__name__)


MARKER_SLACK = 1
"""Tokens an ASCII text can yield beyond one per character: the word-start marker a byte-level BPE
(`add_prefix_space`) or SentencePiece (`Metaspace`) tokenizer may prepend. See `may_exceed`."""


def may_exceed(text: str, max_tokens: int, special_tokens: int) -> bool:
    """Whether `text` could tokenize to more than `max_tokens` tokens; False only when it cannot.

    A cheap bound instead of a tokenizer run. For an ASCII text, every token covers at least one of its
    characters: WordPiece (BERT, MiniLM) splits on whitespace, which it drops, and on punctuation, and each
    piece of a word holds one character or more ([UNK] stands for a whole word); byte-level BPE (GPT-2,
    Qwen) has one byte per ASCII character and at least one byte per token; SentencePiece (XLM-R, T5) maps
    each character to one symbol and each piece holds one symbol or more. On top of that come at most one
    word-start marker (`MARKER_SLACK`) and the special tokens the tokenizer adds (2 for [CLS] ... [SEP]).
    So `len(text) + special_tokens + MARKER_SLACK` bounds the count. Non-ASCII text has no such bound
    (Unicode normalization expands one code point to up to 18, a byte-level tokenizer spends up to 4 tokens
    on one character), so it is always checked. Getting this wrong would only lose a log line, never change
    a vector: the model truncates whatever this says.
    """
    return not text.isascii() or len(text) + special_tokens + MARKER_SLACK > max_tokens


class WidthProbe:
    """Whether any batch sentence-transformers tokenized inside `model.encode` reached `max_tokens`.

    sentence-transformers pads each batch to its longest text and truncates at `max_seq_length`, so a batch
    narrower than the limit holds no truncated text. A forward pre-hook on the first module reads the width
    of the attention mask it is given (no GPU work, no sync). Where there is no 2-D attention mask to read
    (unpadded flash-attention inputs, another first module), it answers "reached", and the caller tokenizes
    as before. Used with the model lock held: no other encode runs on the module meanwhile.
    """

    def __init__(self, model: "SentenceTransformer", max_tokens: int) -> None:
        self.reached = False
        self._max_tokens = max_tokens
        self._model = model
        self._handle: Any = None

    def __enter__(self) -> "WidthProbe":
        try:
            self._handle = self._model[0].register_forward_pre_hook(self._see)
        except (AttributeError, IndexError, TypeError, RuntimeError):
            self.reached = True
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._handle is not None:
            self._handle.remove()

    def _see(self, module: object, args: tuple[Any, ...]) -> None:
        features = args[0] if args else None
        mask = features.get("attention_mask") if isinstance(features, Mapping) else None  # a BatchEncoding
        shape: tuple[int, ...] = tuple(getattr(mask, "shape", ()))
        if len(shape) != 2 or shape[1] >= self._max_tokens:
            self.reached = True


def count_truncated(model: "SentenceTransformer", texts: list[str], max_tokens: int) -> int:
    """How many of `texts` tokenize to more than `max_tokens` (special tokens included)."""
    # Tokenizing one token past the limit tells "too long" apart without the tokenizer's own warning.
    tokens = model.tokenizer(texts, truncation=True, max_length=max_tokens + 1, return_length=True)
    return sum(1 for length in tokens["length"] if length > max_tokens)


CHARS_PER_TOKEN = 3
"""Characters a token is taken to cover when a served model's window is known but not its tokenizer.
English prose runs about 4 to 4.5 characters per token with WordPiece, BPE and SentencePiece
vocabularies, code and numbers nearer 3: cutting at 3 keeps such texts inside the window, at the cost of
up to a quarter of it. Scripts with fewer characters per token (Chinese, Japanese: about 1) can still go
past it; the server's refusal then gets the text cut further (memoryos/embedding/openai_api.py)."""

SPECIAL_TOKENS_GUESS = 2
"""Special tokens a model adds to each text ([CLS] ... [SEP], <s> ... </s>), reserved from the window
when the tokenizer is not at hand to say."""


def local_tokenizer(model_name: str) -> "tokenizers.Tokenizer | None":
    """The `tokenizer.json` of `model_name` (a model directory, or a repo id in the Hugging Face cache);
    None when it is not on this machine or cannot be read. Never downloads: an embeddings server's client
    must not need the Hub, and a served name that is not a repo id just finds nothing."""
    import tokenizers

    path = _tokenizer_file(model_name)
    if path is None:
        return None
    try:
        tokenizer = tokenizers.Tokenizer.from_file(str(path))
    except Exception as error:  # a format this `tokenizers` cannot read: cut by characters instead
        log.warning("cannot read the tokenizer of %s (%s); cutting by characters", model_name, error)
        return None
    tokenizer.no_truncation()  # the cut below reads the full encoding's offsets
    tokenizer.no_padding()
    return tokenizer


def _tokenizer_file(model_name: str) -> Path | None:
    try:
        in_directory = Path(model_name).expanduser() / "tokenizer.json"
        if in_directory.is_file():
            return in_directory
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(model_name, "tokenizer.json")
    except Exception:  # a name that is no path and no repo id (a URL-like name, spaces): nothing there
        return None
    return Path(found) if isinstance(found, str) else None


class InputWindow:
    """A served model's input window in tokens, and texts cut to it on the client.

    The window comes from `embedding_api_max_input_tokens`, or from a server's refusal that states it
    (`learn`). With the model's tokenizer found locally (`local_tokenizer`, looked for once, when a window
    is first known) a text is cut exactly after the last token that fits; without it, at
    `CHARS_PER_TOKEN` characters per token. Thread-safe: requests are sent from several threads.
    """

    def __init__(self, model_name: str, max_tokens: int | None) -> None:
        self._model_name = model_name
        self._max_tokens = max_tokens
        self._tokenizer: tokenizers.Tokenizer | None = None
        self._special_tokens = SPECIAL_TOKENS_GUESS
        self._looked_up = False
        self._lock = threading.Lock()
        if max_tokens is not None:
            self._look_up_tokenizer()

    @property
    def max_tokens(self) -> int | None:
        with self._lock:
            return self._max_tokens

    @property
    def exact(self) -> bool:
        """Whether texts are cut by the model's own tokenizer rather than by characters."""
        with self._lock:
            return self._tokenizer is not None

    def learn(self, max_tokens: int) -> bool:
        """Take the window a server's refusal stated, when smaller than the one known; whether it did."""
        with self._lock:
            if self._max_tokens is not None and self._max_tokens <= max_tokens:
                return False
            self._max_tokens = max_tokens
        self._look_up_tokenizer()
        return True

    def cut(self, text: str, max_chars: int | None = None) -> str:
        """`text` cut to the window (when one is known) and to `max_chars` characters (when given)."""
        with self._lock:
            max_tokens, tokenizer, special = self._max_tokens, self._tokenizer, self._special_tokens
        if max_chars is not None:
            text = text[:max_chars]
        if max_tokens is None:
            return text
        if tokenizer is None:
            return text[: max(1, (max_tokens - SPECIAL_TOKENS_GUESS) * CHARS_PER_TOKEN)]
        if not may_exceed(text, max_tokens, special):
            return text
        encoding = tokenizer.encode(text)
        if len(encoding.ids) <= max_tokens:
            return text
        ends = [
            end
            for (_, end), special_token in zip(encoding.offsets, encoding.special_tokens_mask, strict=True)
            if not special_token
        ]
        keep = min(max(1, max_tokens - special), len(ends))
        return text[: ends[keep - 1]] if ends else text

    def _look_up_tokenizer(self) -> None:
        with self._lock:
            if self._looked_up:
                return
            self._looked_up = True
        tokenizer = local_tokenizer(self._model_name)
        special = len(tokenizer.encode("").ids) if tokenizer is not None else SPECIAL_TOKENS_GUESS
        with self._lock:
            self._tokenizer, self._special_tokens = tokenizer, special
