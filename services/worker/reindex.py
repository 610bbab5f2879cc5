"""The reindex call, run by the worker that owns the space (an rq job asks for it: `services/jobs/tasks.py`).

The engine's reindex (`memoryos.portability.reindex.reindex_space`) needs the space to itself: it takes the space's
files exclusively, and this worker's pool holds the space open (shared). So the worker closes the space in
its pool and keeps it closed while the engine re-embeds (`WorkerSpaces.closed`): a write of the space that
arrives meanwhile waits, then reopens the space on its new vectors. The engine re-embeds with the model
this worker already holds, the one it opens every space with: a worker serves one model, and a space moved
to any other could no longer be opened by it. A request naming another model is refused, saying so.
"""

from typing import Any

from memoryos.errors import InvalidInputError
from memoryos.portability.reindex import reindex_space
from memoryos.space.pool import SpaceKey
from services.spaces.calls import ReindexReport
from services.worker.spaces import WorkerSpaces


def run_reindex_call(spaces: WorkerSpaces, key: SpaceKey, args: dict[str, Any]) -> Any:
    """Re-embed the space with this worker's model (which `args["model"]` must name); the
    `ReindexReport` as JSON data."""
    model = str(args["model"])
    embedder = spaces.embedder()
    if model != embedder.name:
        raise InvalidInputError(
            "model",
            f"the workers embed with {embedder.name!r}, not {model!r}: deploy them with "
            f"MEMORYOS_EMBEDDING_MODEL_NAME={model} first, then reindex each space",
        )
    with spaces.closed(key):
        done = reindex_space(spaces.config_of(key), key.user_id, key.assistant_id, embedder=embedder)
    report = ReindexReport.model_validate({name: done[name] for name in ("model", "dim", "pages", "facts")})
    return report.model_dump(mode="json")
