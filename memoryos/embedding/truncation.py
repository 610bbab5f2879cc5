"""Whether an embedding call truncated any text, told cheaply: a character bound rules most texts out
without the tokenizer (`may_exceed`), and a hook reads the width of the batches sentence-transformers
tokenized anyway (`WidthProbe`); only the rest are tokenized again (`count_truncated`)."""

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer


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
