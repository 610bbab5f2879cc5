"""API keys over real HTTP: every route needs one, a key reaches only its tenant, the keys file is
re-read without a restart (rotation, revocation), and each key has a request rate. The keys file is held
to the environment keys' rules (issue 57), and a missing, empty or shapeless one stops `memoryos serve`
with one line naming the file and what to write there."""

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from services.api.auth import KeysFileError, KeyStore, parse_keys_file
from services.api.settings import PLACEHOLDER_API_KEY, ApiSettings, WeakApiKeyError, check_keys
from tests.integration.test_mcp_http import connect, ok
from tests.support.api_server import RunningApi, offline_config, running_api
from tests.support.fakes import HashEmbedder

pytestmark = pytest.mark.integration

KEY_A, KEY_B = "key-of-tenant-a-0123456789", "key-of-tenant-b-0123456789"


def write_keys(path: Path, keys: dict[str, str]) -> None:
    """Replace the keys file, with an mtime that surely differs from the previous one."""
    previous = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(json.dumps({"keys": [{"key": k, "tenant": t} for k, t in keys.items()]}))
    os.utime(path, ns=(previous + 10**9, previous + 10**9))


@pytest.fixture(scope="module")
def keys_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "keys.json"
    write_keys(path, {KEY_A: "tenant-a", KEY_B: "tenant-b"})
    return path


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, keys_file: Path) -> Iterator[RunningApi]:
    settings = ApiSettings(port=0, keys_file=keys_file, keys_reload_interval_s=0)
    config = offline_config(tmp_path_factory.mktemp("auth-data"))
    with running_api(settings, config, embedder=HashEmbedder()) as running:
        yield running


