"""A TCP proxy in front of Redis that holds back one chosen command, or Redis's reply to it.

As behind a partition that heals or a stalled link, and without timing: `hold_reply_to(marker)` arms
the proxy so the next request containing `marker` is forwarded (Redis executes it at once) and everything
Redis sends back on that connection waits until `release()` — a worker then hears "your lease is
renewed" after the lease expired and another worker took the shard. `hold_request(marker)` holds the
request itself until `release()`: Redis executes it late, a read of new entries sent by the owner then
arriving after another worker took the shard.
"""

import socket
import threading


class ReplyHoldingProxy:
    """127.0.0.1:`port` forwards to 127.0.0.1:`upstream_port`, one pair of pump threads per connection."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._marker: bytes | None = None
        self._request_marker: bytes | None = None
        self.holding = threading.Event()
        """Set once a reply is being held back."""
        self._released = threading.Event()
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def hold_reply_to(self, marker: bytes) -> None:
        with self._lock:
            self._marker = marker

    def hold_request(self, marker: bytes) -> None:
        with self._lock:
            self._request_marker = marker

    def release(self) -> None:
        self._released.set()

    def close(self) -> None:
        self._released.set()
        for sock in self._sockets:
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            self._sockets += [client, upstream]
            held = threading.Event()  # this connection's replies are held
            threading.Thread(target=self._requests, args=(client, upstream, held), daemon=True).start()
            threading.Thread(target=self._replies, args=(upstream, client, held), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket, held: threading.Event) -> None:
        while data := _recv(client):
            with self._lock:
                if self._marker is not None and self._marker in data:
                    self._marker = None
                    held.set()  # before Redis can answer: its reply is the first one held
                    self.holding.set()
                hold_this = self._request_marker is not None and self._request_marker in data
                if hold_this:
                    self._request_marker = None
            if hold_this:
                self.holding.set()
                self._released.wait()
            if not _send(upstream, data):
                break
        upstream.close()

    def _replies(self, upstream: socket.socket, client: socket.socket, held: threading.Event) -> None:
        while data := _recv(upstream):
            if held.is_set():
                self._released.wait()
            if not _send(client, data):
                break
        client.close()


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def _send(sock: socket.socket, data: bytes) -> bool:
    try:
        sock.sendall(data)
        return True
    except OSError:
        return False
