"""Bundle calls a worker runs for the API (`memoryos serve --redis-url`), as the owner of the space:
export writes the space's bundle into Redis for the API to stream out; import takes an uploaded bundle
from Redis into the (empty) space. Both go through the engine's own `export_space` / `import_space`, on
the worker that owns the space, so no other process opens it (`services/queue/bundle_transfer.py`).
A bundle job (`services/jobs/bundles.py`) asks the same calls: its export kept for `ttl_s`, its upload
read with `keep` (the job deletes it once it will not be retried)."""

import tempfile
from pathlib import Path
from typing import Any

import redis

from memoryos.errors import SpaceNotFoundError
from memoryos.portability.bundles import export_space, import_space
from memoryos.space.pool import SpaceKey
from services.queue.bundle_transfer import TRANSFER_TTL_S, discard, download, upload
from services.queue.keys import Keys
from services.spaces.calls import EXPORT_BUNDLE, IMPORT_BUNDLE, BundleSent, OwnerCall
from services.worker.spaces import WorkerSpaces


def run_bundle_call(
    call: OwnerCall[Any],
    client: redis.Redis,
    keys: Keys,
    spaces: WorkerSpaces,
    key: SpaceKey,
    args: dict[str, Any],
) -> Any:
    """The bundle call's result as JSON data."""
    config = spaces.config_of(key)
    with tempfile.TemporaryDirectory(prefix="memoryos-bundle-") as staging:
        path = Path(staging) / "space.bundle"
        if call is EXPORT_BUNDLE:
            with spaces.reading(key):  # in use while it is read: a forget waits instead of erasing under it
                export_space(config, key.user_id, key.assistant_id, path)
            ttl_s = int(args.get("ttl_s", TRANSFER_TTL_S))
            transfer_id = upload(client, keys, key, path, int(args["max_bytes"]), ttl_s)
            if not spaces.exists(key):  # forgotten since it was read: its purge may have run already
                discard(client, keys, transfer_id)
                raise SpaceNotFoundError(config.space_dir(key.user_id, key.assistant_id))
            sent = BundleSent(transfer_id=transfer_id, size_bytes=path.stat().st_size)
            return sent.model_dump(mode="json")
        if call is IMPORT_BUNDLE:
            download(client, keys, str(args["transfer_id"]), path, keep=bool(args.get("keep", False)))
            report = import_space(config, key.user_id, key.assistant_id, path, embedder=spaces.embedder())
            return report.model_dump(mode="json")
    raise ValueError(f"kind: {call.method} is not a bundle call")
