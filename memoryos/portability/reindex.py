"""`memoryos reindex`: re-embed a space from its stored text with another embedding model.

Vectors of different models cannot be compared, so a space records its model and refuses another one;
this is the way forward that keeps every memory (the reference made users start over). All new vectors
are written in one transaction: a crash midway leaves the space on its old model, intact.

Reindexing needs the space to itself (`SpaceHold.claim`): it is refused, naming their pids, while other
processes have the space open, and processes that try to open it meanwhile wait. The transaction bumps
the store's vector generation, part of the fingerprint every index snapshot records, so a snapshot of the
old vectors is never trusted again — even when a crash comes after the commit and before the old
snapshot files are removed.
"""

from pathlib import Path

import numpy as np
from tqdm import tqdm

from memoryos.config import MemoryConfig
from memoryos.embedding import Embedder, create_embedder
from memoryos.errors import SpaceNotFoundError
from memoryos.space import policy
from memoryos.space.layout import STORE_FILE
from memoryos.storage.records.sqlite.store import SqliteStore
from memoryos.storage.space_lock import SpaceHold
from memoryos.storage.vectors.index_factory import remove_page_index_files
from memoryos.types import exchange_text

REINDEX_BATCH = 256


def reindex_space(
    config: MemoryConfig,
    user_id: str,
    assistant_id: str,
    show_progress: bool = False,
    *,
    embedder: Embedder | None = None,
) -> dict[str, object]:
    """Re-embed pages, segments and facts of one space with `config.embedding_model_name`, or with
    `embedder` when given: a service worker passes the model it already holds (and opens every space
    with), rather than loading a second copy of it."""
    directory = config.space_dir(user_id, assistant_id)  # the ids, checked
    if not (directory / STORE_FILE).is_file():
        raise SpaceNotFoundError(directory)  # before the model loads
    embedder = embedder if embedder is not None else create_embedder(config)
    # `require`: a space forgotten while this process waited raises SpaceNotFoundError, never is recreated
    hold = SpaceHold(directory, config.space_lock_timeout_s, require=STORE_FILE)
    try:
        hold.claim("reindex")
        return _reindex_held(directory, config, embedder, show_progress)
    finally:
        hold.release()


def _reindex_held(
    directory: Path, config: MemoryConfig, embedder: Embedder, show_progress: bool
) -> dict[str, object]:
    store = SqliteStore(directory / STORE_FILE, config.store_busy_timeout_s)
    try:
        pages = store.all_page_texts()
        vectors: dict[int, np.ndarray] = {}
        batches = range(0, len(pages), REINDEX_BATCH)
        for start in tqdm(batches, desc="re-embedding pages", unit="batch", disable=not show_progress):
            chunk = pages[start : start + REINDEX_BATCH]
            encoded = embedder.encode([exchange_text(user, agent) for _, user, agent in chunk])
            vectors.update(zip([pid for pid, _, _ in chunk], encoded, strict=True))
        facts = store.all_knowledge_texts()
        fact_vectors = embedder.encode([text for _, text in facts]) if facts else np.zeros((0, embedder.dim))
        with store.transaction():
            store.assign_vectors(list(vectors.items()))
            for segment_id in store.all_segment_ids():
                members = store.segment_page_ids(segment_id)
                if members:
                    store.update_segment(
                        segment_id, vector=policy.unit_mean(np.stack([vectors[p] for p in members]))
                    )
            for (entry_id, _), vector in zip(facts, fact_vectors, strict=True):
                store.set_knowledge_vector(entry_id, vector)
            store.set_meta("embedding_model", embedder.name)
            store.set_meta("embedding_dim", str(embedder.dim))
            store.set_meta("vector_generation", str(int(store.get_meta("vector_generation") or 0) + 1))
        remove_page_index_files(directory)
    finally:
        store.close()
    return {
        "space": str(directory),
        "model": embedder.name,
        "dim": embedder.dim,
        "pages": len(pages),
        "facts": len(facts),
    }
