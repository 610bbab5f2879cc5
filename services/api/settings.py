"""`ApiSettings`: every tunable of the HTTP API in one place, each default with its reason.

Read from keyword arguments, then `MEMORYOS_API_*` environment variables. The engine's own settings stay in
`MemoryConfig` (`MEMORYOS_*`): the API adds only what a network front end needs — where to listen, who may
call, and how much one caller may ask for.
"""

import ipaddress
import random
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

LOOPBACK_NAMES = frozenset({"localhost", "ip6-localhost", "ip6-loopback"})


class ApiSettings(BaseSettings):
    """Configuration of one API process."""

    model_config = SettingsConfigDict(env_prefix="MEMORYOS_API_", extra="forbid")

    host: str = Field("127.0.0.1", description="Bind address. Without API keys only loopback is allowed.")
    port: int = Field(8765, ge=0, le=65535, description="0: any free port (tests).")
    keys: dict[str, str] = Field(
        default_factory=dict,
        repr=False,
        description="API key -> tenant, for a fixed set of keys (env: a JSON object). Never logged.",
    )
    keys_file: Path | None = Field(
        None, description="JSON file of keys and tenants, re-read when it changes (rotation, revocation)."
    )
    keys_reload_interval_s: float = Field(
        1.0,
        ge=0,
        description="How often the keys file's mtime is checked: one stat per interval, not per call.",
    )
    allow_unauthenticated: bool = Field(
        False,
        description="Serve a non-loopback address with no key configured. Anyone who reaches the port "
        "then reads and writes every user's memory, so it must be asked for.",
    )
    max_body_bytes: int = Field(
        4 * 1024 * 1024,
        gt=0,
        description="Request bodies over this are refused with 413 before they are read whole.",
    )
    max_bundle_bytes: int = Field(
        512 * 1024 * 1024, gt=0, description="The import route's body limit: a bundle holds a whole space."
    )
    max_turns_per_batch: int = Field(
        256, gt=0, description="Turns in one batch write: one write is one transaction and one status."
    )
    rate_limit_per_s: float = Field(
        1000.0, ge=0, description="Requests per second per API key, sustained (0: no limit)."
    )
    rate_limit_burst: int = Field(2000, gt=0, description="Requests a key may send at once above the rate.")
    max_pending_pages: int = Field(
        50_000,
        gt=0,
        description="Acknowledged pages not yet embedded, over every open space, beyond which writes get "
        "429 + Retry-After: a client outrunning the embedder is slowed, the server's memory stays bounded.",
    )
    max_write_lag_s: float = Field(
        0.5,
        ge=0,
        description="Age of the oldest acknowledged write not yet searchable (Redis mode: not yet applied) "
        "beyond which writes get 429 + Retry-After (0: no bound). A read waits for the writes before it, so "
        "this bounds how long reads wait whatever the embedder's speed; the page bound alone lets a slow "
        "machine fall minutes behind (docs/reliability.md, Reads under load).",
    )
    backpressure_retry_after_s: int = Field(
        1, gt=0, description="Shortest Retry-After of a write refused by backpressure."
    )
    backpressure_retry_spread_s: int = Field(
        4,
        ge=0,
        description="Retry-After of a refused write is drawn evenly from backpressure_retry_after_s to that "
        "plus this, so the clients refused in one second do not all come back, and get refused, together "
        "(docs/reliability.md, 1,000 users x 50 turns).",
    )
    max_wait_for_writes_s: float = Field(
        30.0,
        gt=0,
        description="Longest `wait_timeout_s` (or `max_vector_wait_s`) a read may ask for while waiting on "
        "write ids (or on vectors).",
    )
    read_vector_wait_s: float = Field(
        0.5,
        ge=0,
        allow_inf_nan=False,
        description="How long a retrieve waits, unless it names its own `max_vector_wait_s`, for the vectors "
        "of the pages stored before it (the wait for its `wait_for_write_ids` counts against it); pages "
        "still without one are then ranked by their words and date alone and counted in the answer's "
        "`pages_without_vectors`. Bounds a read's latency under a backlog of writes (docs/api.md, "
        "Read-your-writes).",
    )
    memory_budget_mb: int = Field(
        1024, gt=0, description="Estimated resident memory of open spaces; least recently used close beyond."
    )
    max_open_spaces: int = Field(10_000, gt=0, description="Open spaces kept at most.")
    mmap_threshold_kb: int = Field(
        0,
        ge=0,
        le=32768,
        description="Embedded mode: glibc's mmap threshold fixed at start (services/allocator.py); 0, the "
        "default, keeps glibc's own: a fixed one did worse under the embedded write soak (docs/service.md, "
        "One worker, 10,000 spaces).",
    )
    allocator_trim_interval_s: float = Field(
        30.0,
        ge=0,
        description="Embedded mode: seconds between giving the C heap's free pages back to the system "
        "(services/allocator.py); 0: never. Without it RSS climbs while the space pool holds its budget "
        "(docs/reliability.md, Load).",
    )
    preload_model: bool = Field(
        True, description="Load the embedding model at start-up, so /readyz means the first call is fast."
    )
    sampler_interval_s: float = Field(
        0.25,
        gt=0,
        description="How often the embedding backlog and write lag are measured (Redis mode: the shard "
        "streams' lag): well under `max_write_lag_s`, so the bound is enforced within a fraction of itself.",
    )

    @property
    def authenticated(self) -> bool:
        """Keys are required: some are configured, or a keys file is named (even empty: nobody gets in)."""
        return bool(self.keys) or self.keys_file is not None

    def backpressure_retry_after(self) -> int:
        """When a write refused by backpressure (embedding behind, or a full shard stream) should come back:
        spread over `backpressure_retry_spread_s`, so the clients refused in one second do not all return
        in the same next one."""
        return self.backpressure_retry_after_s + random.randint(0, self.backpressure_retry_spread_s)


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class UnsafeBindError(ValueError):
    """A non-loopback bind with no API key configured and no explicit `allow_unauthenticated`."""


