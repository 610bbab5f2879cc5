"""Hostile bytes the generated cases (`test_api_schemathesis.py`) and the field checks
(`test_api_limits.py`) do not send: JSON nested past any parser's depth, bytes that are not UTF-8, ids that
try to climb out of the data directory in every id position (encoded dots and slashes, NUL, backslashes,
10,000 characters), and CR/LF/NUL in request headers or smuggled through a path into a response header.
Sent as raw bytes on a socket where a client library would clean them first. Every answer is a 4xx (or
a redirect to this same server), never a 5xx; nothing is created outside the data directory, and a
refused write creates nothing at all."""

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.api.settings import ApiSettings
from tests.support.api_server import RunningApi, offline_config, running_api
from tests.support.fakes import HashEmbedder

pytestmark = pytest.mark.integration

KEY = "hostile-key-0123456789"
AUTH = f"Authorization: Bearer {KEY}".encode()


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApi]:
    settings = ApiSettings(port=0, keys={KEY: "t"}, max_body_bytes=4 * 1024 * 1024, rate_limit_per_s=0)
    config = offline_config(tmp_path_factory.mktemp("hostile") / "data")
    with running_api(settings, config, embedder=HashEmbedder()) as running:
        yield running


def raw_request(api: RunningApi, method: str, path: bytes, headers: list[bytes], body: bytes = b"") -> bytes:
    """One HTTP/1.1 exchange with exactly these bytes on the wire; the answer's head and body as sent."""
    host, port = api.url.removeprefix("http://").split(":")
    head = [method.encode() + b" " + path + b" HTTP/1.1", b"Host: " + host.encode(), b"Connection: close"]
    if body:
        head += [b"Content-Type: application/json", b"Content-Length: " + str(len(body)).encode()]
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"\r\n".join([*head, *headers]) + b"\r\n\r\n" + body)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def response_headers(answer: bytes) -> list[bytes]:
    return answer.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]


