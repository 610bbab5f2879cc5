"""The PostgreSQL store's schema: every space's records in one database, each row keyed by its space.

The tables mirror the SQLite store's (`memoryos/storage/records/sqlite/schema.py`), with the space's id
leading every key. Ids inside a space (pages, segments, facts, profile versions, sequences) are numbered
per space from counters in its `spaces` row, as SQLite's AUTOINCREMENT numbers them per file: the engine,
the lifecycle API and bundles see the same ids on either store, and an id is never reused.

`memoryos_schema` holds the version; `migrate` creates the schema in an empty database or brings an
older one up to `SCHEMA_VERSION`, inside one transaction under an advisory lock, so two workers starting
together migrate once and a crash midway leaves the old version.

Lexical search (`lexical.py`) keeps each page's stemmed terms in `page_terms`, with the token counts of
its two sides in `pages` and their sum beside each of its terms, and computes FTS5's BM25 from them in SQL; the space's page and token totals
(`spaces.page_count`, `token_count`) give BM25's corpus size and mean length without reading every page.

Fencing (`fences.py`): `shard_fences` holds, per shard, the fencing number of its current owner, drawn
from `fence_numbers`, a sequence that only grows; every write transaction of a fenced space locks its
shard's row `FOR SHARE` and checks the number there. Tombstones of forgotten spaces are rows of
`tombstones`, seen by every worker.
"""

SCHEMA_VERSION = 3

