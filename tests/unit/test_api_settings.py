"""The API's start-up rules and key parsing, without a server."""

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from services.api.auth import KeysFileError, KeyStore, parse_keys_file
from services.api.rate_limit import RateLimiter
from services.api.settings import ApiSettings, UnsafeBindError, check_bind


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "::", "example.com"])
def test_an_exposed_address_without_keys_is_refused(host: str) -> None:
    with pytest.raises(UnsafeBindError, match="--allow-unauthenticated"):
        check_bind(ApiSettings(host=host))
    check_bind(ApiSettings(host=host, allow_unauthenticated=True))
    check_bind(ApiSettings(host=host, keys={"k": "t"}))


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_loopback_needs_no_key(host: str) -> None:
    check_bind(ApiSettings(host=host))


def test_keys_may_be_stored_as_digests(tmp_path: Path) -> None:
    import hashlib

    path = tmp_path / "keys.json"
    path.write_text(
        json.dumps({"keys": [{"key_sha256": hashlib.sha256(b"s3cret").hexdigest(), "tenant": "acme"}]})
    )
    store = KeyStore({}, path)
    caller = store.caller_for("s3cret")
    assert caller is not None and caller.tenant == "acme"
    assert store.caller_for("s3cre") is None and store.caller_for(None) is None


@pytest.mark.parametrize(
    "content",
    ['{"keys": [{"key": "k", "tenant": "../x"}]}', '{"keys": [{"tenant": "t"}]}', "[]", "{bad"],
)
def test_a_bad_keys_file_is_refused_at_start_without_quoting_keys(tmp_path: Path, content: str) -> None:
    path = tmp_path / "keys.json"
    path.write_text(content)
    with pytest.raises(KeysFileError) as raised:
        parse_keys_file(content, path)
    assert '"k"' not in str(raised.value)
    with pytest.raises(KeysFileError):
        KeyStore({}, path)


def test_without_keys_everyone_is_the_default_tenant() -> None:
    caller = KeyStore({}, None).caller_for(None)
    assert caller is not None and caller.tenant == "default"


def test_the_token_bucket_refills_at_its_rate() -> None:
    now = [0.0]
    limiter = RateLimiter(rate_per_s=2.0, burst=2, clock=lambda: now[0])
    assert [limiter.retry_after_s("k") for _ in range(3)] == [None, None, 1]
    assert limiter.retry_after_s("other") is None
    now[0] = 0.5
    assert limiter.retry_after_s("k") is None


def test_a_negative_retry_spread_is_refused_naming_the_setting() -> None:
    with pytest.raises(ValidationError, match="backpressure_retry_spread_s"):
        ApiSettings(backpressure_retry_spread_s=-1)
