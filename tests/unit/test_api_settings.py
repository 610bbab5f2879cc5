"""The API's start-up rules and key parsing, without a server."""

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from memoryos import MemoryConfig
from services.api.auth import KeysFileError, KeyStore, parse_keys_file
from services.api.rate_limit import RateLimiter
from services.api.settings import (
    PLACEHOLDER_API_KEY,
    ApiSettings,
    UnsafeBindError,
    WeakApiKeyError,
    check_bind,
    check_keys,
)
from services.spaces.embedded import EmbeddedSpaces


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "::", "example.com"])
def test_an_exposed_address_without_keys_is_refused(host: str) -> None:
    with pytest.raises(UnsafeBindError, match="--allow-unauthenticated"):
        check_bind(ApiSettings(host=host))
    check_bind(ApiSettings(host=host, allow_unauthenticated=True))
    check_bind(ApiSettings(host=host, keys={"k": "t"}))


@pytest.mark.parametrize("key", [PLACEHOLDER_API_KEY, "short-key", ""])
def test_the_placeholder_or_a_short_key_is_refused_at_start(key: str) -> None:
    """Naming the setting, never the key (it could be a real one, short)."""
    with pytest.raises(WeakApiKeyError, match=r"^MEMORYOS_API_KEYS ") as refused:
        check_keys(ApiSettings(keys={"a-long-enough-random-key": "acme", key: "globex"}))
    assert key not in str(refused.value) or not key
    check_keys(ApiSettings(keys={"a-long-enough-random-key": "acme"}))
    check_keys(ApiSettings())


def test_serve_with_the_example_s_key_stops_with_one_line(tmp_path: Path) -> None:
    """`memoryos serve` as compose starts it from an unedited .env.api.example: exit 2, one line."""
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        "MEMORYOS_API_KEYS": json.dumps({PLACEHOLDER_API_KEY: "default"}),
        "MEMORYOS_API_HOST": "0.0.0.0",
        "MEMORYOS_DATA_DIR": str(tmp_path),
    }
    code = "import sys; from memoryos.cli.main import main; sys.exit(main(['serve']))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "MEMORYOS_API_KEYS" in line and "placeholder" in line and PLACEHOLDER_API_KEY not in line


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


def test_pages_held_for_writes_past_the_lag_bound_are_refused_naming_both_settings(tmp_path: Path) -> None:
    """Pages giving way to a burst of writes for as long as the lag bound allows would have the bound
    refuse the burst's writes: the embedded API refuses that configuration at start."""
    holds_too_long = MemoryConfig(data_dir=tmp_path, embedding_yield_max_s=30)
    with pytest.raises(
        ValueError, match=r"MEMORYOS_EMBEDDING_YIELD_MAX_S \(30\).*MEMORYOS_API_MAX_WRITE_LAG_S \(30\)"
    ):
        EmbeddedSpaces(holds_too_long, ApiSettings(max_write_lag_s=30))
    for config, settings in [
        (holds_too_long, ApiSettings(max_write_lag_s=0)),  # no lag bound
        (holds_too_long.model_copy(update={"embedding_yield_ms": 0.0}), ApiSettings(max_write_lag_s=30)),
        (MemoryConfig(data_dir=tmp_path), ApiSettings()),  # the defaults fit together
    ]:
        EmbeddedSpaces(config, settings).close()
