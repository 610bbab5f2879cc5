"""API keys: Bearer tokens mapped to tenants, from settings or a keys file re-read when it changes.

The keys file is JSON:

    {"keys": [{"key": "mk_live_...", "tenant": "acme"},
              {"key_sha256": "<hex digest of a key>", "tenant": "globex", "name": "ci"},
              {"key": "mk_agent_...", "tenant": "acme", "user_id": "maya"}]}

A key may be stored as its SHA-256 digest only, so the file need not hold secrets. A key in the file is held
to the rule of `MEMORYOS_API_KEYS` (`weak_key_problem`: not the examples' placeholder, 16 characters or
more), and a file that is missing, empty or not this shape stops the API at start with one line naming
the file and what to put there. A key with a `user_id`
is bound to that user: it reaches that user's spaces only (REST answers 403 for any other user, MCP
calls are refused), so an agent holding it cannot be talked into reading someone else's memory. Rotation: add the new
key, deploy it to clients, remove the old one; revocation: remove it. The file is checked (one `stat`) at
most every `keys_reload_interval_s` and re-read when its mtime, size or inode changed; a file that no
longer parses keeps the previous keys and logs why (never a key): a typo must not lock every client out.

A presented token is hashed and compared with every stored digest by `hmac.compare_digest`, without
stopping at the first match, so the time taken says nothing about which key, or how much of one, matched.
Tokens are never logged; a failed attempt logs only that it failed.
"""

import hashlib
import hmac
import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from memoryos.validation import validate_id
from services.api.settings import MAKE_A_KEY, PLACEHOLDER_API_KEY, weak_key_problem

log = logging.getLogger(__name__)

DEFAULT_TENANT = "default"
"""The tenant of every call when no key is configured (single-tenant, loopback)."""


@dataclass(frozen=True)
class KeyOwner:
    """Whose a key is: a tenant, and for a key bound to one user, that user."""

    tenant: str
    user_id: str | None = None


@dataclass(frozen=True)
class Caller:
    """Who is calling: the tenant whose memory the request may touch, an opaque id of the key (its
    digest's first 12 hex digits) for rate limits and logs, and the one user a bound key may reach."""

    tenant: str
    key_id: str
    user_id: str | None = None


ANONYMOUS = Caller(DEFAULT_TENANT, "anonymous")
"""Every caller of a server with no keys configured (single tenant)."""


class KeysFileError(ValueError):
    """The keys file cannot be read or is not the documented JSON; the message never quotes a key."""


KEYS_FILE_SHAPE = (
    '{"keys": [{"key": "<a random key of 16+ characters>", "tenant": "<tenant>"}, ...]} '
    f"(a key: {MAKE_A_KEY}; docs/deploy.md, Secrets)"
)
"""What a keys file holds, for the message that says one is missing, empty or of another shape."""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


PLACEHOLDER_DIGEST = _digest(PLACEHOLDER_API_KEY)
"""The placeholder's digest: refused as `key_sha256` too, as the key itself is."""


def parse_keys_file(text: str, path: Path) -> dict[bytes, KeyOwner]:
    """Digest -> owner from the keys file's JSON; `KeysFileError` naming the entry at fault."""
    if not text.strip():
        raise KeysFileError(f"{path}: empty; write {KEYS_FILE_SHAPE}")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise KeysFileError(f"{path}: not JSON ({error.msg}, line {error.lineno})") from None
    entries = data.get("keys") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise KeysFileError(f"{path}: no list of keys; write {KEYS_FILE_SHAPE}")
    found: dict[bytes, KeyOwner] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise KeysFileError(f"{path}: keys[{i}] is not an object")
        try:
            tenant = validate_id(f"keys[{i}].tenant", entry.get("tenant"))
            bound = entry.get("user_id")
            owner = KeyOwner(tenant, None if bound is None else validate_id(f"keys[{i}].user_id", bound))
        except ValueError as error:
            raise KeysFileError(f"{path}: {error}") from None
        if isinstance(entry.get("key"), str) and entry["key"]:
            problem = weak_key_problem(entry["key"])
            digest = _digest(entry["key"])
        elif isinstance(entry.get("key_sha256"), str):
            try:
                digest = bytes.fromhex(entry["key_sha256"])
            except ValueError:
                digest = b""
            if len(digest) != 32:
                raise KeysFileError(f"{path}: keys[{i}].key_sha256 is not 64 hex digits")
            problem = weak_key_problem(PLACEHOLDER_API_KEY) if digest == PLACEHOLDER_DIGEST else None
        else:
            raise KeysFileError(f"{path}: keys[{i}] needs a non-empty 'key' or 'key_sha256'")
        if problem is not None:
            raise KeysFileError(f"{path}: keys[{i}] {problem}: set long random keys ({MAKE_A_KEY})")
        found[digest] = owner
    return found


