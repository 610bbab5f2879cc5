"""Lexical search for the PostgreSQL store: SQLite FTS5's BM25, computed in SQL from stored term counts.

Retrieval must recall the same pages on either store, so this does not use PostgreSQL's own full-text
search (other tokenizer, other stemmer, `ts_rank` instead of BM25). It reproduces FTS5 instead:

* Tokens come from FTS5 itself. `page_terms` and `query_tokens` run the text through an FTS5 table with
  the SQLite store's tokenizer (`porter unicode61`) in a private in-memory SQLite database and read the
  tokens back through `fts5vocab`, so both stores see the same tokens by construction, not by a
  reimplementation of unicode61's folding or of the Porter stemmer.
* Each page's token count per side goes to `pages.user_len`/`agent_len`, and for each of its tokens
  the number of occurrences per side to a `page_terms` row, with the page's length (`schema.py`).
* The score is FTS5's `bm25()` (ext/fts5/fts5_aux.c), negated as the SQLite store negates it, for a
  query that ORs phrases 1..P over a table of N rows:

      score = sum over phrases i that occur in the row of
              IDF_i * f_i * (k1 + 1) / (f_i + k1 * (1 - b + b * D / avgdl))

      k1 = 1.2, b = 0.75
      IDF_i = ln((N - n_i + 0.5) / (n_i + 0.5)), replaced by 1e-6 when <= 0;
              n_i = rows holding phrase i (in any column)
      f_i   = sum over columns of weight[column] * occurrences of phrase i in that column
      D     = the row's tokens over both columns (unweighted)
      avgdl = tokens of all rows / N

  The table is the space's pages. Phrases are counted separately even when two of them are the same
  token ("run" and "running" both stem to "run"): FTS5 does, so a repeated stem weighs twice here too.

Where this is not exact: page_terms keeps no positions, so a quoted term that FTS5 splits into several
tokens (a phrase, which needs them adjacent and in order) is approximated (`query_tokens`); and tokens
are compared on their first `MAX_TERM_CHARS` characters, which PostgreSQL's b-tree needs. The terms
`query_terms` (memoryos.planning.lexical) gives are one token each in practice, and those are exact.
"""

import json
import sqlite3
import threading
from collections.abc import Sequence
from typing import Any, NamedTuple

import psycopg

from memoryos.storage.records.base import FrequencyAsk

MAX_TERM_CHARS = 500
"""Tokens are stored and looked up by at most this many characters: a `page_terms` key must fit in a
b-tree index entry (about 2,700 bytes; 500 characters of UTF-8 take at most 2,000), and a page of pasted
hex or base64 can hold a token of thousands. Two tokens that share their first 500 characters count as
one: far from any word a question would hold."""


class PageTerms(NamedTuple):
    """One page as FTS5 indexes it: each stemmed token's occurrences in (user_input, agent_response),
    and the token count of each side (FTS5's column sizes, which BM25's length normalisation reads)."""

    terms: dict[str, tuple[int, int]]
    user_len: int
    agent_len: int


_COLUMN_INDEX = {"user_input": 0, "agent_response": 1}

_local = threading.local()


def _tokenizer() -> sqlite3.Connection:
    """This thread's FTS5 tokenizer: an in-memory SQLite database with the SQLite store's FTS5 table
    definition and an `fts5vocab` view of it. A sqlite3 connection is not shared between threads, hence
    one per thread."""
    db: sqlite3.Connection | None = getattr(_local, "db", None)
    if db is None:
        db = sqlite3.connect(":memory:", isolation_level=None)
        db.execute(
            "CREATE VIRTUAL TABLE t USING fts5(user_input, agent_response, tokenize='porter unicode61')"
        )
        db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
        _local.db = db
    return db


def _instances(sides: Sequence[tuple[str, str]]) -> list[Any]:
    """[row, column, offset, token] of every token FTS5 makes of the rows, rows numbered from 0.

    The rows are indexed in one transaction that is rolled back after reading: the table is empty
    between calls, without FTS5 having to merge deletions out of its index.

    Four calls into SQLite whatever the rows: the rows go in as one JSON array and the tokens come out
    as one. Python's sqlite3 lets go of the interpreter lock at every step of a statement (every row
    inserted or fetched) and must take it back after, so while another thread of the worker runs Python
    (consolidation, the embedding batcher) each step waited up to the interpreter's switch interval:
    a run of turns, one row per token, cost 47 ms a page beside a busy thread against 3 ms this way
    (0.07 ms alone either way)."""
    db = _tokenizer()
    db.execute("BEGIN")
    try:
        db.execute(
            "INSERT INTO t(rowid, user_input, agent_response) "
            "SELECT key, json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?)",
            (json.dumps(sides, ensure_ascii=False),),  # a lone surrogate fails to bind, as a text would
        )
        (found,) = db.execute("SELECT json_group_array(json_array(doc, col, offset, term)) FROM v").fetchone()
    finally:
        db.execute("ROLLBACK")
    tokens: list[Any] = json.loads(found)
    return tokens


