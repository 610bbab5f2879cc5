"""One exception hierarchy for the engine, so front ends map errors to HTTP codes in one place."""

import shlex
from pathlib import Path


class MemoryOSError(Exception):
    """Base of every error the engine raises on purpose."""


class InvalidInputError(MemoryOSError, ValueError):
    """Caller input was rejected before anything was stored; the message names the field."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


EMBEDDINGS_API_PREFIX = "openai-api:"
"""Starts the name a space records for a model served by an embeddings server (`openai-api:<model>`,
memoryos/embedding/openai_api.py), so its vectors never pass for a local model's of the same name."""


class EmbeddingModelMismatchError(MemoryOSError):
    """The space was embedded with another model; its vectors cannot be compared with the new ones."""

    def __init__(self, stored: str, stored_dim: int, requested: str, requested_dim: int) -> None:
        self.stored, self.stored_dim = stored, stored_dim
        self.requested, self.requested_dim = requested, requested_dim
        model = requested.removeprefix(EMBEDDINGS_API_PREFIX)
        served = " (with embedding_api_base_url set)" if model != requested else ""
        super().__init__(
            f"this memory space was embedded with {stored!r} (dim {stored_dim}) but the configured model is "
            f"{requested!r} (dim {requested_dim}); run `memoryos reindex --model {model}`{served} to re-embed "
            "it from the stored text, or configure the original model"
        )


class EmbeddingServerError(MemoryOSError):
    """The embeddings server (`embedding_api_base_url`) kept failing through its retries, did not answer
    within its timeout, or answered vectors that cannot be used (wrong count or dimension). Nothing was
    embedded: pages stay pending and are embedded again later."""


class EmbeddingServerModelError(EmbeddingServerError):
    """The embeddings server answered vectors of another model than `embedding_model_name` (the reply's
    `model`): a server swapped to another model of the same dimension would mix its vectors silently.
    Asking again gets the same model, so a space that meets it stops embedding (its pages stay pending)
    until the server serves the right model and the space is opened again."""


class StorageError(MemoryOSError):
    """The canonical store is unreadable or was written by an incompatible version."""


class StoreBusyError(MemoryOSError):
    """Another connection (another process) holds the store's write lock, and the caller asked not to
    wait for it (`MemorySpace.apply_ops(..., wait_for_writers=False)`). Nothing was changed."""


class DatabaseUnavailableError(StorageError):
    """The database could not be reached, restarted under a call, or ended a transaction left idle.
    Nothing of the call's transaction was stored; the same call succeeds once the database is back, so
    a queue retries it without counting it against the write."""


class FencedOutError(StorageError):
    """A write of a space in a fenced shard was refused: the fencing number recorded for the shard is
    not the one this process holds, so another worker owns the shard now (this one's lease lapsed: a
    pause, a partition, a frozen VM). Nothing of the transaction was stored; the worker stops serving
    the shard and closes its spaces."""

    def __init__(self, shard: int, held: int | None, recorded: int | None) -> None:
        self.shard = shard
        self.held = held
        self.recorded = recorded
        super().__init__(
            f"shard {shard} is fenced: this process holds fencing number {held}, the shard's is {recorded}"
        )


class LLMError(MemoryOSError):
    """An LLM call failed after its retries; callers keep the previous memory state."""


class EmbeddingEngineError(MemoryOSError):
    """The host's embedding engine (`memoryos embedding-engine`) did not embed: it refused the request
    (a frame over its bound) or its model raised. Nothing stored changed; pages stay pending and the
    batcher retries them. The message never quotes a text."""


class EmbeddingEngineUnavailableError(EmbeddingEngineError):
    """No embedding engine answered at the socket within the client's bound (it is down or restarting)."""


class EmbeddingFrameTooLargeError(EmbeddingEngineError):
    """A message to or from the embedding engine exceeds the frame bound (`memoryos/embedding/engine/wire.py`):
    refused before it is read or sent whole."""


class SchedulerClosedError(MemoryOSError):
    """Work asked of the process's scheduler while it closes (or while the process exits)."""


class SpaceNotFoundError(MemoryOSError, LookupError):
    """An open of an existing space only (`Memoryos(..., create=False)`, the CLI's reads) found no memory
    space there. Nothing was created: no directory, no file."""

    def __init__(self, directory: Path) -> None:
        """`directory` is the space's, `<data_dir>/<tenant>/<user_id>/<assistant_id>`: the message names
        the user, the assistant and the data directory, and says when the data directory itself is missing."""
        self.directory = directory
        self.assistant_id = directory.name
        self.user_id = directory.parent.name
        self.tenant = directory.parent.parent.name
        self.data_dir = directory.parent.parent.parent
        where = f"{self.data_dir}" + ("" if self.tenant == "default" else f" (tenant {self.tenant!r})")
        missing = "" if self.data_dir.is_dir() else f": the data directory {self.data_dir} does not exist"
        super().__init__(
            f"no memory for user {self.user_id!r} (assistant {self.assistant_id!r}) in {where}{missing}"
        )


def extra_install_command(extra: str) -> str:
    """The command that installs an optional extra from the MemoryOS checkout, never from PyPI: PyPI's
    `memoryos` is an unrelated project. It names the checkout's path when this package runs from one (an
    editable install), else says where to run it."""
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").is_file():
        return f"python3 -m pip install -e {shlex.quote(f'{checkout}[{extra}]')}"
    return f"python3 -m pip install -e '.[{extra}]' (run in the MemoryOS checkout)"


class MissingExtraError(MemoryOSError):
    """A command needs packages of an optional extra that are not installed (the `service` extra)."""

    def __init__(self, extra: str, module: str) -> None:
        self.extra, self.module = extra, module
        super().__init__(
            f"this needs the {extra} extra: {extra_install_command(extra)} (missing module {module!r})"
        )


class ItemNotFoundError(MemoryOSError, LookupError):
    """A lifecycle operation named a page or fact this space does not hold (never stored, deleted, or
    expired). Nothing was changed."""

    def __init__(self, kind: str, item_id: int) -> None:
        self.kind = kind
        self.item_id = item_id
        super().__init__(f"no {kind} with id {item_id} in this memory space")


class WriteIdConflictError(InvalidInputError):
    """A write id already names a write of other content in this space. A write id is an idempotency key:
    the same id again means "the same write, retried", so another write under it is refused (409) instead
    of answered with the first write's ids while its own text is dropped. Nothing was stored."""

    def __init__(self, write_id: str) -> None:
        self.write_id = write_id
        super().__init__(
            "write_id",
            f"write id {write_id!r} was already used for a write with other content; "
            "a retry must send the same turns and ttl_s, a new write a new write id",
        )
