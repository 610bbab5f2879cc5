"""The canonical store's schema. Bump `SCHEMA_VERSION` with a migration when it changes."""

SCHEMA_VERSION = 1

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
    vector         BLOB
);
CREATE INDEX IF NOT EXISTS pages_by_tier ON pages(tier, page_id);
CREATE INDEX IF NOT EXISTS pages_by_segment ON pages(segment_id);
CREATE INDEX IF NOT EXISTS pages_by_chain ON pages(chain_id);
CREATE INDEX IF NOT EXISTS pages_pending ON pages(page_id) WHERE vector IS NULL;
CREATE INDEX IF NOT EXISTS pages_unanalyzed ON pages(segment_id) WHERE analyzed = 0 AND tier = 'mtm';
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
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    kind    TEXT NOT NULL,
    at      REAL NOT NULL,
    detail  TEXT NOT NULL
);
"""
