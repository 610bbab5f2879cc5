"""`SpaceHold`: which processes have a memory space open, and exclusive use of it for forget and reindex.

Many local processes may have one space open at once (two `memoryos mcp` servers, a `memoryos retrieve`
beside a running writer): SQLite serializes their writes (`BEGIN IMMEDIATE`), and each process catches its
in-memory index up from the store before it searches, writes or snapshots (`memoryos/space/page_index.py`). What cannot
be shared is a change under every other process's feet: erasing the directory (`forget_user`) or replacing
every vector with another model's (`memoryos reindex`). Those need the space to themselves.

So every open space holds a shared `flock` on `<space>/space.lock` for as long as it is open, and forget or
reindex converts its own hold to an exclusive one, which the kernel grants only when no other process holds
the file. A refusal names the other processes' pids (read from `/proc/locks`) and what to do; a process
that opens while an exclusive holder works waits up to a timeout, then is told who holds it and why.
`flock` locks die with their process, so a crash never leaves a space locked.

`flock` is reliable on local filesystems. On a network volume shared by several machines it is not; there
the service's shard leases keep one writer per space (ARCHITECTURE §5).
"""

import contextlib
import errno
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from memoryos.errors import MemoryOSError, SpaceNotFoundError, StorageError

LOCK_FILE = "space.lock"
_POLL_S = 0.05


class SpaceBusyError(MemoryOSError):
    """Another process holds the space in a way this operation cannot share; the message says who and
    what to do."""

    def __init__(self, directory: Path, message: str) -> None:
        self.directory = directory
        super().__init__(message)


def _pids_holding(fd: int) -> list[int]:
    """Pids of processes (this one excluded) holding or awaiting a flock on the file open as `fd`.

    Reads `/proc/locks` (Linux); elsewhere the list is empty and messages say "another process".
    """
    st = os.fstat(fd)
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids: set[int] = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.replace("->", "").split()
            if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == key:
                pids.add(int(fields[4]))
    pids.discard(os.getpid())
    return sorted(pids)


def _reason(error: OSError) -> str:
    """An OS error's reason in the lower case of a message tail: "read-only file system"."""
    text = error.strerror or str(error)
    return text[:1].lower() + text[1:]


def creation_error(error: OSError, directory: Path) -> StorageError:
    """`StorageError` for a directory that could not be made, naming the directory that refused it (the
    parent of the one being made, for a read-only or permission failure)."""
    failed = Path(error.filename) if error.filename else directory
    where = failed.parent if error.errno in (errno.EROFS, errno.EACCES, errno.EPERM) else failed
    return StorageError(f"cannot create memory in {where}: {_reason(error)}")


def make_directory(directory: Path) -> None:
    """`mkdir -p`, or `StorageError` (`creation_error`)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise creation_error(error, directory) from None


def _describe(pids: list[int]) -> str:
    if not pids:
        return "another process"
    return ("process " if len(pids) == 1 else "processes ") + ", ".join(str(p) for p in pids)


class SpaceHold:
    """This process's hold on one space directory: shared from open to close, exclusive on request."""

    def __init__(self, directory: Path, timeout_s: float, *, require: str | None = None) -> None:
        """Take the shared hold, creating the directory if needed — or, with `require` (the space's store
        file name), only on a space that exists: a directory without that file raises `SpaceNotFoundError`,
        and nothing is created (the lock file is made only inside an existing space that lacks one).

        Waits up to `timeout_s` while another process has the space to itself (a forget or a reindex
        running), then raises `SpaceBusyError` naming it. A forget that removed the directory while this
        process waited is noticed (the lock file it holds is no longer the one at the path): the space is
        opened afresh, or, with `require`, `SpaceNotFoundError` is raised, never a space recreated. A
        directory that cannot be created or opened (read-only, no permission) raises `StorageError`.
        """
        self.directory = directory
        self._path = directory / LOCK_FILE
        self._mutex = threading.Lock()
        deadline = time.monotonic() + timeout_s
        while True:
            if require is None:
                make_directory(directory)
            elif not (directory / require).is_file():
                raise SpaceNotFoundError(directory)
            try:
                fd = self._open_lock_file(create=require is None)
            except FileNotFoundError:
                if require is None or not (directory / require).is_file():
                    continue  # erased meanwhile: make it again, or (require) find it gone
                try:
                    fd = self._open_lock_file(create=True)  # a space stored before its lock file existed
                except FileNotFoundError:
                    continue
            try:
                self._take_shared(fd, deadline)
            except BaseException:
                os.close(fd)
                raise
            if self._is_current(fd):
                self._fd: int | None = fd
                return
            os.close(fd)  # held a removed file: the space was erased meanwhile

    def _open_lock_file(self, create: bool) -> int:
        """The lock file's descriptor, read-write (read-only where the space's filesystem is)."""
        flags = os.O_CREAT if create else 0
        try:
            return os.open(self._path, os.O_RDWR | flags, 0o600)
        except (FileNotFoundError, NotADirectoryError):
            raise FileNotFoundError(self._path) from None
        except OSError as error:
            if error.errno in (errno.EROFS, errno.EACCES) and not create:
                with contextlib.suppress(OSError):
                    return os.open(self._path, os.O_RDONLY)  # flock needs no write access
            raise StorageError(f"cannot open memory space {self.directory}: {_reason(error)}") from None

    def _take_shared(self, fd: int, deadline: float) -> None:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise SpaceBusyError(self.directory, self._busy_message(fd)) from None
                time.sleep(_POLL_S)

    def _busy_message(self, fd: int) -> str:
        holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
        return (
            f"memory space {self.directory} is in exclusive use ({holder}); "
            "retry when that command has finished"
        )

    def _is_current(self, fd: int) -> bool:
        try:
            return os.stat(self._path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False

    def claim(self, purpose: str, wait_s: float = 0.0) -> None:
        """Turn this process's hold exclusive until `unclaim` or `release`, or raise `SpaceBusyError`
        naming the processes that have the space open (after waiting up to `wait_s` for them to close).

        `purpose` ("forget", "reindex") is written into the lock file so a process that tries to open the
        space meanwhile can say what it waits for. Converting a flock is not atomic: when the exclusive
        lock is refused the shared hold is taken again before raising.
        """
        with self._mutex:
            fd = self._require_open()
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    others = _pids_holding(fd)
                    fcntl.flock(fd, fcntl.LOCK_SH)
                    if time.monotonic() >= deadline:
                        raise SpaceBusyError(
                            self.directory,
                            f"cannot {purpose}: memory space {self.directory} is open in "
                            f"{_describe(others)}. Stop them (memoryos mcp, memoryos serve, memoryos chat "
                            "or your own program using this data directory) or do it through them, "
                            "then retry",
                        ) from None
                    time.sleep(_POLL_S)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}: {purpose}".encode(), 0)

    def unclaim(self) -> None:
        """Back to a shared hold after `claim`."""
        with self._mutex:
            fd = self._require_open()
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_SH)

    @contextlib.contextmanager
    def exclusive(self, purpose: str) -> Iterator[None]:
        """The space to this process alone while the block runs (`claim`, then `unclaim`), or
        `SpaceBusyError` at once. A block that releases the hold itself (forget) needs no unclaim."""
        self.claim(purpose)
        try:
            yield
        finally:
            if self._fd is not None:
                self.unclaim()

    def _require_open(self) -> int:
        if self._fd is None:
            raise MemoryOSError(f"memory space {self.directory} is closed")
        return self._fd

    def release(self) -> None:
        """Drop the hold (closing the file releases the flock); a second call does nothing."""
        with self._mutex:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
