"""The canonical store's schema, and the migrations that bring an older store up to it.

Bump `SCHEMA_VERSION` and add the step from the previous version to `MIGRATIONS` when it changes: a store
is migrated in place when it is opened (`store.py`), inside one transaction, so a crash midway
leaves it on its old version.

Version 2: `pages.vector_seq`, the order in which pages got their vectors, so every process
sharing a space can catch its index up with what the others embedded; `op_log.op_id` and `op_log.write_id`,
so an op or a write delivered twice is applied once.

Version 3 (the memory lifecycle): every item has created/updated times and provenance — a page
the op that stored it (`pages.op_id`), a fact the pages it was extracted from (`knowledge_sources`) and its
origin, a profile version the pages merged into it; pages and facts may expire (`expires_at`); derived
texts (chain and segment summaries, the profile) are marked for rebuilding when a page under them is
deleted or edited (`chains.stale`, `segments.stale`, meta `profile_stale`); and `withdrawn_vectors` lists,
in order, the pages whose vector left the index (deleted or edited), so every process sharing the space
drops them from its in-memory index too.

Version 4: `pages.analysis_attempts`, the analyses of a page whose proposals the guards refused, so a
refused slice is analysed again a bounded number of times rather than lost or retried forever.
"""

SCHEMA_VERSION = 4

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS chains (
    chain_id INTEGER PRIMARY KEY,
    summary  TEXT NOT NULL,
    stale    INTEGER NOT NULL DEFAULT 0
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
    archived          INTEGER NOT NULL DEFAULT 0,
    updated_at        REAL,
    stale             INTEGER NOT NULL DEFAULT 0
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
    analysis_attempts INTEGER NOT NULL DEFAULT 0,
    vector         BLOB,
    vector_seq     INTEGER,
    created_at     REAL,
    updated_at     REAL,
    expires_at     REAL,
    op_id          TEXT
);
CREATE INDEX IF NOT EXISTS pages_expiring ON pages(expires_at) WHERE expires_at IS NOT NULL;
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
    updated_at  REAL NOT NULL,
    created_at  REAL,
    expires_at  REAL,
    origin      TEXT NOT NULL DEFAULT 'consolidation'
);
CREATE INDEX IF NOT EXISTS knowledge_active ON knowledge(kind, active);
CREATE INDEX IF NOT EXISTS knowledge_expiring ON knowledge(expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS knowledge_by_replaced_by ON knowledge(replaced_by) WHERE replaced_by IS NOT NULL;
CREATE TABLE IF NOT EXISTS knowledge_sources (
    entry_id INTEGER NOT NULL REFERENCES knowledge(entry_id) ON DELETE CASCADE,
    page_id  INTEGER NOT NULL,
    PRIMARY KEY (entry_id, page_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS knowledge_sources_by_page ON knowledge_sources(page_id);
CREATE TABLE IF NOT EXISTS profile_versions (
    version           INTEGER PRIMARY KEY AUTOINCREMENT,
    text              TEXT NOT NULL,
    created_at        REAL NOT NULL,
    source_segment_id INTEGER,
    source_page_ids   TEXT
);
CREATE TABLE IF NOT EXISTS withdrawn_vectors (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    page_id INTEGER NOT NULL
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
    # 2 -> 3. Times unknown before version 3 stay NULL (shown as unknown), except a fact's creation, which
    # was its first `updated_at`; earlier facts have no recorded sources, so deleting a page never deletes
    # them (only facts extracted from known pages can lose their last source).
    2: """
ALTER TABLE chains ADD COLUMN stale INTEGER NOT NULL DEFAULT 0;
ALTER TABLE segments ADD COLUMN updated_at REAL;
ALTER TABLE segments ADD COLUMN stale INTEGER NOT NULL DEFAULT 0;
ALTER TABLE pages ADD COLUMN created_at REAL;
ALTER TABLE pages ADD COLUMN updated_at REAL;
ALTER TABLE pages ADD COLUMN expires_at REAL;
ALTER TABLE pages ADD COLUMN op_id TEXT;
CREATE INDEX pages_expiring ON pages(expires_at) WHERE expires_at IS NOT NULL;
ALTER TABLE knowledge ADD COLUMN created_at REAL;
ALTER TABLE knowledge ADD COLUMN expires_at REAL;
ALTER TABLE knowledge ADD COLUMN origin TEXT NOT NULL DEFAULT 'consolidation';
UPDATE knowledge SET created_at = updated_at;
CREATE INDEX knowledge_expiring ON knowledge(expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX knowledge_by_replaced_by ON knowledge(replaced_by) WHERE replaced_by IS NOT NULL;
CREATE TABLE knowledge_sources (
    entry_id INTEGER NOT NULL REFERENCES knowledge(entry_id) ON DELETE CASCADE,
    page_id  INTEGER NOT NULL,
    PRIMARY KEY (entry_id, page_id)
) WITHOUT ROWID;
CREATE INDEX knowledge_sources_by_page ON knowledge_sources(page_id);
ALTER TABLE profile_versions ADD COLUMN source_page_ids TEXT;
CREATE TABLE withdrawn_vectors (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    page_id INTEGER NOT NULL
);
""",
    # 3 -> 4. No page was refused and kept unanalyzed before version 4.
    3: """
ALTER TABLE pages ADD COLUMN analysis_attempts INTEGER NOT NULL DEFAULT 0;
""",
}
"""`MIGRATIONS[v]` takes a store from version v to v + 1."""