MIGRATIONS: dict[int, str] = {
    # 0 -> 1: the schema.
    0: """
CREATE TABLE memoryos_schema (
    version integer NOT NULL
);
CREATE SEQUENCE fence_numbers;
CREATE TABLE shard_fences (
    shard  integer PRIMARY KEY,
    number bigint NOT NULL
);
CREATE TABLE tombstones (
    digest       text PRIMARY KEY,
    forgotten_at double precision NOT NULL
);
CREATE TABLE spaces (
    space_id          bigserial PRIMARY KEY,
    tenant            text NOT NULL,
    user_id           text NOT NULL,
    assistant_id      text NOT NULL,
    incarnation       text NOT NULL,
    change_seq        bigint NOT NULL DEFAULT 0,
    next_page_id      bigint NOT NULL DEFAULT 1,
    next_segment_id   bigint NOT NULL DEFAULT 1,
    next_entry_id     bigint NOT NULL DEFAULT 1,
    next_profile_version bigint NOT NULL DEFAULT 1,
    next_withdrawn_seq bigint NOT NULL DEFAULT 1,
    next_op_seq       bigint NOT NULL DEFAULT 1,
    max_vector_seq    bigint NOT NULL DEFAULT 0,
    page_count        bigint NOT NULL DEFAULT 0,
    token_count       bigint NOT NULL DEFAULT 0,
    created_at        double precision NOT NULL,
    UNIQUE (tenant, user_id, assistant_id)
);
CREATE TABLE meta (
    space_id bigint NOT NULL REFERENCES spaces ON DELETE CASCADE,
    key      text NOT NULL,
    value    text NOT NULL,
    PRIMARY KEY (space_id, key)
);
CREATE TABLE chains (
    space_id bigint NOT NULL REFERENCES spaces ON DELETE CASCADE,
    chain_id bigint NOT NULL,
    summary  text NOT NULL,
    stale    boolean NOT NULL DEFAULT false,
    PRIMARY KEY (space_id, chain_id)
);
CREATE TABLE segments (
    space_id          bigint NOT NULL REFERENCES spaces ON DELETE CASCADE,
    segment_id        bigint NOT NULL,
    summary           text NOT NULL,
    keywords          text NOT NULL,
    vector            bytea NOT NULL,
    topic_count       integer NOT NULL DEFAULT 1,
    visit_count       integer NOT NULL DEFAULT 0,
    interaction_count integer NOT NULL DEFAULT 0,
    last_visit_at     double precision NOT NULL,
    created_at        double precision NOT NULL,
    archived          boolean NOT NULL DEFAULT false,
    updated_at        double precision,
    stale             boolean NOT NULL DEFAULT false,
    PRIMARY KEY (space_id, segment_id)
);
CREATE TABLE pages (
    space_id          bigint NOT NULL REFERENCES spaces ON DELETE CASCADE,
    page_id           bigint NOT NULL,
    user_input        text NOT NULL,
    agent_response    text NOT NULL,
    timestamp         text NOT NULL,
    meta_data         text,
    tier              text NOT NULL DEFAULT 'stm',
    segment_id        bigint,
    chain_id          bigint,
    analyzed          boolean NOT NULL DEFAULT false,
    analysis_attempts integer NOT NULL DEFAULT 0,
    vector            bytea,
    vector_seq        bigint,
    created_at        double precision,
    updated_at        double precision,
    expires_at        double precision,
    op_id             text,
    user_len          integer NOT NULL DEFAULT 0,
    agent_len         integer NOT NULL DEFAULT 0,
    PRIMARY KEY (space_id, page_id)
);
CREATE INDEX pages_by_tier ON pages (space_id, tier, page_id);
CREATE INDEX pages_by_segment ON pages (space_id, segment_id);
CREATE INDEX pages_by_chain ON pages (space_id, chain_id);
CREATE INDEX pages_pending ON pages (space_id, page_id) WHERE vector IS NULL;
CREATE INDEX pages_expiring ON pages (space_id, expires_at) WHERE expires_at IS NOT NULL;
CREATE UNIQUE INDEX pages_by_vector_seq ON pages (space_id, vector_seq) WHERE vector_seq IS NOT NULL;
CREATE INDEX pages_unanalyzed ON pages (space_id, segment_id) WHERE NOT analyzed AND tier = 'mtm';
CREATE TABLE page_terms (
    space_id bigint NOT NULL REFERENCES spaces ON DELETE CASCADE,  -- a trigger since migration 2
    term     text NOT NULL,
    page_id  bigint NOT NULL,
    user_tf  integer NOT NULL,
    agent_tf integer NOT NULL,
    PRIMARY KEY (space_id, term, page_id)
);
CREATE INDEX page_terms_by_page ON page_terms (space_id, page_id);
CREATE TABLE knowledge (
    space_id    bigint NOT NULL REFERENCES spaces ON DELETE CASCADE,
    entry_id    bigint NOT NULL,
    kind        text NOT NULL,
    text        text NOT NULL,
    timestamp   text NOT NULL,
    vector      bytea NOT NULL,
    active      boolean NOT NULL DEFAULT true,
    replaced_by bigint,
    updated_at  double precision NOT NULL,
    created_at  double precision,
    expires_at  double precision,
    origin      text NOT NULL DEFAULT 'consolidation',
    PRIMARY KEY (space_id, entry_id)
);
CREATE INDEX knowledge_active ON knowledge (space_id, kind, active);
CREATE INDEX knowledge_by_replaced_by ON knowledge (space_id, replaced_by) WHERE replaced_by IS NOT NULL;
CREATE INDEX knowledge_expiring ON knowledge (space_id, expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE knowledge_sources (
    space_id bigint NOT NULL REFERENCES spaces ON DELETE CASCADE,
    entry_id bigint NOT NULL,
    page_id  bigint NOT NULL,
    PRIMARY KEY (space_id, entry_id, page_id)
);
CREATE INDEX knowledge_sources_by_page ON knowledge_sources (space_id, page_id);
CREATE TABLE profile_versions (
    space_id          bigint NOT NULL REFERENCES spaces ON DELETE CASCADE,
    version           bigint NOT NULL,
    text              text NOT NULL,
    created_at        double precision NOT NULL,
    source_segment_id bigint,
    source_page_ids   text,
    PRIMARY KEY (space_id, version)
);
CREATE TABLE withdrawn_vectors (
    space_id bigint NOT NULL REFERENCES spaces ON DELETE CASCADE,
    seq      bigint NOT NULL,
    page_id  bigint NOT NULL,
    PRIMARY KEY (space_id, seq)
);
CREATE TABLE op_log (
    space_id bigint NOT NULL REFERENCES spaces ON DELETE CASCADE,
    seq      bigint NOT NULL,
    kind     text NOT NULL,
    at       double precision NOT NULL,
    detail   text NOT NULL,
    op_id    text,
    write_id text,
    PRIMARY KEY (space_id, seq)
);
CREATE UNIQUE INDEX op_log_by_op_id ON op_log (space_id, op_id) WHERE op_id IS NOT NULL;
CREATE UNIQUE INDEX op_log_by_write_id ON op_log (space_id, write_id) WHERE write_id IS NOT NULL;
""",
    # 1 -> 2: lexical search reads a page's length from its terms, and vectors stay in their rows.
    # - `page_terms.length` (the page's tokens over both sides, `pages.user_len + agent_len`) and a primary
    #   key that includes the counts: BM25 and the document counts read one index range per query token,
    #   instead of probing `pages` for the length of every page a token is in (half the search's time).
    # - `STORAGE MAIN` on the vector columns: a 1024-d float16 vector (2 KiB) went out of line to TOAST,
    #   one more index lookup per vector read, which is most of a cold space's first retrieve. New and
    #   rewritten rows keep them inline; rows stored before keep theirs in TOAST until rewritten.
    1: """
ALTER TABLE page_terms ADD COLUMN length integer NOT NULL DEFAULT 0;
UPDATE page_terms t SET length = p.user_len + p.agent_len
FROM pages p WHERE p.space_id = t.space_id AND p.page_id = t.page_id;
ALTER TABLE page_terms ALTER COLUMN length DROP DEFAULT;
ALTER TABLE page_terms DROP CONSTRAINT page_terms_pkey,
    ADD PRIMARY KEY (space_id, term, page_id) INCLUDE (user_tf, agent_tf, length);
ALTER TABLE pages ALTER COLUMN vector SET STORAGE MAIN;
ALTER TABLE segments ALTER COLUMN vector SET STORAGE MAIN;
ALTER TABLE knowledge ALTER COLUMN vector SET STORAGE MAIN;
""",
    # 2 -> 3: `page_terms` without its foreign key to `spaces`. A page writes ~40 term rows, and the key's
    #   check (a trigger and a lookup of the space's row for each) was a third of their insert on the
    #   server. A trigger on `spaces` deletes a space's terms with its row instead: it runs once per
    #   deleted space, never on an insert, and whoever deletes the row (a forget, the move back to files,
    #   a worker of the version before during a rolling upgrade) takes the terms with it, as the cascade
    #   did.
    2: """
ALTER TABLE page_terms DROP CONSTRAINT page_terms_space_id_fkey;
CREATE FUNCTION memoryos_delete_page_terms() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM page_terms WHERE space_id = OLD.space_id;
    RETURN NULL;
END
$$;
CREATE TRIGGER spaces_delete_page_terms AFTER DELETE ON spaces
    FOR EACH ROW EXECUTE FUNCTION memoryos_delete_page_terms();
""",
}
"""`MIGRATIONS[v]` takes a database from version v to v + 1 (0: an empty database)."""
