"""The PostgreSQL store's lexical search scores as the SQLite store's FTS5 does (`postgres/lexical.py`).

One corpus goes into both: PostgreSQL's `pages`/`page_terms` (from `page_terms`) in a fresh database, and
an FTS5 table with the SQLite store's tokenizer under the same rowids. Every query's pages must be the
same, each with `-bm25()`'s score within 1e-9 relative, under each column weighting; document
frequencies must be FTS5's counts, per column and bounded. A second space in the same database holds
pages of its own: a query reading past its space would change N, avgdl or n_i and so every score."""

import json
import math
import sqlite3
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import psycopg
import pytest

from memoryos.planning.lexical import query_terms
from memoryos.storage.records.base import FrequencyAsk
from memoryos.storage.records.postgres import lexical
from memoryos.storage.records.postgres.connection import migrate
from memoryos.storage.records.postgres.lexical import (
    MAX_TERM_CHARS,
    document_frequencies,
    lexical_search,
    page_terms,
    query_tokens,
)
from memoryos.storage.records.sqlite.page_queries import quoted

pytestmark = pytest.mark.integration

CONVERSATION = Path(__file__).resolve().parents[1] / "data" / "own_conversation.json"

HEX = "ab" * 1500  # one token of 3,000 characters: longer than a b-tree entry holds
HAND_MADE = [
    ("I run, she runs, they were running everywhere", "Running is a run of runs."),
    ("Café au lait at the cafe", "CAFÉ, café, cafe everywhere"),
    ("東京タワーに行きました", "北京 is 北京, everywhere"),
    ("Room 42 at 3.14 pm on 2024-04-01, everywhere", ""),
    ("", "only the agent speaks here about pottery everywhere"),
    ("pottery pottery pottery pottery", "pottery everywhere"),
    (f"key {HEX} everywhere", "near the col x, a b"),
    ("Ran a marathon NEAR the pottery studio everywhere", "Runner's high"),
]
OTHER_SPACE = [("pottery running cafe everywhere", "pottery " * 50), ("42 " * 20, "nothing else")]

WEIGHTS: list[tuple[float, float] | None] = [None, (1.0, 0.3), (0.3, 1.0)]
COLUMNS: list[Literal["user_input", "agent_response"] | None] = [None, "user_input", "agent_response"]

EDGE_QUERIES = [
    ["run"],
    ["running"],
    ["runs", "ran"],
    ["run", "running", "runs"],  # one stem, three phrases: FTS5 scores each
    ["pottery"],
    ["pottery", "pottery"],
    ["everywhere"],  # in every page: IDF <= 0 becomes 1e-6
    ["everywhere", "pottery"],
    ["café"],
    ["cafe"],
    ["東京タワーに行きました"],
    ["北京"],
    ["42"],
    ["2024", "14"],
    ["zzyzxnowhere"],  # in no page
    ["zzyzxnowhere", "pottery"],
    [HEX],
    ["!!!", "pottery"],  # a term of no token: a phrase that matches nothing
    ["!!!"],
]


def conversation_pages() -> tuple[list[tuple[str, str]], list[str]]:
    """The conversation's exchanges as (user_input, agent_response) pages, and its questions."""
    data = json.loads(CONVERSATION.read_text())
    pages = [(pair["user_input"], pair["agent_response"] + " Everywhere.") for pair in data["pairs"]]
    return pages, [qa["question"] for qa in data["qa"]]


def store_space(
    conn: psycopg.Connection, user_id: str, sides: list[tuple[str, str]]
) -> tuple[int, list[int]]:
    """A space holding `sides` as pages with their lexical rows; (space_id, page ids). Ids are spread out
    (7, 10, 13, ...) so a position mistaken for an id shows."""
    page_ids = [7 + 3 * position for position in range(len(sides))]
    tokenized = page_terms(sides)
    row = conn.execute(  # with BM25's corpus totals, as the store keeps them
        "INSERT INTO spaces (tenant, user_id, assistant_id, incarnation, created_at, page_count, token_count) "
        "VALUES ('t', %s, 'a', 'i', 0, %s, %s) RETURNING space_id",
        [user_id, len(sides), sum(terms.user_len + terms.agent_len for terms in tokenized)],
    ).fetchone()
    assert row is not None
    space_id = int(row[0])
    with conn.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO pages (space_id, page_id, user_input, agent_response, timestamp, user_len, "
            "agent_len) VALUES (%s, %s, %s, %s, '2024-03-02 18:20:00', %s, %s)",
            [
                (space_id, page_id, user, agent, terms.user_len, terms.agent_len)
                for page_id, (user, agent), terms in zip(page_ids, sides, tokenized, strict=True)
            ],
        )
        cursor.executemany(
            "INSERT INTO page_terms (space_id, term, page_id, user_tf, agent_tf, length) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            [
                (space_id, term, page_id, user_tf, agent_tf, terms.user_len + terms.agent_len)
                for page_id, terms in zip(page_ids, tokenized, strict=True)
                for term, (user_tf, agent_tf) in terms.terms.items()
            ],
        )
    return space_id, page_ids


