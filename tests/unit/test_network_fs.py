"""A worker's data directory on a network file system is told apart from a local one, by the mount that
holds it in `/proc/self/mountinfo`."""

from pathlib import Path

from memoryos.storage.network_fs import filesystem_type, is_network_fs

MOUNTINFO = "\n".join(
    [
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw",
        "30 22 0:40 / /data rw,relatime shared:2 - nfs4 fileserver:/export rw,vers=4.2",
        "31 30 0:41 / /data/local rw,relatime shared:3 - tmpfs tmpfs rw",
        "32 22 0:42 / /mnt/bucket rw - fuse.s3fs s3fs rw",
        "33 22 0:43 / /mnt/ntfs rw - fuseblk /dev/sdb1 rw",
        "34 22 0:44 / /mnt/with\\040space rw - cifs //host/share rw",
    ]
)


def test_the_longest_mount_point_holding_the_directory_decides() -> None:
    assert filesystem_type(Path("/data/spaces/acme"), MOUNTINFO) == "nfs4"
    assert filesystem_type(Path("/data/local/spaces"), MOUNTINFO) == "tmpfs"  # a mount inside the share
    assert filesystem_type(Path("/srv/memoryos"), MOUNTINFO) == "ext4"
    assert filesystem_type(Path("/mnt/bucket/x"), MOUNTINFO) == "fuse.s3fs"
    assert filesystem_type(Path("/mnt/with space/x"), MOUNTINFO) == "cifs"
    assert filesystem_type(Path("/datadir"), MOUNTINFO) == "ext4"  # a prefix of the name is not a parent


def test_network_types_and_fuse_are_network_but_a_local_disk_through_fuse_is_not() -> None:
    assert all(is_network_fs(kind) for kind in ("nfs", "nfs4", "cifs", "fuse.s3fs", "fuse.sshfs", "ceph"))
    assert not any(is_network_fs(kind) for kind in ("ext4", "xfs", "tmpfs", "overlay", "fuseblk", None))


def test_this_machines_temporary_directory_is_read_from_its_own_mounts(tmp_path: Path) -> None:
    found = filesystem_type(tmp_path)
    assert found is not None and not is_network_fs(found)