def entries(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize(
    "body",
    [
        b'{"user_input": "a", "agent_response": "b", "meta_data": {"k": ' + nested(100_000) + b"}}",
        b'{"user_input": "a", "agent_response": "b", "meta_data": {"k": ' + nested(2_000) + b"}}",
        b'{"user_input": ' + b'{"a": ' * 50_000 + b"1" + b"}" * 50_000 + b', "agent_response": "b"}',
        b'{"turns": ' + nested(100_000) + b"}",
        b'{"user_input": "\xff\xfe\xfd", "agent_response": "b"}',
        b'{"user_input": "caf\xc3", "agent_response": "b"}',
        b'{"user_input": "a", "agent_response": "\xc0\xaf\xc0\xae"}',
        b'{"user_input": "a", "agent_response": "b", "meta_data": {"\xff": 1}}',
        b"\xff\xfe{\x00}\x00",
    ],
    ids=[
        "deep-arrays",
        "deep-2000",
        "deep-objects",
        "deep-turns",
        "not-utf8",
        "cut-utf8",
        "overlong",
        "key",
        "utf16",
    ],
)
@pytest.mark.parametrize("route", [b"memories", b"memories/batch"])
def test_deep_json_and_bytes_that_are_not_utf8_are_4xx_and_store_nothing(
    api: RunningApi, body: bytes, route: bytes
) -> None:
    before = entries(api.data_dir.parent)
    answer = raw_request(api, "POST", b"/v1/users/hostile/assistants/bot/" + route, [AUTH], body)
    assert 400 <= status_of(answer) < 500, answer[:300]
    assert b'"error"' in answer  # the API's error body, not a crash page
    assert entries(api.data_dir.parent) == before  # no space was created


CLIMBING_IDS = [
    b"..",
    b"%2e%2e",
    b"%2E%2E%2F%2E%2E%2Fetc",
    b"..%2f..%2f..%2fetc%2fpasswd",
    b"..%5c..%5cwindows",
    b"%252e%252e%252f",
    b"a%00b",
    b"%00",
    b"%C0%AE%C0%AE",
    b"%FF%FE",
    b"%E2%80%AE",
    b"x" * 10_000,
    b".%2e",
]


@pytest.mark.parametrize("ident", CLIMBING_IDS, ids=lambda b: b[:24].decode())
def test_ids_in_every_position_never_leave_the_data_dir(api: RunningApi, ident: bytes) -> None:
    write = b'{"user_input": "a", "agent_response": "b"}'
    raw_request(api, "POST", b"/v1/users/owner/assistants/bot/memories", [AUTH], write)
    before = entries(api.data_dir.parent)
    space = b"/v1/users/owner/assistants/bot/"
    for method, path, body in [
        ("POST", b"/v1/users/" + ident + b"/assistants/bot/memories", write),
        ("GET", b"/v1/users/" + ident + b"/assistants/bot/memories", b""),
        ("POST", b"/v1/users/owner/assistants/" + ident + b"/memories", write),
        ("DELETE", b"/v1/users/" + ident + b"/assistants/bot", b""),
        ("GET", b"/v1/users/owner/assistants/" + ident + b"/export", b""),
        ("GET", space + b"writes/" + ident, b""),
        ("GET", space + b"memories/" + ident, b""),
        ("DELETE", space + b"memories/" + ident, b""),
        ("GET", space + b"facts/" + ident + b"/history", b""),
        ("PATCH", space + b"facts/" + ident, b'{"text": "x"}'),
    ]:
        answer = raw_request(api, method, path, [AUTH], body)
        status = status_of(answer)
        assert 300 <= status < 500, (method, path[:80], answer[:300])
        if 300 <= status < 400:  # a trailing-slash redirect: to this server, same path family
            location = next(h for h in response_headers(answer) if h.lower().startswith(b"location:"))
            assert location.split(b":", 1)[1].strip().startswith((api.url.encode() + b"/v1/", b"/v1/")), (
                location
            )
    assert entries(api.data_dir.parent) == before


@pytest.mark.parametrize(
    "header",
    [
        b"X-Note: a\rSet-Cookie: x=1",
        b"X-Note: a\nSet-Cookie: x=1",
        b"X-Note: a\x00b",
        AUTH + b"\x00",
        AUTH + b"\rX-Injected: 1",
        b"Authorization: Bearer \r\n " + KEY.encode(),
        b"X Bad Name: 1",
    ],
    ids=["cr", "lf", "nul", "nul-in-key", "cr-in-key", "folded-key", "space-in-name"],
)
def test_control_bytes_in_request_headers_are_refused_before_the_app(api: RunningApi, header: bytes) -> None:
    answer = raw_request(api, "GET", b"/v1/users/owner/assistants/bot/memories", [header])
    assert 400 <= status_of(answer) < 500, answer[:300]
    assert not any(h.lower().startswith((b"set-cookie", b"x-injected")) for h in response_headers(answer))


@pytest.mark.parametrize(
    "path",
    [
        b"/v1/users/a%0d%0aSet-Cookie:%20x=1/assistants/bot/memories",
        b"/v1/users/owner/assistants/bot/memories/%0d%0aSet-Cookie:%20x=1/",
        b"/v1/users/owner/assistants/bot/writes/a%0aSet-Cookie:x/",
        b"/v1/users/owner/assistants/bot/memories/%2F%0d%0aLocation:%20http://evil/",
    ],
)
def test_cr_lf_in_a_path_never_becomes_a_response_header(api: RunningApi, path: bytes) -> None:
    for method in ("GET", "DELETE", "POST"):
        answer = raw_request(api, method, path, [AUTH], b"{}" if method == "POST" else b"")
        assert status_of(answer) < 500, answer[:300]
        names = [h.split(b":", 1)[0].strip().lower() for h in response_headers(answer)]
        assert b"set-cookie" not in names and names.count(b"location") <= 1, answer[:400]
        assert not any(b"evil" in h for h in response_headers(answer)), answer[:400]
