"""A real PostgreSQL server for tests: `initdb` in a fresh temporary directory, a free port, stopped after.

Modelled on tests/support/redis_server.py: tests never share state with a machine's PostgreSQL. The
server runs the system's binaries (on PATH, else Debian's /usr/lib/postgresql/*/bin; `.ci/run` installs
Debian's `postgresql` package) with the durability a deployment keeps (`fsync=on`,
`synchronous_commit=on`), listens on 127.0.0.1 only, and keeps its unix socket and its log in its own
directory. initdb refuses to run as root and CI runs as root, so a root process runs the server as the
unprivileged `postgres` OS user (through `setpriv`, which execs: the process started is the postmaster
itself); any other user runs it as itself.

As a pytest plugin (tests/conftest.py names this module in `pytest_plugins`) it gives two fixtures:
`postgres_server`, one server for the session, and `database_url`, a fresh empty database per test.
"""

import atexit
import contextlib
import glob
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

DATABASE = "memoryos"
"""The database `PostgresServer.url` names, created at the first start."""

SUPERUSER = "postgres"
"""The cluster's superuser (`initdb -U`); trust authentication, so no password."""

OS_USER = "postgres"
"""The OS user a root process runs the server as (Debian's `postgresql` package creates it)."""

STOP_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}
"""pg_ctl's shutdown modes, as the signals it sends the postmaster."""

READY_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def postgres_bin_dir() -> Path | None:
    """The directory holding `initdb` and `postgres`: the one `initdb` on PATH resolves to, else Debian's
    newest /usr/lib/postgresql/VERSION/bin; None when PostgreSQL is not installed."""
    on_path = shutil.which("initdb")
    if on_path is not None:
        directory = Path(on_path).resolve().parent
        if (directory / "postgres").exists():
            return directory
    found = [Path(path).parent for path in glob.glob("/usr/lib/postgresql/*/bin/initdb")]
    found = [directory for directory in found if (directory / "postgres").exists()]
    if not found:
        return None
    return max(found, key=lambda directory: [int(part) for part in re.findall(r"\d+", directory.parent.name)])


def server_user() -> pwd.struct_passwd | None:
    """The user the server runs as when it is not this process's: `postgres` for root, else None."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(OS_USER)
    except KeyError:
        pytest.fail(f"running as root, and there is no {OS_USER!r} OS user to run PostgreSQL as")


def as_server_user(command: list[str], user: pwd.struct_passwd | None) -> list[str]:
    """`command` run as `user` (None: as this process); setpriv execs, so the pid is the command's."""
    if user is None:
        return command
    return ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups", "--", *command]


def child_pids(pid: int) -> list[int]:
    """The processes whose parent is `pid` (the postmaster's backends and auxiliary processes)."""
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses, so split after the last ')'.
        fields = stat.rpartition(")")[2].split()
        if int(fields[1]) == pid:
            children.append(int(entry.name))
    return children


