"""`bench.storage.postgres`'s statement figures on a real server with `pg_stat_statements` loaded: only
the tracked database's top-level statements are counted, per turn, from its next connection on, and the
reading itself is not."""

import psycopg
import pytest

from bench.storage.postgres import (
    STATEMENT_STATS,
    statement_figures,
    statement_stats_available,
    track_statements,
)
from tests.support.postgres_server import postgres_bin_dir, running_postgres

pytestmark = pytest.mark.integration


def test_the_tracked_databases_statements_are_counted_per_turn() -> None:
    bin_dir = postgres_bin_dir()
    assert bin_dir is not None
    if not statement_stats_available(bin_dir):
        pytest.skip(f"no pg_stat_statements library beside {bin_dir} (Debian's postgresql package has it)")
    with running_postgres(settings=STATEMENT_STATS) as server:
        tracked, untracked = server.create_database("tracked"), server.create_database("untracked")
        track_statements(tracked, "tracked")
        for url in (tracked, untracked):
            with psycopg.connect(url, autocommit=True) as connection:
                connection.execute("CREATE TABLE pages (page_id bigint PRIMARY KEY, text text)")
                for page_id in range(4):
                    connection.execute("INSERT INTO pages VALUES (%s, 'a page')", (page_id,))
                connection.execute("SELECT count(*) FROM pages")

        figures = statement_figures(tracked, turns=4)
        assert figures["statements_per_turn"] == pytest.approx(6 / 4)  # CREATE, 4 INSERTs, SELECT
        assert figures["exec_ms_per_turn"] > 0
        costliest = {row["statement"]: row for row in figures["costliest"]}
        insert = costliest["INSERT INTO pages VALUES ($1, $2)"]  # constants normalized
        assert (insert["calls_per_turn"], insert["rows_per_call"]) == (1.0, 1.0)
        assert statement_figures(tracked, turns=4)["statements_per_turn"] == figures["statements_per_turn"]
        with psycopg.connect(tracked, options="-c pg_stat_statements.track=none") as connection:
            elsewhere = connection.execute(
                "SELECT count(*) FROM pg_stat_statements WHERE dbid <> "
                "(SELECT oid FROM pg_database WHERE datname = current_database())"
            ).fetchone()
        assert elsewhere == (0,)  # the untracked database's statements were not counted
