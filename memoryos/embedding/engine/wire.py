"""Frames between the embedding engine and its clients on a Unix stream socket.

A frame is an 8-byte prefix (header length, payload length: big-endian uint32), a UTF-8 JSON header and a
raw payload. Requests carry `{"id", "op", "texts", "is_query"}`, with tracing on an optional `trace` (the
sender's span context, `memoryos.tracing.current_carrier`: an engine that predates it ignores the key, and
one given none makes no link), and no payload; a reply carries `{"id",
"ok", ...}` and, for vectors, `rows` and `dim` with `rows * dim` little-endian float32 as the payload, so
vectors never pass through JSON. Every frame is bounded (`max_frame_bytes`): one larger is refused from
its prefix, before its body is read, so a confused or hostile peer cannot make a process allocate without
bound.
"""

import json
import select
import socket
import struct
import time
from typing import Any

import numpy as np

from memoryos.errors import EmbeddingEngineError, EmbeddingFrameTooLargeError

MAX_FRAME_BYTES = 16 * 1024 * 1024
"""Header and payload of one frame, at most. A page batch (64 texts of at most 20,000 characters) is
under 6 MB; 64 vectors of 4,096 dimensions are 1 MB."""

_PREFIX = struct.Struct(">II")
_VECTOR = np.dtype("<f4")

Header = dict[str, Any]


def send_frame(
    sock: socket.socket, header: Header, payload: bytes = b"", max_frame_bytes: int = MAX_FRAME_BYTES
) -> None:
    """Send one frame; `EmbeddingFrameTooLargeError` (nothing sent) when it exceeds `max_frame_bytes`."""
    sock.sendall(frame_bytes(header, payload, max_frame_bytes))


def frame_bytes(header: Header, payload: bytes = b"", max_frame_bytes: int = MAX_FRAME_BYTES) -> bytes:
    """One frame's bytes; `EmbeddingFrameTooLargeError` when it exceeds `max_frame_bytes`."""
    body = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode()
    check_frame_size(len(body) + len(payload), max_frame_bytes)
    return _PREFIX.pack(len(body), len(payload)) + body + payload


def send_within(sock: socket.socket, data: bytes, timeout_s: float) -> bool:
    """Send all of `data` on a blocking socket within `timeout_s`, without changing the socket's mode (its
    reader keeps blocking): each write is non-blocking (MSG_DONTWAIT) after a poll for room. False when the
    peer has not taken it all in time (it stopped reading) or the connection is gone."""
    deadline = time.monotonic() + timeout_s
    view = memoryview(data)
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLOUT)
    while view:
        left_ms = int((deadline - time.monotonic()) * 1000)
        if left_ms <= 0:
            return False
        events = poller.poll(left_ms)
        if not events:
            return False
        if events[0][1] & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
            return False
        try:
            sent = sock.send(view, socket.MSG_DONTWAIT)
        except BlockingIOError:
            continue
        except OSError:
            return False
        view = view[sent:]
    return True


def recv_frame(sock: socket.socket, max_frame_bytes: int = MAX_FRAME_BYTES) -> tuple[Header, bytes] | None:
    """The next frame, or None when the peer closed the connection between frames.
    `EmbeddingFrameTooLargeError` for a frame over the bound (its body left unread: drop the connection),
    `EmbeddingEngineError` for a connection cut inside a frame or a header that is not a JSON object."""
    first = sock.recv(_PREFIX.size)
    if not first:
        return None
    prefix = first + _recv_exactly(sock, _PREFIX.size - len(first))
    header_bytes, payload_bytes = _PREFIX.unpack(prefix)
    check_frame_size(header_bytes + payload_bytes, max_frame_bytes)
    body = _recv_exactly(sock, header_bytes)
    payload = _recv_exactly(sock, payload_bytes)
    try:
        header = json.loads(body)
    except ValueError:
        raise EmbeddingEngineError("an embedding engine frame's header is not JSON") from None
    if not isinstance(header, dict):
        raise EmbeddingEngineError("an embedding engine frame's header is not a JSON object")
    return header, payload


def check_frame_size(frame_bytes: int, max_frame_bytes: int) -> None:
    if frame_bytes > max_frame_bytes:
        raise EmbeddingFrameTooLargeError(
            f"an embedding engine frame of {frame_bytes} bytes exceeds the bound of {max_frame_bytes} bytes; "
            "send fewer or shorter texts per request"
        )


def vectors_reply(request_id: int, vectors: np.ndarray) -> tuple[Header, bytes]:
    """The reply carrying `vectors` (rows in the request's order)."""
    rows, dim = vectors.shape
    header = {"id": request_id, "ok": True, "rows": rows, "dim": dim}
    return header, np.ascontiguousarray(vectors, dtype=_VECTOR).tobytes()


def error_reply(request_id: int | None, kind: str, message: str) -> Header:
    """A refusal: `kind` a class or reason name, `message` for people (never a text of the request)."""
    return {"id": request_id, "ok": False, "error": {"kind": kind, "message": message}}


def vectors_of(header: Header, payload: bytes) -> np.ndarray:
    """The (rows, dim) float32 array of a vectors reply; `EmbeddingEngineError` when the payload does not
    hold exactly that."""
    rows, dim = int(header.get("rows", -1)), int(header.get("dim", -1))
    if rows < 0 or dim < 0 or len(payload) != rows * dim * _VECTOR.itemsize:
        raise EmbeddingEngineError(f"an embedding engine reply of {len(payload)} bytes is not {rows}x{dim}")
    return np.frombuffer(payload, dtype=_VECTOR).reshape(rows, dim).astype(np.float32)


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EmbeddingEngineError("the embedding engine connection closed inside a frame")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
