"""The test PostgreSQL harness (tests/support/postgres_server.py): a real server, durable settings, a
fresh database per test, and committed rows surviving a crash."""

import psycopg

from tests.support.postgres_server import running_postgres


def test_a_fresh_database_on_a_durable_server(database_url: str) -> None:
    with psycopg.connect(database_url) as connection:
        assert connection.execute("SHOW fsync").fetchone() == ("on",)
        assert connection.execute("SHOW synchronous_commit").fetchone() == ("on",)
        assert connection.execute("SHOW listen_addresses").fetchone() == ("127.0.0.1",)
        tables = connection.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchone()
        assert tables == (0,), "each test gets an empty database"
        connection.execute("CREATE TABLE notes (id integer PRIMARY KEY, body text NOT NULL)")
        connection.execute("INSERT INTO notes VALUES (%s, %s)", [1, "héllo"])
        connection.commit()
        assert connection.execute("SELECT id, body FROM notes").fetchall() == [(1, "héllo")]


def test_committed_rows_survive_a_killed_postmaster() -> None:
    """SIGKILL to the postmaster and its backends, nothing checkpointed: crash recovery replays the WAL,
    and the committed row is there; the uncommitted one is not."""
    with running_postgres(max_connections=20, idle_in_transaction_session_timeout="10s") as server:
        with psycopg.connect(server.url) as connection:
            assert connection.execute("SHOW max_connections").fetchone() == ("20",)
            assert connection.execute("SHOW idle_in_transaction_session_timeout").fetchone() == ("10s",)
            connection.execute("CREATE TABLE notes (id integer PRIMARY KEY, body text NOT NULL)")
            connection.execute("INSERT INTO notes VALUES (1, 'committed')")
            connection.commit()
        pending = psycopg.connect(server.url)
        pending.execute("INSERT INTO notes VALUES (2, 'never committed')")
        server.kill()
        pending.close()
        server.start()
        with psycopg.connect(server.url) as connection:
            assert connection.execute("SELECT id, body FROM notes").fetchall() == [(1, "committed")]
        assert "database system was interrupted" in server.log.read_text()