class Stores:
    """The corpus in PostgreSQL (space `space_id`) and in FTS5 (`fts`), and the conversation's questions."""

    def __init__(
        self, conn: psycopg.Connection, space_id: int, fts: sqlite3.Connection, questions: list[str]
    ):
        self.conn = conn
        self.space_id = space_id
        self.fts = fts
        self.questions = questions

    def fts5_search(self, terms: list[str], weights: tuple[float, float] | None) -> dict[int, float]:
        if not terms:
            return {}
        expression = " OR ".join(quoted(term) for term in terms)  # what the SQLite store matches
        arguments = "" if weights is None else ", ?, ?"
        rows = self.fts.execute(
            f"SELECT rowid, -bm25(pages_fts{arguments}) FROM pages_fts WHERE pages_fts MATCH ?",
            (*(weights or ()), expression),
        )
        return {int(rowid): float(score) for rowid, score in rows}

    def fts5_count(self, match: str, at_most: int | None) -> int:
        row = self.fts.execute(
            "SELECT COUNT(*) FROM (SELECT 1 FROM pages_fts WHERE pages_fts MATCH ? LIMIT ?)",
            (match, -1 if at_most is None else at_most),
        ).fetchone()
        return int(row[0])

    def assert_same_search(self, terms: list[str], weights: tuple[float, float] | None) -> None:
        expected = self.fts5_search(terms, weights)
        found = lexical_search(self.conn, self.space_id, terms, 1000, weights)
        scores = [score for _page_id, score in found]
        assert scores == sorted(scores, reverse=True), (terms, weights)
        assert dict(found).keys() == expected.keys(), (terms, weights)
        for page_id, score in found:
            assert math.isclose(score, expected[page_id], rel_tol=1e-9), (terms, weights, page_id)


@pytest.fixture
def stores(database_url: str) -> Iterator[Stores]:
    pages, questions = conversation_pages()
    pages += HAND_MADE
    with psycopg.connect(database_url) as conn:
        migrate(conn)
        space_id, page_ids = store_space(conn, "u1", pages)
        store_space(conn, "u2", OTHER_SPACE)
        conn.commit()
        fts = sqlite3.connect(":memory:")
        fts.execute(
            "CREATE VIRTUAL TABLE pages_fts USING fts5("
            "user_input, agent_response, tokenize='porter unicode61')"
        )
        fts.executemany(
            "INSERT INTO pages_fts (rowid, user_input, agent_response) VALUES (?, ?, ?)",
            [(page_id, user, agent) for page_id, (user, agent) in zip(page_ids, pages, strict=True)],
        )
        yield Stores(conn, space_id, fts, questions)
        fts.close()


def test_scores_are_fts5_bm25(stores: Stores) -> None:
    queries = [query_terms(question) for question in stores.questions] + EDGE_QUERIES
    assert all(query_terms(question) for question in stores.questions)
    for terms in queries:
        for weights in WEIGHTS:
            stores.assert_same_search(terms, weights)
    assert stores.fts5_search(["everywhere"], None)  # the clamped IDF and the empty query are both covered
    assert not stores.fts5_search(["zzyzxnowhere"], None)


def test_limit_keeps_the_best(stores: Stores) -> None:
    for weights in WEIGHTS:
        expected = sorted(stores.fts5_search(["pottery", "run", "cafe"], weights).values(), reverse=True)
        found = lexical_search(stores.conn, stores.space_id, ["pottery", "run", "cafe"], 3, weights)
        assert len(found) == 3
        for (_page_id, score), best in zip(found, expected, strict=False):
            assert math.isclose(score, best, rel_tol=1e-9)
    assert lexical_search(stores.conn, stores.space_id, [], 10, None) == []


def counted(stores: "Stores", term: str, column: Any, at_most: int | None) -> int:
    """The store's count of one term (`document_frequencies` with one ask)."""
    return document_frequencies(stores.conn, stores.space_id, [FrequencyAsk([term], column, at_most)])[0][0]