def page_terms(sides: Sequence[tuple[str, str]]) -> list[PageTerms]:
    """Each page's (user_input, agent_response) tokenized as the SQLite store's `pages_fts` tokenizes it:
    what `pages.user_len`/`agent_len` and the page's `page_terms` rows hold. One FTS5 insert batch for
    all the pages (a turn batch is stored at once)."""
    terms: list[dict[str, tuple[int, int]]] = [{} for _ in sides]
    lengths = [[0, 0] for _ in sides]
    for row, column, _offset, token in _instances(sides):
        side = _COLUMN_INDEX[column]
        lengths[row][side] += 1
        user_tf, agent_tf = terms[row].get(token[:MAX_TERM_CHARS], (0, 0))
        terms[row][token[:MAX_TERM_CHARS]] = (user_tf + 1, agent_tf) if side == 0 else (user_tf, agent_tf + 1)
    return [
        PageTerms(counts, user_len, agent_len)
        for counts, (user_len, agent_len) in zip(terms, lengths, strict=True)
    ]


class TermsBatch:
    """Pages' texts gathered (`add`) and tokenized together (`tokenize`), each page's `PageTerms` read back
    by the position `add` gave it (`terms`).

    Why: a write transaction of the service applies a run of turns, a page each, and tokenizing each page
    on its own cost four calls into SQLite per page; beside the worker's busy threads each call waits to
    take the interpreter lock back, about 1 ms a page, a third of the thread that applies writes. The
    transaction tokenizes its pages when it sends them: one batch for the run."""

    __slots__ = ("_sides", "_terms")

    def __init__(self) -> None:
        self._sides: list[tuple[str, str]] = []
        self._terms: list[PageTerms] = []

    def add(self, sides: Sequence[tuple[str, str]]) -> int:
        """Gather pages' (user_input, agent_response); the position of the first."""
        first = len(self._terms) + len(self._sides)
        self._sides += sides
        return first

    def tokenize(self) -> int:
        """Tokenize the pages gathered since the last call, in one batch; their tokens in all."""
        if not self._sides:
            return 0
        fresh = page_terms(self._sides)
        self._sides = []
        self._terms += fresh
        return sum(page.user_len + page.agent_len for page in fresh)

    def terms(self, first: int, count: int) -> list[PageTerms]:
        """The `PageTerms` of `count` pages from position `first`, once `tokenize` has run after their
        `add`."""
        if first + count > len(self._terms):
            raise RuntimeError("pages' terms read before their texts were tokenized")
        return self._terms[first : first + count]


TOKENS_KEPT = 8192
"""Query terms whose tokens this process keeps (`_query_tokens`): questions repeat their words (the
speakers' names, a topic), and a retrieve tokenizes its terms twice, for its counts and its search. When
full, the kept terms are dropped at once: a bound, not a ranking of terms."""
_kept_tokens: dict[str, tuple[str, ...]] = {}
_kept_lock = threading.Lock()


def _query_tokens(terms: Sequence[str]) -> list[list[str]]:
    """`query_tokens` of several terms: those not kept (`TOKENS_KEPT`) tokenized in one batch."""
    with _kept_lock:
        known = {term: _kept_tokens[term] for term in terms if term in _kept_tokens}
    missing = list(dict.fromkeys(term for term in terms if term not in known))
    if missing:
        found: list[list[tuple[int, str]]] = [[] for _ in missing]
        for row, _column, offset, token in _instances([(term, "") for term in missing]):
            found[row].append((offset, token[:MAX_TERM_CHARS]))
        fresh = {
            term: tuple(token for _offset, token in sorted(at))
            for term, at in zip(missing, found, strict=True)
        }
        with _kept_lock:
            if len(_kept_tokens) + len(fresh) > TOKENS_KEPT:
                _kept_tokens.clear()
            _kept_tokens.update(fresh)
        known.update(fresh)
    return [list(known[term]) for term in terms]


