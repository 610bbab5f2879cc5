"""The PostgreSQL store's schema: created in an empty database, migrated once when two processes start
together, left alone at its version, databases of the previous versions migrated with their spaces, and
a database newer than the code refused untouched."""

import threading

import psycopg
import pytest

from memoryos.errors import StorageError
from memoryos.storage.records.base import FrequencyAsk
from memoryos.storage.records.postgres.connection import migrate, schema_version
from memoryos.storage.records.postgres.lexical import (
    PageTerms,
    document_frequencies,
    lexical_search,
    page_terms,
)
from memoryos.storage.records.postgres.schema import MIGRATIONS, SCHEMA_VERSION


def tables(url: str) -> set[str]:
    with psycopg.connect(url) as connection:
        rows = connection.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    return {row[0] for row in rows}


def test_an_empty_database_gets_the_whole_schema(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as connection:
        assert schema_version(connection) == 0
        assert migrate(connection) == 0
        assert schema_version(connection) == SCHEMA_VERSION
        assert migrate(connection) == SCHEMA_VERSION  # at its version: nothing to do
    assert {"spaces", "pages", "page_terms", "op_log", "shard_fences", "tombstones"} <= tables(database_url)


def test_two_processes_starting_together_migrate_once(database_url: str) -> None:
    found: list[int] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def start() -> None:
        try:
            with psycopg.connect(database_url, autocommit=True) as connection:
                barrier.wait()
                found.append(migrate(connection))
        except BaseException as error:
            errors.append(error)

    starters = [threading.Thread(target=start) for _ in range(4)]
    for starter in starters:
        starter.start()
    for starter in starters:
        starter.join(timeout=30)
    assert not errors
    assert sorted(found) == [0] + [SCHEMA_VERSION] * 3  # one created the schema, the others found it
    with psycopg.connect(database_url) as connection:
        assert connection.execute("SELECT COUNT(*) FROM memoryos_schema").fetchone() == (1,)


def test_a_newer_database_is_refused_untouched(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as connection:
        migrate(connection)
        connection.execute("UPDATE memoryos_schema SET version = %s", (SCHEMA_VERSION + 1,))
        with pytest.raises(StorageError, match="newer than this MemoryOS reads"):
            migrate(connection)
        assert schema_version(connection) == SCHEMA_VERSION + 1


def test_a_version_1_database_is_migrated_with_its_spaces(database_url: str) -> None:
    """A database of schema version 1 (as the first release left it, with a space in it) migrates to the
    current version on start: each term row gets its page's length, the counts move into the primary key
    and the vectors stay in their rows, and lexical search then scores the migrated space exactly as it
    scores the same pages stored at the current version."""
    pages = [
        ("I ran a marathon in Boston", "Running that far is hard."),
        ("My sister paints pottery", "Pottery painting with your sister sounds fun."),
        ("We adopted a dog named Pixel", "Pixel is a great name for a dog."),
        ("The marathon was in April", "April marathons are cool and fast."),
    ]
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(MIGRATIONS[0].encode())
        connection.execute("INSERT INTO memoryos_schema(version) VALUES (1)")
        before = version_1_space(connection, "migrated", pages)

        assert migrate(connection) == 1
        assert schema_version(connection) == SCHEMA_VERSION
        after = current_space(connection, "stored-now", pages)
        unmatched = connection.execute(
            "SELECT COUNT(*) FROM page_terms t JOIN pages p USING (space_id, page_id) "
            "WHERE t.length <> p.user_len + p.agent_len"
        ).fetchone()
        assert unmatched == (0,)
        storage = connection.execute(
            "SELECT attrelid::regclass::text, attstorage FROM pg_attribute "
            "WHERE attname = 'vector' AND attrelid IN ('pages'::regclass, 'segments'::regclass, "
            "'knowledge'::regclass) ORDER BY 1"
        ).fetchall()
        assert storage == [("knowledge", "m"), ("pages", "m"), ("segments", "m")]
        for terms in (["marathon"], ["pottery", "sister"], ["dog", "april", "boston"]):
            migrated = lexical_search(connection, before, terms, 10, None)
            assert migrated, terms
            assert migrated == lexical_search(connection, after, terms, 10, None)
            asks = [FrequencyAsk(terms, at_most=None)]
            assert document_frequencies(connection, before, asks) == document_frequencies(
                connection, after, asks
            )


def page_terms_foreign_keys(connection: psycopg.Connection) -> int:
    row = connection.execute(
        "SELECT COUNT(*) FROM pg_constraint WHERE conrelid = 'page_terms'::regclass AND contype = 'f'"
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_version_2_database_loses_the_terms_foreign_key_and_a_deleted_space_still_takes_its_terms(
    database_url: str,
) -> None:
    """Version 3 drops `page_terms`' foreign key to `spaces` (its check was a third of a page's term
    insert) and deletes a space's terms with its row by a trigger instead: deleting the `spaces` row of a
    space migrated from version 2, as a forget (or a worker of version 2, mid-upgrade) does, leaves no
    row of it in any table, and another space's rows stay."""
    pages = [("I ran a marathon in Boston", "Running that far is hard."), ("We adopted a dog", "Lovely.")]
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(MIGRATIONS[0].encode())
        connection.execute(MIGRATIONS[1].encode())
        connection.execute("INSERT INTO memoryos_schema(version) VALUES (2)")
        erased, kept = current_space(connection, "erased", pages), current_space(connection, "kept", pages)
        assert page_terms_foreign_keys(connection) == 1

        assert migrate(connection) == 2
        assert schema_version(connection) == SCHEMA_VERSION
        assert page_terms_foreign_keys(connection) == 0
        connection.execute("DELETE FROM spaces WHERE space_id = %s", (erased,))
        expected = {"spaces": 1, "pages": 2, "page_terms": sum(len(page.terms) for page in page_terms(pages))}
        for table, rows in expected.items():
            counts = connection.execute(
                f"SELECT space_id, COUNT(*) FROM {table} GROUP BY 1".encode()
            ).fetchall()
            assert dict(counts) == {kept: rows}, table


def _space_row(connection: psycopg.Connection, user_id: str, terms: list[PageTerms]) -> int:
    row = connection.execute(
        "INSERT INTO spaces (tenant, user_id, assistant_id, incarnation, created_at, page_count, token_count) "
        "VALUES ('t', %s, 'a', 'i', 0, %s, %s) RETURNING space_id",
        (user_id, len(terms), sum(page.user_len + page.agent_len for page in terms)),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _pages(
    connection: psycopg.Connection, space_id: int, pages: list[tuple[str, str]], terms: list[PageTerms]
) -> None:
    for page_id, ((user, agent), page) in enumerate(zip(pages, terms, strict=True), start=1):
        connection.execute(
            "INSERT INTO pages (space_id, page_id, user_input, agent_response, timestamp, user_len, agent_len) "
            "VALUES (%s, %s, %s, %s, '2024-03-02 18:20:00', %s, %s)",
            (space_id, page_id, user, agent, page.user_len, page.agent_len),
        )


def version_1_space(connection: psycopg.Connection, user_id: str, pages: list[tuple[str, str]]) -> int:
    """A space written as version 1 wrote it: term rows without the page's length."""
    return _space(connection, user_id, pages, with_length=False)


def current_space(connection: psycopg.Connection, user_id: str, pages: list[tuple[str, str]]) -> int:
    """The same pages written as the current version writes them."""
    return _space(connection, user_id, pages, with_length=True)


def _space(
    connection: psycopg.Connection, user_id: str, pages: list[tuple[str, str]], with_length: bool
) -> int:
    terms = page_terms(pages)
    space_id = _space_row(connection, user_id, terms)
    _pages(connection, space_id, pages, terms)
    columns = "space_id, term, page_id, user_tf, agent_tf" + (", length" if with_length else "")
    for page_id, page in enumerate(terms, start=1):
        length = (page.user_len + page.agent_len,) if with_length else ()
        for term, (user_tf, agent_tf) in page.terms.items():
            row = (space_id, term, page_id, user_tf, agent_tf, *length)
            connection.execute(
                f"INSERT INTO page_terms ({columns}) VALUES ({', '.join(['%s'] * len(row))})".encode(), row
            )
    return space_id