class KeyStore:
    """The keys in force. Thread-safe; `caller_for(token)` is the only question it answers."""

    def __init__(
        self, keys: Mapping[str, str], keys_file: Path | None, reload_interval_s: float = 1.0
    ) -> None:
        """`keys`: key -> tenant from settings; `keys_file`: re-read when it changes. With neither, every
        call is the default tenant's (`required` is False)."""
        self._fixed = {
            _digest(key): KeyOwner(validate_id("keys.tenant", tenant)) for key, tenant in keys.items()
        }
        self._file = keys_file
        self._interval_s = reload_interval_s
        self._lock = threading.Lock()
        self._from_file: dict[bytes, KeyOwner] = {}
        self._file_stamp: tuple[int, int, int] | None = None
        self._checked_at = -float("inf")
        if keys_file is not None:
            self._reload(initial=True)

    @property
    def required(self) -> bool:
        return bool(self._fixed) or self._file is not None

    def caller_for(self, token: str | None) -> Caller | None:
        """The caller a Bearer token authenticates, or None. Without keys configured, everyone is the
        default tenant."""
        if not self.required:
            return ANONYMOUS
        if not token:
            return None
        self._maybe_reload()
        presented = _digest(token)
        found: KeyOwner | None = None
        with self._lock:
            candidates = list(self._fixed.items()) + list(self._from_file.items())
        for digest, owner in candidates:  # every digest compared: no early exit
            if hmac.compare_digest(presented, digest):
                found = owner
        return None if found is None else Caller(found.tenant, presented.hex()[:12], found.user_id)

    def _maybe_reload(self) -> None:
        if self._file is None:
            return
        now = time.monotonic()
        with self._lock:
            if now - self._checked_at < self._interval_s:
                return
            self._checked_at = now
        self._reload(initial=False)

    def _reload(self, *, initial: bool) -> None:
        assert self._file is not None
        try:
            info = os.stat(self._file)
            stamp = (info.st_mtime_ns, info.st_size, info.st_ino)
            if stamp == self._file_stamp:
                return
            keys = parse_keys_file(self._file.read_text(encoding="utf-8"), self._file)
        except OSError as error:
            self._refuse(
                f"{self._file}: {(error.strerror or str(error)).lower()}; write {KEYS_FILE_SHAPE}", initial
            )
            return
        except UnicodeDecodeError:
            self._refuse(f"{self._file}: not UTF-8 text; write {KEYS_FILE_SHAPE}", initial)
            return
        except KeysFileError as error:
            self._refuse(str(error), initial)
            return
        with self._lock:
            self._from_file, self._file_stamp = keys, stamp
        tenants = {owner.tenant for owner in keys.values()}
        log.info("keys file loaded", extra={"keys": len(keys), "tenants": len(tenants)})
        if not keys:
            log.warning(
                "keys file %s lists no key: every call is refused (401) until one is added", self._file
            )

    @staticmethod
    def _refuse(reason: str, initial: bool) -> None:
        """A keys file that cannot be used: at start, the API does not start (`KeysFileError`, one line
        with the file and what to write there); later, the previous keys stay in force, so a typo
        locks no client out."""
        if initial:
            raise KeysFileError(reason)
        log.error("keys file not reloaded; the previous keys stay in force (%s)", reason)