def test_document_frequency_is_fts5_count(stores: Stores) -> None:
    terms = {term for question in stores.questions for term in query_terms(question)}
    terms |= {term for query in EDGE_QUERIES for term in query}
    for term in sorted(terms):
        for column in COLUMNS:
            match = quoted(term) if column is None else f"{column} : {quoted(term)}"
            for at_most in (None, 1, 3):
                expected = stores.fts5_count(match, at_most)
                found = document_frequencies(
                    stores.conn, stores.space_id, [FrequencyAsk([term], column, at_most)]
                )[0][0]
                assert found == expected, (term, column, at_most)
    assert document_frequencies(stores.conn, stores.space_id, [FrequencyAsk(["everywhere"], None, None)])[0][
        0
    ] == len(conversation_pages()[0]) + len(HAND_MADE)


SYNTAX = ["NEAR", "near", "AND", "OR", "NOT", "pottery*", "^pottery", "pottery:", "(", ")", "*", '"']
"""Single-token or empty terms made of FTS5 query syntax: as quoted strings FTS5 reads them as text."""
SYNTAX_PHRASES = ['a"b', "col:x", "NEAR(pottery run)", "user_input:pottery", "a b"]
"""Terms FTS5 splits into several tokens (a phrase, which page_terms approximates)."""


def test_query_syntax_is_text(stores: Stores) -> None:
    for term in SYNTAX:
        assert len(query_tokens(term)) <= 1, term
        for weights in WEIGHTS:
            stores.assert_same_search([term, "pottery"], weights)
            stores.assert_same_search([term], weights)
        for column in COLUMNS:
            match = quoted(term) if column is None else f"{column} : {quoted(term)}"
            assert document_frequencies(stores.conn, stores.space_id, [FrequencyAsk([term], column, None)])[
                0
            ][0] == stores.fts5_count(match, None)
    assert query_tokens("*") == []
    assert query_tokens("NEAR") == ["near"]
    for term in SYNTAX_PHRASES:
        assert len(query_tokens(term)) > 1, term
        found = {
            page_id for page_id, _score in lexical_search(stores.conn, stores.space_id, [term], 1000, None)
        }
        assert found >= stores.fts5_search([term], None).keys(), term  # OR of the tokens: no page lost
        for column in COLUMNS:
            match = quoted(term) if column is None else f"{column} : {quoted(term)}"
            assert document_frequencies(stores.conn, stores.space_id, [FrequencyAsk([term], column, None)])[
                0
            ][0] >= stores.fts5_count(match, None)


def test_tokens_are_fts5s() -> None:
    [running, empty, long] = page_terms(
        [("I run, she RUNS, running", "Running: café CAFE"), ("", ""), (HEX + " " + HEX, "x")]
    )
    assert running.terms == {"i": (1, 0), "run": (3, 1), "she": (1, 0), "cafe": (0, 2)}
    assert (running.user_len, running.agent_len) == (5, 3)
    assert empty == (({}), 0, 0)
    assert long.terms == {HEX[:MAX_TERM_CHARS]: (2, 0), "x": (0, 1)}
    assert query_tokens("Running") == ["run"]
    assert query_tokens("e-mail Café") == ["e", "mail", "cafe"]
    assert query_tokens(HEX) == [HEX[:MAX_TERM_CHARS]]
    assert page_terms([]) == []


def test_kept_query_tokens_are_fts5s_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Terms tokenized before come from what this process kept, the same tokens; only new ones reach FTS5,
    in one batch; the kept terms never pass `TOKENS_KEPT`."""
    monkeypatch.setattr(lexical, "TOKENS_KEPT", 4)
    lexical._kept_tokens.clear()
    batches: list[list[tuple[str, str]]] = []
    instances = lexical._instances

    def tokenized(sides: Iterable[tuple[str, str]]) -> list[tuple[int, str, int, str]]:
        batches.append(list(sides))
        return instances(batches[-1])

    monkeypatch.setattr(lexical, "_instances", tokenized)
    assert query_tokens("Running") == ["run"]
    assert lexical._query_tokens(["e-mail", "Running", "!", "Café"]) == [["e", "mail"], ["run"], [], ["cafe"]]
    assert batches == [[("Running", "")], [("e-mail", ""), ("!", ""), ("Café", "")]]
    assert lexical._query_tokens(["Running", "!", "Café"]) == [["run"], [], ["cafe"]]
    assert len(batches) == 2  # all kept
    assert lexical._query_tokens(["runs", "ran"]) == [["run"], ["ran"]]  # 6 > 4: dropped, then these kept
    assert sorted(lexical._kept_tokens) == ["ran", "runs"]


def test_tokenizer_per_thread() -> None:
    pages, _questions = conversation_pages()
    batches = [pages[start:] + pages[:start] for start in range(16)]
    expected = [page_terms(batch) for batch in batches]
    with ThreadPoolExecutor(max_workers=8) as pool:
        for _round in range(4):
            assert list(pool.map(page_terms, batches)) == expected
