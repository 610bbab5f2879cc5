"""The canonical store's schema, and the migrations that bring an older store up to it.

Bump `SCHEMA_VERSION` and add the step from the previous version to `MIGRATIONS` when it changes: a store
is migrated in place when it is opened (`sqlite_store.py`), inside one transaction, so a crash midway
leaves it on its old version.

Version 2 (issue 9): `pages.vector_seq`, the order in which pages got their vectors, so every process
sharing a space can catch its index up with what the others embedded; `op_log.op_id` and `op_log.write_id`,
so an op or a write delivered twice is applied once.
"""

SCHEMA_VERSION = 2

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS chains (
    chain_id INTEGER PRIMARY KEY,
    summary  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS segments (
    segment_id        INTEGER PRIMARY KEY AUTOINCREMENT,
    summary           TEXT NOT NULL,
    keywords          TEXT NOT NULL,
    vector            BLOB NOT NULL,
    topic_count       INTEGER NOT NULL DEFAULT 1,
    visit_count       INTEGER NOT NULL DEFAULT 0,
    interaction_count INTEGER NOT NULL DEFAULT 0,
    last_visit_at     REAL NOT NULL,
    created_at        REAL NOT NULL,
    archived          INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS pages (
    page_id        INTEGER PRIMARY KEY AUTOINCREMENT,
    user_input     TEXT NOT NULL,
    agent_response TEXT NOT NULL,
    timestamp      TEXT NOT NULL,
    meta_data      TEXT,
    tier           TEXT NOT NULL DEFAULT 'stm',
    segment_id     INTEGER REFERENCES segments(segment_id),
    chain_id       INTEGER REFERENCES chains(chain_id),
    analyzed       INTEGER NOT NULL DEFAULT 0,
    vector         BLOB,
    vector_seq     INTEGER
);
CREATE INDEX IF NOT EXISTS pages_by_tier ON pages(tier, page_id);
CREATE INDEX IF NOT EXISTS pages_by_segment ON pages(segment_id);
CREATE INDEX IF NOT EXISTS pages_by_chain ON pages(chain_id);
CREATE INDEX IF NOT EXISTS pages_pending ON pages(page_id) WHERE vector IS NULL;
CREATE INDEX IF NOT EXISTS pages_unanalyzed ON pages(segment_id) WHERE analyzed = 0 AND tier = 'mtm';
CREATE UNIQUE INDEX IF NOT EXISTS pages_by_vector_seq ON pages(vector_seq) WHERE vector_seq IS NOT NULL;
CREATE VIRTUAL TABLE IF NOT EXISTS pages_fts USING fts5(
    user_input, agent_response, content='pages', content_rowid='page_id', tokenize='porter unicode61'
);
CREATE TABLE IF NOT EXISTS knowledge (
    entry_id    INTEGER PRIMARY KEY AUTOINCREMENT,
    kind        TEXT NOT NULL,
    text        TEXT NOT NULL,
    timestamp   TEXT NOT NULL,
    vector      BLOB NOT NULL,
    active      INTEGER NOT NULL DEFAULT 1,
    replaced_by INTEGER REFERENCES knowledge(entry_id),
    updated_at  REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS knowledge_active ON knowledge(kind, active);
CREATE TABLE IF NOT EXISTS profile_versions (
    version           INTEGER PRIMARY KEY AUTOINCREMENT,
    text              TEXT NOT NULL,
    created_at        REAL NOT NULL,
    source_segment_id INTEGER
);
CREATE TABLE IF NOT EXISTS op_log (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    kind     TEXT NOT NULL,
    at       REAL NOT NULL,
    detail   TEXT NOT NULL,
    op_id    TEXT,
    write_id TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS op_log_by_op_id ON op_log(op_id) WHERE op_id IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS op_log_by_write_id ON op_log(write_id) WHERE write_id IS NOT NULL;
"""

MIGRATIONS: dict[int, str] = {
    # 1 -> 2. Pages embedded before the upgrade were embedded in page order, so their page id is their
    # vector sequence: index snapshots written by version 1 (which counted in page ids) stay consistent.
    1: """
ALTER TABLE pages ADD COLUMN vector_seq INTEGER;
UPDATE pages SET vector_seq = page_id WHERE vector IS NOT NULL;
CREATE UNIQUE INDEX pages_by_vector_seq ON pages(vector_seq) WHERE vector_seq IS NOT NULL;
ALTER TABLE op_log ADD COLUMN op_id TEXT;
ALTER TABLE op_log ADD COLUMN write_id TEXT;
CREATE UNIQUE INDEX op_log_by_op_id ON op_log(op_id) WHERE op_id IS NOT NULL;
CREATE UNIQUE INDEX op_log_by_write_id ON op_log(write_id) WHERE write_id IS NOT NULL;
""",
}
"""`MIGRATIONS[v]` takes a store from version v to v + 1."""
