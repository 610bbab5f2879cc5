"""The file format of a `FaissIndex` snapshot: a checked header, then `faiss.serialize_index`'s bytes.

Header: magic, format version, dimension, the store sequence covered, the vector count the IVF index was
trained on (0: flat), the calibration's measured recall (NaN: none), a digest of the store's embedding
fingerprint (model, dimension, vector generation: `MemorySpace.fingerprint`), payload length, and a
CRC-32 of header and payload. Anything that is not an intact snapshot of the expected dimension raises
`IndexSnapshotError`, so the space rebuilds from the store instead of serving a damaged index.

The calibration source (recent queries or stored vectors) and the recent queries themselves are not
recorded: a loaded IVF index keeps its nprobe and measured recall, and counts as calibrated on stored
vectors until it is recalibrated on the queries it sees (`faiss_index.py`).
"""

import hashlib
import math
import os
import struct
import zlib
from pathlib import Path
from typing import NamedTuple, cast

import faiss
import numpy as np
from faiss.swigfaiss import PyCallbackIOReader  # absent from faiss's stub (__init__.pyi)

from memoryos.storage.vectors.vector_index import IndexSnapshotError

MAGIC = b"MOSFAISS"
FORMAT_VERSION = 3
"""2: the index holds fp16 codes. 3: the header records the embedding fingerprint, so a snapshot written
before a `memoryos reindex` is never trusted after it. Older files are refused before their payload is
deserialized, so the space rebuilds its index from the store."""
# magic, format version, dim, covered_seq, trained_count, measured_recall, fingerprint digest,
# payload length, crc32.
_HEADER = struct.Struct("<8sHIqqd16sQI")
_CHECKED_HEADER_BYTES = _HEADER.size - 4  # every header field but the checksum itself


class SnapshotHeader(NamedTuple):
    """What a snapshot records beside the index itself."""

    dim: int
    covered_seq: int
    trained_count: int
    measured_recall: float | None
    fingerprint: str = ""


def fingerprint_digest(fingerprint: str) -> bytes:
    """16 bytes standing for a fingerprint string of any length in the fixed-size header."""
    return hashlib.blake2b(fingerprint.encode(), digest_size=16).digest()


def snapshot_bytes(header: SnapshotHeader, payload: np.ndarray) -> bytes:
    """The whole file: header (its CRC-32 covering header and payload), then the serialized index.

    Called by `IndexSnapshot.write`, off the space's lock: the checksum reads every payload byte.
    """
    recall = math.nan if header.measured_recall is None else header.measured_recall
    digest = fingerprint_digest(header.fingerprint)
    fields = (MAGIC, FORMAT_VERSION, header.dim, header.covered_seq, header.trained_count, recall, digest)
    checked = _HEADER.pack(*fields, len(payload), 0)[:_CHECKED_HEADER_BYTES]
    checksum = zlib.crc32(payload.data, zlib.crc32(checked))
    return b"".join((checked, struct.pack("<I", checksum), payload.data))


CHUNK_BYTES = 1 << 20
"""The snapshot is checksummed and deserialized a megabyte at a time (`read_snapshot`)."""


def read_snapshot(
    path: Path, dim: int, expected_fingerprint: str | None = None
) -> tuple[SnapshotHeader, faiss.Index]:
    """The header and the index of the snapshot at `path`, checked against `dim`, the expected
    fingerprint (when given) and its checksum before the payload is deserialized.

    Raises IndexSnapshotError when the file is unreadable, truncated, foreign, of another version,
    dimension or fingerprint, fails its checksum, or does not deserialize.

    Why the file is read twice, a chunk at a time, and never whole: a cold open's index load was the
    file read into one buffer, that buffer copied into a faiss byte vector, then deserialized into a
    third copy (60 MB of fresh memory touched for a 20 MB file: 50-80 ms of a cold open at 10,000 ×
    1024-d). Now the checksum pass streams the file, and faiss reads the payload from it through a callback;
    both passes are served by the page cache. The checksum still comes first: a damaged payload is never
    handed to faiss, whose reader trusts the sizes it reads.
    """
    try:
        with path.open("rb") as file:
            size = os.fstat(file.fileno()).st_size
            head = file.read(_HEADER.size)
            if len(head) < _HEADER.size:
                raise IndexSnapshotError(f"{path}: truncated index snapshot ({len(head)} bytes)")
            header = _checked_header(path, head, size, dim, expected_fingerprint)
            checksum = zlib.crc32(head[:_CHECKED_HEADER_BYTES])
            while chunk := file.read(CHUNK_BYTES):
                checksum = zlib.crc32(chunk, checksum)
            if checksum != _HEADER.unpack(head)[-1]:
                raise IndexSnapshotError(f"{path}: index snapshot checksum mismatch")
            file.seek(_HEADER.size)
            try:
                index = faiss.read_index(cast(faiss.IOReader, PyCallbackIOReader(file.read, CHUNK_BYTES)))
            except RuntimeError as exc:
                raise IndexSnapshotError(f"{path}: unreadable index snapshot: {exc}") from exc
    except OSError as exc:
        raise IndexSnapshotError(f"{path}: cannot read index snapshot: {exc}") from exc
    return header, index


def _checked_header(
    path: Path, head: bytes, size: int, dim: int, expected_fingerprint: str | None
) -> SnapshotHeader:
    """The header of a snapshot file of `size` bytes beginning with `head`, or IndexSnapshotError when
    it is foreign, of another version, dimension or fingerprint, or its file is truncated."""
    magic, version, file_dim, covered_seq, trained_count, recall, digest, payload_len, _checksum = (
        _HEADER.unpack(head)
    )
    if magic != MAGIC or version != FORMAT_VERSION:
        raise IndexSnapshotError(f"{path}: not a version-{FORMAT_VERSION} MemoryOS index snapshot")
    if file_dim != dim:
        raise IndexSnapshotError(f"{path}: snapshot holds {file_dim}-d vectors, expected {dim}-d")
    if expected_fingerprint is not None and digest != fingerprint_digest(expected_fingerprint):
        raise IndexSnapshotError(
            f"{path}: snapshot of other embeddings than the store's ({expected_fingerprint}): "
            "written before a reindex"
        )
    if size != _HEADER.size + payload_len:
        raise IndexSnapshotError(f"{path}: truncated index snapshot ({size} bytes)")
    measured_recall = None if math.isnan(recall) else recall
    fingerprint = expected_fingerprint if expected_fingerprint is not None else ""
    return SnapshotHeader(file_dim, covered_seq, trained_count, measured_recall, fingerprint)