def query_tokens(term: str) -> list[str]:
    """The stemmed tokens, in order, that FTS5 makes of `term` quoted (`"term"` in a MATCH, as the SQLite
    store quotes it): FTS5 tokenizes a query string with the table's tokenizer, as it does a document.

    No token (punctuation only): FTS5's phrase matches nothing and adds nothing to any score, so callers
    skip the term. Several tokens ("e-mail", "mary jane"): FTS5 matches them as a phrase, adjacent and in
    order, which page_terms cannot check without positions. The approximation: in `lexical_search` the
    phrase's distinct tokens become phrases of their own, OR-ed (every page FTS5 would find, and some
    more, each scored by its tokens); in `document_frequencies` a page counts when it holds all of them
    (the fewest pages that surely include every one FTS5 counts)."""
    return _query_tokens([term])[0]


LEXICAL_SEARCH = """
WITH hits AS (
    SELECT t.page_id, t.length,
           %(w_user)s::float8 * t.user_tf + %(w_agent)s::float8 * t.agent_tf AS freq,
           count(*) OVER (PARTITION BY q.phrase)::float8 AS pages
    FROM unnest(%(tokens)s::text[]) WITH ORDINALITY AS q(term, phrase) CROSS JOIN LATERAL (
        SELECT o.page_id, o.user_tf, o.agent_tf, o.length
        FROM page_terms o WHERE o.space_id = %(space_id)s AND o.term = q.term OFFSET 0
    ) AS t
),
corpus AS (
    SELECT page_count::float8 AS n, token_count::float8 / NULLIF(page_count, 0)::float8 AS avgdl
    FROM spaces WHERE space_id = %(space_id)s
)
SELECT hits.page_id,
       sum(
           CASE WHEN idf.idf <= 0 THEN 1e-6::float8 ELSE idf.idf END
           * (hits.freq * 2.2::float8)
           / (hits.freq + 1.2::float8 * (0.25::float8 + 0.75::float8 * hits.length::float8 / corpus.avgdl))
       ) AS score
FROM hits
CROSS JOIN corpus
CROSS JOIN LATERAL (
    SELECT ln((corpus.n - hits.pages + 0.5::float8) / (hits.pages + 0.5::float8)) AS idf
) AS idf
WHERE hits.length IS NOT NULL
GROUP BY hits.page_id
ORDER BY score DESC, hits.page_id
LIMIT %(limit)s
"""
"""Each phrase's pages, with their counts and lengths, are one range of `page_terms`' primary key, which
includes them (a LATERAL fenced by OFFSET 0): a plan that does not depend on statistics. Joined as plain
tables, a plan made before the tables were analyzed (a database just filled), or the generic plan of the
prepared statement, read every term of the space to hash them. The length beside each term (schema v2)
spares a probe of `pages` per hit: half the statement's time at 400 pages. A phrase's page count (its
IDF's n_i) is a window over its hits, counted before pages of no length are left out, rather than a
second pass over the hits grouped by phrase and joined back to them."""


def lexical_search(
    conn: psycopg.Connection,
    space_id: int,
    terms: Sequence[str],
    limit: int,
    column_weights: tuple[float, float] | None,
) -> list[tuple[int, float]]:
    """(page_id, score) of the space's best `limit` pages for the OR of the quoted `terms` (raw query
    terms, as `query_terms` gives them), best first: the SQLite store's `lexical_search`, which matches
    `"term1" OR "term2" ...`, score for score (`-bm25(pages_fts, w_user, w_agent)`, see the module
    docstring). `column_weights` weigh the (user_input, agent_response) occurrences; None weighs both 1,
    as bm25() does without weights. One statement."""
    params = search_params(space_id, terms, limit, column_weights)
    if not params["tokens"]:
        return []
    return [(int(row[0]), float(row[1])) for row in conn.execute(LEXICAL_SEARCH, params).fetchall()]


def search_params(
    space_id: int, terms: Sequence[str], limit: int, column_weights: tuple[float, float] | None
) -> dict[str, Any]:
    """`LEXICAL_SEARCH`'s parameters for `lexical_search`'s arguments: each phrase a token, a multi-token
    term's distinct tokens (`query_tokens`), repeats across terms kept."""
    w_user, w_agent = column_weights or (1.0, 1.0)
    return {
        "tokens": [token for found in _query_tokens(terms) for token in dict.fromkeys(found)],
        "w_user": w_user,
        "w_agent": w_agent,
        "space_id": space_id,
        "limit": limit,
    }


