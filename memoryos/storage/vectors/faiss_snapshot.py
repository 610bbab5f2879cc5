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
import struct
import zlib
from pathlib import Path
from typing import NamedTuple

import numpy as np

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


def read_snapshot(
    path: Path, dim: int, expected_fingerprint: str | None = None
) -> tuple[SnapshotHeader, np.ndarray]:
    """The header and serialized index of the snapshot at `path`, checked against `dim`, the expected
    fingerprint (when given) and its checksum.

    Raises IndexSnapshotError when the file is unreadable, truncated, foreign, of another version,
    dimension or fingerprint, or fails its checksum. The payload is a view of the file's bytes, for `faiss.deserialize_index`.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise IndexSnapshotError(f"{path}: cannot read index snapshot: {exc}") from exc
    if len(data) < _HEADER.size:
        raise IndexSnapshotError(f"{path}: truncated index snapshot ({len(data)} bytes)")
    magic, version, file_dim, covered_seq, trained_count, recall, digest, payload_len, checksum = (
        _HEADER.unpack_from(data)
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
    if len(data) != _HEADER.size + payload_len:
        raise IndexSnapshotError(f"{path}: truncated index snapshot ({len(data)} bytes)")
    payload = np.frombuffer(data, dtype=np.uint8, offset=_HEADER.size)
    if zlib.crc32(payload.data, zlib.crc32(data[:_CHECKED_HEADER_BYTES])) != checksum:
        raise IndexSnapshotError(f"{path}: index snapshot checksum mismatch")
    measured_recall = None if math.isnan(recall) else recall
    fingerprint = expected_fingerprint if expected_fingerprint is not None else ""
    return SnapshotHeader(file_dim, covered_seq, trained_count, measured_recall, fingerprint), payload
