"""Whether a directory lies on a network file system, where SQLite's store is not safe.

SQLite: "All processes using a database must be on the same host computer; WAL does not work over a
network filesystem." Its locks and shared memory rely on one kernel. A service worker keeping per-space
SQLite files on NFS, CIFS or a FUSE-backed volume (the usual Kubernetes ReadWriteMany classes) can lose
or corrupt writes when two hosts touch a space, so it refuses to start there and names the database
setting instead. The mount is found in `/proc/self/mountinfo`: the longest mount point that contains the
directory.
"""

from pathlib import Path

NETWORK_TYPES = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "9p", "afs", "lustre", "gpfs", "beegfs"}
    | {"ocfs2", "gfs2", "fuse", "davfs", "sshfs", "efs"}
)
"""File system types shared between hosts. Every `fuse.<name>` type counts too (sshfs, s3fs, gcsfuse,
juicefs, glusterfs over FUSE); `fuseblk`, a local disk through FUSE, does not."""
MOUNTINFO = Path("/proc/self/mountinfo")


def _unescape(field: str) -> str:
    """A mountinfo path: spaces and a few other characters are written as octal escapes (`\\040`)."""
    return field.encode().decode("unicode_escape") if "\\" in field else field


def filesystem_type(directory: Path, mountinfo: str | None = None) -> str | None:
    """The type of the file system holding `directory` (or that will hold it, when it does not exist
    yet), from `mountinfo` (default: this process's); None where none can be read (not Linux)."""
    if mountinfo is None:
        try:
            mountinfo = MOUNTINFO.read_text()
        except OSError:
            return None
    path = directory.resolve()
    best: tuple[int, str] | None = None
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if " - " not in line or len(fields) < 5:
            continue
        mount_point = Path(_unescape(fields[4]))
        fstype = line.split(" - ", 1)[1].split(" ")[0]
        if (path == mount_point or mount_point in path.parents) and (
            best is None or len(str(mount_point)) >= best[0]
        ):
            best = (len(str(mount_point)), fstype)
    return None if best is None else best[1]


def is_network_fs(fstype: str | None) -> bool:
    """Whether `fstype` is shared between hosts (`NETWORK_TYPES`, or any `fuse.<name>`)."""
    return fstype is not None and (fstype in NETWORK_TYPES or fstype.startswith("fuse."))