_DOCUMENT_FREQUENCIES = """
SELECT (SELECT count(*) FROM (
    SELECT 1 FROM page_terms t
    WHERE t.space_id = %(space_id)s AND t.term = q.first
      AND t.user_tf * q.in_user + t.agent_tf * q.in_agent > 0
      AND NOT EXISTS (
          SELECT 1 FROM unnest(string_to_array(q.rest, ' ')) AS r(term)
          WHERE NOT EXISTS (
              SELECT 1 FROM page_terms o
              WHERE o.space_id = t.space_id AND o.term = r.term AND o.page_id = t.page_id
                AND o.user_tf * q.in_user + o.agent_tf * q.in_agent > 0
          )
      )
    LIMIT q.at_most
) AS matching)
FROM unnest(%(firsts)s::text[], %(rests)s::text[], %(in_user)s::int[], %(in_agent)s::int[],
            %(at_most)s::bigint[]) WITH ORDINALITY AS q(first, rest, in_user, in_agent, at_most, position)
ORDER BY q.position
"""
"""Each term's count in one statement, the terms of every ask together (each row its ask's column and
bound): a term's first token walks its index range, its further tokens (a multi-token term) are probed
per page. Tokens never hold a space (FTS5's separators), so a term's further tokens travel as one
space-joined text: PostgreSQL's arrays cannot be ragged."""


class FrequencyCount:
    """`document_frequencies` of some asks as one statement (`send`; none when no term has a token) and
    the counts its rows answer (`answer`): a caller may send it with other statements.

    For each ask, the pages of the space matching each of its quoted terms (FTS5's `"term"`, or
    `column : "term"` with a column): the SQLite store's counts, in order. With `at_most` counting stops
    there, so a word in most pages of a large space costs `at_most` index entries, not the space (a NULL
    LIMIT is no limit). A term with no token matches nothing. The terms of every ask are tokenized in one
    batch. A term asked twice in one column (a query's name is one of its words too) is counted once, to
    the larger bound: a count stopped at a bound is the lesser of the whole count and the bound, so each
    ask's follows from it."""

    def __init__(self, space_id: int, asks: Sequence[FrequencyAsk]) -> None:
        self._asks = asks
        terms = [term for ask in asks for term in ask.terms]
        self._keys = [
            (tuple(dict.fromkeys(found)), ask.column, ask.at_most)
            for ask, found in zip((ask for ask in asks for _ in ask.terms), _query_tokens(terms), strict=True)
        ]
        bounds: dict[tuple[tuple[str, ...], str | None], int | None] = {}
        for tokens, column, at_most in self._keys:
            if tokens:
                known = bounds.get((tokens, column), 0)
                bounds[(tokens, column)] = None if known is None or at_most is None else max(known, at_most)
        self._bounds = bounds
        self._params: dict[str, Any] | None = (
            {
                "space_id": space_id,
                "firsts": [tokens[0] for tokens, _ in bounds],
                "rests": [" ".join(tokens[1:]) for tokens, _ in bounds],
                "in_user": [int(column != "agent_response") for _, column in bounds],
                "in_agent": [int(column != "user_input") for _, column in bounds],
                "at_most": list(bounds.values()),
            }
            if bounds
            else None
        )

    def send(self, conn: psycopg.Connection) -> psycopg.Cursor[Any] | None:
        """The statement, sent on `conn` (in a pipeline, answered at its end); None when there is none."""
        return None if self._params is None else conn.execute(_DOCUMENT_FREQUENCIES, self._params)

    def answer(self, sent: psycopg.Cursor[Any] | None) -> list[list[int]]:
        """Each ask's counts, from what `send` gave."""
        rows = [] if sent is None else sent.fetchall()
        counted = {key: int(row[0]) for key, row in zip(self._bounds, rows, strict=True)}
        counts = iter(
            0 if not tokens else _bounded(counted[(tokens, column)], at_most)
            for tokens, column, at_most in self._keys
        )
        return [[next(counts) for _ in ask.terms] for ask in self._asks]


def document_frequencies(
    conn: psycopg.Connection, space_id: int, asks: Sequence[FrequencyAsk]
) -> list[list[int]]:
    """`FrequencyCount` of `asks` sent on its own: one statement for every ask."""
    count = FrequencyCount(space_id, asks)
    return count.answer(count.send(conn))


def _bounded(count: int, at_most: int | None) -> int:
    """A count stopped at `at_most` (None: not stopped) from one stopped at a bound at least as large."""
    return count if at_most is None else min(count, at_most)
