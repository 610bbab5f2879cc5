"""The compose files' worker on its database, for real: each compose file's `memoryos worker`, through the
compose files' password entry (x-postgres-password-entry: the secret file's line exported as PGPASSWORD),
with the URL the compose file gives it (no password in it) pointed at a real PostgreSQL that asks the
`memoryos` role for its password (scram-sha-256), until it serves; the database then holds the schema the
worker migrated, as that role.

tests/integration/test_deploy_commands.py starts the same commands against a redis-server alone, on their
data directory (tests/support/deploy_files.py keeps the database's settings apart for it); this test is
their database half. `.ci/deploy-check` runs both with the image venvs (DEPLOY_CHECK_WORKER_BIN).
"""

import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from tests.integration.test_deploy_commands import (
    START_TIMEOUT_S,
    WORKER_BIN,
    Case,
    Output,
    container_env,
    readiness,
    seed_models_volume,
)
from tests.support.deploy_files import COMPOSE_FILES, Container, compose_containers, interpolate
from tests.support.postgres_server import PostgresServer
from tests.support.redis_server import RedisServer, running_redis

pytestmark = pytest.mark.integration

ROLE = "memoryos"
SECRET_PATH = "/run/secrets/postgres_password"


def workers() -> list[Container]:
    """The compose files' distinct worker entries: one per (command, password entry, database URL), as
    test_deploy_commands.py runs one per command (the GPU file's differs in its device and process count,
    which that test's CPU run stands for)."""
    found: dict[tuple[tuple[str, ...], str | None, tuple[tuple[str, str], ...]], Container] = {}
    for path in COMPOSE_FILES:
        for container in compose_containers(path):
            if container.argv[:2] == ["memoryos", "worker"]:
                key = (
                    tuple(container.argv),
                    container.entry_script,
                    tuple(container.database_environment.items()),
                )
                if key in found:
                    found[key].source += f", {container.source}"
                else:
                    found[key] = container
    return list(found.values())


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with running_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(scope="module")
def postgres() -> Iterator[tuple[PostgresServer, str]]:
    """A server whose `memoryos` role logs in over TCP with its password only (the superuser, which the
    fixture uses, keeps trust), and that password."""
    server = PostgresServer()
    hba = server.data / "pg_hba.conf"
    hba.write_text(f"host all {ROLE} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
    password = secrets.token_urlsafe(24)
    try:
        server.start()
        with server.admin() as connection:
            connection.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(ROLE), sql.Literal(password)
                )
            )
        yield server, password
    finally:
        server.stop()
        server.cleanup()


@pytest.mark.parametrize("worker", workers(), ids=lambda c: c.source)
def test_the_compose_worker_serves_from_its_database(
    worker: Container,
    redis_server: RedisServer,
    postgres: tuple[PostgresServer, str],
    tmp_path: Path,
) -> None:
    server, password = postgres
    assert worker.entry_script and SECRET_PATH in worker.entry_script
    (url,) = worker.database_environment.values()
    database = f"memoryos_{tmp_path.name.lower().replace('-', '_')[:40]}"
    with server.admin() as connection:
        connection.execute(
            sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(database), sql.Identifier(ROLE))
        )
    parts = urlsplit(interpolate(url, {}))
    assert parts.password is None and parts.username == ROLE, "the password comes from the secret"
    local_url = urlunsplit(parts._replace(netloc=f"{ROLE}@127.0.0.1:{server.port}", path=f"/{database}"))
    secret = tmp_path / "postgres_password"
    secret.write_text(password + "\n")

    case = Case(tuple(worker.argv), tuple(sorted(worker.environment.items())), WORKER_BIN, worker.source)
    argv, env, ports = container_env(case, tmp_path, redis_server.url)
    env["MEMORYOS_DATABASE_URL"] = local_url
    seed_models_volume(env)  # this test is about the database: no export built at the worker's start
    script = worker.entry_script.replace(SECRET_PATH, str(secret))
    process = subprocess.Popen(
        ["/bin/sh", "-c", script, "postgres-password", *argv],
        env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    output = Output(process)
    try:
        ready = readiness(case, ports)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready(output.text()):
            assert process.poll() is None, (
                f"{worker.source} exited {process.returncode}:\n{output.text()[-3000:]}"
            )
            assert time.monotonic() < deadline, f"{worker.source} not serving:\n{output.text()[-3000:]}"
            time.sleep(0.2)
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert process.returncode in (0, -15), f"{worker.source}: SIGTERM exit {process.returncode}"
    # The schema the worker migrated on start, owned by the role it logged in as with the secret's password.
    with psycopg.connect(server.database_url(database), autocommit=True) as connection:
        row = connection.execute("SELECT tableowner FROM pg_tables WHERE tablename = 'spaces'").fetchone()
    assert row == (ROLE,), f"no spaces table made by {ROLE}: {row}"