def gone(pid: int) -> bool:
    """Exited: no process, or a zombie (which holds no shared memory any more)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


class PostgresServer:
    """One PostgreSQL cluster and its postmaster; `restart()` and `kill()` + `start()` keep the data
    directory and the port.

    `directory` is the server's own directory (data in data/, the socket and postgres.log beside it);
    None makes a fresh one in the system's temp directory, removed by `cleanup()`. A given directory must
    be reachable by the `postgres` OS user when this process is root (pytest's tmp_path is not).
    """

    def __init__(
        self,
        directory: Path | None = None,
        *,
        max_connections: int = 100,
        idle_in_transaction_session_timeout: int | str = 0,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        bin_dir = postgres_bin_dir()
        if bin_dir is None:
            pytest.fail("postgres is not installed (.ci/run installs it with apt)")
        self.bin_dir = bin_dir
        self.user = server_user()
        self.owns_directory = directory is None
        if directory is None:
            directory = Path(tempfile.mkdtemp(prefix="memoryos-postgres-"))
        else:
            directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.data = directory / "data"
        self.log = directory / "postgres.log"
        self.max_connections = max_connections
        self.idle_in_transaction_session_timeout = idle_in_transaction_session_timeout
        self.settings = dict(settings or {})
        self.port = free_port()
        self.url = self.database_url(DATABASE)
        self.process: subprocess.Popen[bytes] | None = None
        if self.user is not None:
            os.chown(directory, self.user.pw_uid, self.user.pw_gid)
        os.chmod(directory, 0o700)
        self.run([str(bin_dir / "initdb"), "-D", str(self.data), "--auth=trust", "-U", SUPERUSER,
                  "--encoding=UTF8", "--locale=C", "--no-instructions",
                  # initdb's own final sync only; the server runs with fsync=on.
                  "--no-sync"])  # fmt: skip
        atexit.register(self.kill)  # never leave a postmaster behind if the session dies past `finally`

    def run(self, command: list[str]) -> None:
        result = subprocess.run(
            as_server_user(command, self.user),
            cwd=self.directory,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"{command[0]} failed ({result.returncode}):\n{result.stdout}{result.stderr}")

    def database_url(self, name: str) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{name}"

    def server_command(self) -> list[str]:
        settings = {
            "port": self.port,
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": self.directory,
            "fsync": "on",
            "synchronous_commit": "on",
            "full_page_writes": "on",
            "max_connections": self.max_connections,
            "idle_in_transaction_session_timeout": self.idle_in_transaction_session_timeout,
            **self.settings,
        }
        command = [str(self.bin_dir / "postgres"), "-D", str(self.data)]
        for name, value in settings.items():
            command += ["-c", f"{name}={value}"]
        return as_server_user(command, self.user)

    def start(self) -> None:
        if self.process is not None:
            raise RuntimeError("the server is already running")
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.server_command(),
                cwd=self.directory,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C to pytest is not a fast shutdown of the server
            )
        self.wait_ready()
        with self.admin() as connection:
            exists = connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone()
            if exists is None:
                connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))

    def wait_ready(self) -> None:
        """Connects until the server accepts (crash recovery first, after `kill()`), or fails with its log."""
        assert self.process is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                code, self.process = self.process.returncode, None
                raise RuntimeError(f"postgres exited with {code} while starting:\n{self.log_tail()}")
            try:
                with psycopg.connect(self.database_url("postgres"), connect_timeout=2):
                    return
            except psycopg.OperationalError as error:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"postgres did not accept within {READY_TIMEOUT_S} s:\n{self.log_tail()}"
                    ) from error
                time.sleep(0.05)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    @contextmanager
    def admin(self) -> Iterator[psycopg.Connection]:
        """An autocommit connection to the `postgres` database (CREATE/DROP DATABASE run outside a
        transaction)."""
        with psycopg.connect(self.database_url("postgres"), autocommit=True) as connection:
            yield connection

    def create_database(self, name: str) -> str:
        """A new empty database; returns its URL."""
        with self.admin() as connection:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.database_url(name)

    def drop_database(self, name: str) -> None:
        """Drops `name`, terminating the sessions still connected to it."""
        with self.admin() as connection:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    def stop(self, mode: str = "fast") -> None:
        """Shuts down as `pg_ctl stop -m MODE` does (smart, fast, immediate) and waits for the postmaster,
        which exits after its children."""
        if self.process is None:
            return
        self.process.send_signal(STOP_SIGNALS[mode])
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        self.process = None

    def kill(self) -> None:
        """A crash: SIGKILL to the postmaster and every process it started, at once, nothing flushed or
        checkpointed; the next `start()` runs crash recovery from the WAL. Returns when all are gone, so
        that no old backend holds the shared memory the next postmaster checks."""
        if self.process is None:
            return
        postmaster = self.process.pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(postmaster, signal.SIGSTOP)  # no fork between listing the children and killing them
        children = child_pids(postmaster)
        for pid in [postmaster, *children]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        self.process = None
        deadline = time.monotonic() + 10
        while not all(gone(pid) for pid in children):
            if time.monotonic() > deadline:
                raise RuntimeError(f"postgres processes {children} outlived SIGKILL")
            time.sleep(0.01)

    def restart(self) -> None:
        self.stop()
        self.start()

    def cleanup(self) -> None:
        """Kills a server still running, and removes the directory if this server made it."""
        self.kill()
        atexit.unregister(self.kill)
        if self.owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)


@contextmanager
def running_postgres(
    directory: Path | None = None,
    *,
    max_connections: int = 100,
    idle_in_transaction_session_timeout: int | str = 0,
    settings: Mapping[str, str] | None = None,
) -> Iterator[PostgresServer]:
    """A started server (with its `memoryos` database), stopped and removed after, also on failure.
    `settings`: more server settings (`-c name=value`), after the defaults."""
    server = PostgresServer(
        directory,
        max_connections=max_connections,
        idle_in_transaction_session_timeout=idle_in_transaction_session_timeout,
        settings=settings,
    )
    try:
        server.start()
        yield server
    finally:
        try:
            server.stop()
        finally:
            server.cleanup()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the test session, started on first use."""
    with running_postgres() as server:
        yield server


@pytest.fixture
def database_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh empty database on the session's server, for one test; dropped after it."""
    name = f"test_{uuid.uuid4().hex}"
    url = postgres_server.create_database(name)
    yield url
    if postgres_server.process is None:  # a test stopped or killed the session's server: bring it back
        postgres_server.start()
    postgres_server.drop_database(name)