def check_bind(settings: ApiSettings) -> None:
    """Refuse to expose unauthenticated memory to the network. Called before the socket is bound."""
    if settings.authenticated or settings.allow_unauthenticated or is_loopback(settings.host):
        return
    raise UnsafeBindError(
        f"--host {settings.host}: no API key is configured, so anyone reaching this address could read and "
        "write every user's memory; give --keys-file (or MEMORYOS_API_KEYS), bind 127.0.0.1, or pass "
        "--allow-unauthenticated"
    )


PLACEHOLDER_API_KEY = "change-me-to-a-long-random-key"
"""The key `.env.api.example` and `deploy/base/api-keys.example.json` ship: a deployment copying either as it
is would be open to anyone."""
MIN_API_KEY_LENGTH = 16
"""Shorter keys are guessable; `secrets.token_urlsafe(32)` gives 43 characters."""
MAKE_A_KEY = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"


class WeakApiKeyError(ValueError):
    """A configured key that is the shipped placeholder or too short to be secret."""


def weak_key_problem(key: str) -> str | None:
    """What makes `key` guessable (the examples' placeholder, or too short), said without quoting it, or
    None. One rule for every place a key comes from: MEMORYOS_API_KEYS and the keys file."""
    if key == PLACEHOLDER_API_KEY:
        return "holds the examples' placeholder key"
    if len(key) < MIN_API_KEY_LENGTH:
        return f"holds a key of {len(key)} characters (at least {MIN_API_KEY_LENGTH})"
    return None


def check_keys(settings: ApiSettings) -> None:
    """Refuse to start with a key anyone could guess. Names the setting, never the key."""
    for key in settings.keys:
        problem = weak_key_problem(key)
        if problem is not None:
            raise WeakApiKeyError(f"MEMORYOS_API_KEYS {problem}: set long random keys ({MAKE_A_KEY})")