def as_key(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def space_routes(api: RunningApi) -> list[tuple[str, str]]:
    """(method, url) of every route under /v1, with its path parameters filled in."""
    found = []
    for template, operations in api.app.openapi()["paths"].items():
        if template.startswith("/v1"):
            path = template.format(user_id="maya", assistant_id="bot", page_id=1, entry_id=1, write_id="w1")
            found += [(method.upper(), api.url + path) for method in operations]
    return found


def test_every_route_refuses_a_missing_or_wrong_key(api: RunningApi) -> None:
    routes = space_routes(api)
    assert len(routes) >= 15
    for method, url in routes:
        for headers in ({}, as_key("not-a-key"), {"authorization": "Basic " + KEY_A}):
            answer = api.http.request(method, url, headers=headers, json={})
            assert answer.status_code == 401, (method, url, answer.text)
            assert answer.headers["www-authenticate"] == "Bearer"
            assert answer.json()["error"] == "unauthorized"


def test_the_schema_declares_the_bearer_key_exactly_where_one_is_needed(api: RunningApi) -> None:
    """Clients and /docs learn from the schema which calls need the key (`services/api/openapi.py`)."""
    schema = api.app.openapi()
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    for template, operations in schema["paths"].items():
        for method, operation in operations.items():
            expected = [{"HTTPBearer": []}] if template.startswith("/v1/") else None
            assert operation.get("security") == expected, (method, template)


def test_health_and_metrics_need_no_key(api: RunningApi) -> None:
    assert api.http.get(f"{api.url}/healthz").status_code == 200
    assert api.http.get(f"{api.url}/metrics").status_code == 200


def test_a_key_never_reaches_another_tenants_memory(api: RunningApi) -> None:
    space = api.space_url("maya")
    added = api.http.post(
        f"{space}/memories", headers=as_key(KEY_A), json={"user_input": "A secret", "agent_response": "ok"}
    )
    assert added.status_code == 201
    page_id = added.json()["page_id"]
    b = as_key(KEY_B)
    assert api.http.post(f"{space}/retrieve", headers=b, json={"query": "secret"}).status_code == 404
    assert api.http.get(f"{space}/memories", headers=b).status_code == 404
    assert api.http.get(f"{space}/memories/{page_id}", headers=b).status_code == 404
    assert api.http.delete(f"{space}/memories/{page_id}", headers=b).status_code == 404
    assert api.http.get(f"{space}/export", headers=b).status_code == 404
    assert api.http.delete(space, headers=b).status_code == 404
    # B writing "maya" makes B's own space; A's is untouched.
    api.http.post(f"{space}/memories", headers=b, json={"user_input": "B's note", "agent_response": "ok"})
    a_pages = api.http.get(f"{space}/memories", headers=as_key(KEY_A)).json()["pages"]
    assert [p["user_input"] for p in a_pages] == ["A secret"]
    assert (api.data_dir / "tenant-a" / "maya").is_dir() and (api.data_dir / "tenant-b" / "maya").is_dir()


def test_keys_rotate_and_revoke_without_restart(api: RunningApi, keys_file: Path) -> None:
    url = f"{api.space_url('rotator')}/memories"
    new_key = "rotated-key-for-tenant-a-987654"
    try:
        write_keys(keys_file, {new_key: "tenant-a", KEY_B: "tenant-b"})
        assert api.http.get(url, headers=as_key(KEY_A)).status_code == 401  # revoked
        assert api.http.get(url, headers=as_key(new_key)).status_code == 404  # valid: no such space yet
        keys_file.write_text("{not json")  # a broken file keeps the keys in force
        os.utime(keys_file, ns=(time.time_ns() + 5 * 10**9,) * 2)
        assert api.http.get(url, headers=as_key(new_key)).status_code == 404
    finally:
        write_keys(keys_file, {KEY_A: "tenant-a", KEY_B: "tenant-b"})
    assert api.http.get(url, headers=as_key(KEY_A)).status_code == 404


def test_requests_over_a_keys_rate_get_429_with_retry_after(tmp_path: Path) -> None:
    settings = ApiSettings(port=0, keys={KEY_A: "t"}, rate_limit_per_s=0.5, rate_limit_burst=2)
    with running_api(settings, offline_config(tmp_path), embedder=HashEmbedder()) as api:
        url = f"{api.space_url('maya')}/memories"
        codes = [api.http.get(url, headers=as_key(KEY_A)).status_code for _ in range(3)]
        assert codes == [404, 404, 429]
        limited = api.http.get(url, headers=as_key(KEY_A))
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
        assert limited.json()["error"] == "rate_limited"


def test_a_key_bound_to_one_user_reaches_that_user_only_over_rest_and_mcp(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    agent_key = "key-of-mayas-agent-0123456789"
    path.write_text(json.dumps({"keys": [{"key": agent_key, "tenant": "clinic", "user_id": "maya"}]}))
    settings = ApiSettings(port=0, keys_file=path)
    with running_api(settings, offline_config(tmp_path / "data"), embedder=HashEmbedder()) as api:
        maya = api.http.post(
            f"{api.space_url('maya')}/memories",
            json={"user_input": "I take insulin.", "agent_response": "Noted."},
            headers=as_key(agent_key),
        )
        assert maya.status_code == 201
        for method, url in space_routes(api):
            if "/users/maya/" not in url:
                continue  # not a space route (/v1/dead-letters: the key's own, scoped to maya)
            other = url.replace("/users/maya/", "/users/ola/")
            response = api.http.request(method, other, headers=as_key(agent_key), json={})
            assert response.status_code == 403, (method, other, response.text)
            assert response.json()["error"] == "forbidden"
        with ExitStack() as stack:
            session = connect(api, agent_key, stack)
            assert ok(session.tool("retrieve_memory", query="insulin"))["user_id"] == "maya"
            refused = session.tool("retrieve_memory", query="insulin", user_id="ola")
            assert refused.is_error
        assert not (tmp_path / "data" / "clinic" / "ola").exists()


def test_a_bound_key_names_a_valid_user(tmp_path: Path) -> None:
    bad = '{"keys": [{"key": "k", "tenant": "t", "user_id": "../x"}]}'
    with pytest.raises(KeysFileError, match=r"keys\[0\]\.user_id"):
        parse_keys_file(bad, tmp_path / "keys.json")


@pytest.mark.parametrize(
    ("key", "stored_as"),
    [
        ("x", "key"),
        ("fifteen-chars-x", "key"),
        (PLACEHOLDER_API_KEY, "key"),
        (PLACEHOLDER_API_KEY, "key_sha256"),
    ],
)
def test_the_keys_file_refuses_what_the_environment_refuses(tmp_path: Path, key: str, stored_as: str) -> None:
    """A 1-character key, one a character short, and the examples' placeholder (as the key or its
    digest): refused by the keys file with the phrase MEMORYOS_API_KEYS gets, naming the entry and never
    the key; a key of 16 characters passes both."""
    path = tmp_path / "keys.json"
    entry = {"key": key} if stored_as == "key" else {"key_sha256": hashlib.sha256(key.encode()).hexdigest()}
    text = json.dumps({"keys": [{"key": KEY_A, "tenant": "a"}, {**entry, "tenant": "b"}]})
    with pytest.raises(KeysFileError) as refused:
        parse_keys_file(text, path)
    with pytest.raises(WeakApiKeyError) as refused_in_env:
        check_keys(ApiSettings(keys={key: "b"}))
    phrase = str(refused_in_env.value).removeprefix("MEMORYOS_API_KEYS ").partition(":")[0]
    assert str(refused.value).startswith(f"{path}: keys[1] {phrase}: "), str(refused.value)
    assert len(key) == 1 or key not in str(refused.value)
    path.write_text(text)
    with pytest.raises(KeysFileError):
        KeyStore({}, path)
    sixteen = "sixteen-chars-xx"
    check_keys(ApiSettings(keys={sixteen: "b"}))
    assert parse_keys_file(json.dumps({"keys": [{"key": sixteen, "tenant": "b"}]}), path)


def test_a_reload_with_a_weak_key_keeps_the_keys_in_force(tmp_path: Path) -> None:
    """A keys file edited to hold a 1-character key is refused as a file that no longer parses is: the
    previous keys stay in force (no client locked out), and the weak key opens nothing."""
    path = tmp_path / "keys.json"
    write_keys(path, {KEY_A: "tenant-a"})
    settings = ApiSettings(port=0, keys_file=path, keys_reload_interval_s=0)
    with running_api(settings, offline_config(tmp_path / "data"), embedder=HashEmbedder()) as api:
        url = f"{api.space_url('maya')}/memories"
        assert api.http.get(url, headers=as_key(KEY_A)).status_code == 404  # a valid key: no such space yet
        write_keys(path, {KEY_B: "tenant-b", "k": "tenant-b"})
        assert api.http.get(url, headers=as_key("k")).status_code == 401
        assert api.http.get(url, headers=as_key(KEY_B)).status_code == 401, "the whole file is refused"
        assert api.http.get(url, headers=as_key(KEY_A)).status_code == 404


@pytest.mark.parametrize(
    ("content", "problem"),
    [(None, "no such file or directory"), ("", "empty"), ("{}", "no list of keys"), ("  \n", "empty")],
    ids=["missing", "empty", "empty-object", "blank"],
)
def test_serve_without_usable_keys_stops_with_one_line(
    tmp_path: Path, content: str | None, problem: str
) -> None:
    """What a Kubernetes Secret with no keys file, or an empty one, gives the API: exit 2 and one line on
    stderr naming the file and the JSON to write there, no traceback."""
    path = tmp_path / "api-keys.json"
    if content is not None:
        path.write_text(content)
    env = {**os.environ, "MEMORYOS_API_KEYS_FILE": str(path), "MEMORYOS_DATA_DIR": str(tmp_path / "data")}
    code = "import sys; from memoryos.cli.main import main; sys.exit(main(sys.argv[1:]))"
    argv = [sys.executable, "-c", code, "serve", "--host", "0.0.0.0", "--redis-url", "redis://127.0.0.1:1/0"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: {path}: {problem}; write ") and '{"keys": [{"key": ' in line, line
