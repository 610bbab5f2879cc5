"""`BundleReader`: a bundle file opened, its manifest checked, and every member verified before an import.

A bundle is untrusted input until `verify` has read all of it: each member's bytes against the SHA-256 the
manifest gives (and the whole against `items_sha256`), each line against its item schema, ids in strictly
ascending order (so unique), vectors of the manifest's dimension and finite, and every reference (a page's
segment and chain, a fact's successor, a fact source's fact) to an item the bundle holds. The import writes
only after that, so a damaged, truncated, altered or inconsistent bundle is refused with nothing written.
The import's own pass (`items`) checks the checksums again, so a file changed between the two passes
cannot slip through either.
"""

import hashlib
import json
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from tqdm import tqdm

from memoryos.portability.bundles.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST_MEMBER,
    MEMBERS,
    MEMBERS_BY_NAME,
    BundleItem,
    BundleManifest,
    ChainItem,
    InvalidBundleError,
    KnowledgeItem,
    KnowledgeSourceItem,
    Member,
    PageItem,
    SegmentItem,
    vector_from_text,
)

_MANIFEST_MAX_BYTES = 1 << 20
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError, ValueError)
"""What reading a damaged zip member raises (a bad CRC, a broken deflate stream, a cut-off file)."""


def _one_line(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in item['loc'])}: {item['msg']}" for item in error.errors()
    )


class BundleReader:
    """An open bundle. Opening reads and checks the manifest only; `verify` reads everything."""

    def __init__(self, path: Path) -> None:
        """Raises `InvalidBundleError` for a missing file, a file that is not a zip archive (or is
        truncated), a manifest that is missing or malformed, of another format or a newer version, or
        that does not list exactly this version's members."""
        self.path = path
        try:
            self._zip = zipfile.ZipFile(path)
        except FileNotFoundError:
            raise self._error("no such file") from None
        except IsADirectoryError:
            raise self._error("is a directory, not a bundle file") from None
        except (zipfile.BadZipFile, OSError, EOFError) as error:
            raise self._error(f"not a MemoryOS bundle: not a zip archive, or truncated ({error})") from None
        try:
            self.manifest = self._read_manifest()
        except BaseException:
            self._zip.close()
            raise

    def __enter__(self) -> "BundleReader":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._zip.close()

    def _error(self, message: str) -> InvalidBundleError:
        return InvalidBundleError(self.path, message)

    def _read_manifest(self) -> BundleManifest:
        try:
            info = self._zip.getinfo(MANIFEST_MEMBER)
        except KeyError:
            raise self._error(f"not a MemoryOS bundle: it has no {MANIFEST_MEMBER}") from None
        if info.file_size > _MANIFEST_MAX_BYTES:
            raise self._error(f"{MANIFEST_MEMBER} is {info.file_size} bytes: not a MemoryOS manifest")
        try:
            data: Any = json.loads(self._zip.read(info))
        except json.JSONDecodeError as error:  # before _ZIP_ERRORS, which hold its base ValueError
            raise self._error(f"{MANIFEST_MEMBER} is not valid JSON ({error})") from None
        except _ZIP_ERRORS as error:
            raise self._error(f"{MANIFEST_MEMBER} is damaged ({error})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
            raise self._error(f"not a MemoryOS bundle: {MANIFEST_MEMBER} does not say format {FORMAT_NAME!r}")
        version = data.get("format_version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise self._error(
                f"{MANIFEST_MEMBER}: format_version must be a positive integer, got {version!r}"
            )
        if version > FORMAT_VERSION:
            raise self._error(
                f"bundle format version {version} is newer than this MemoryOS reads ({FORMAT_VERSION}): "
                "upgrade MemoryOS to import it"
            )
        try:
            manifest = BundleManifest.model_validate(data)
        except ValidationError as error:
            raise self._error(f"{MANIFEST_MEMBER}: {_one_line(error)}") from None
        expected = [member.name for member in MEMBERS]
        if list(manifest.members) != expected:
            raise self._error(
                f"{MANIFEST_MEMBER} lists members {list(manifest.members)}, expected {expected}"
            )
        names = set(self._zip.namelist())
        for member in MEMBERS:
            if member.file not in names:
                raise self._error(f"member {member.file} is missing (truncated or altered bundle)")
        return manifest

    # --- reading members ------------------------------------------------------------------------------
    def _scan(self, member: Member, whole: Any = None) -> Iterator[tuple[int, bytes]]:
        """(line number, raw line) of a member, hashed as read; after the last line its count, size and
        SHA-256 must be the manifest's."""
        expected = self.manifest.members[member.name]
        digest, count, size = hashlib.sha256(), 0, 0
        try:
            with self._zip.open(member.file) as stream:
                for raw in stream:
                    digest.update(raw)
                    if whole is not None:
                        whole.update(raw)
                    count, size = count + 1, size + len(raw)
                    yield count, raw
        except _ZIP_ERRORS as error:
            raise self._error(f"member {member.file} is damaged ({error})") from None
        if (count, size, digest.hexdigest()) != (expected.items, expected.bytes, expected.sha256):
            raise self._error(
                f"member {member.file} fails its SHA-256 checksum ({count} items, {size} bytes; the manifest "
                f"says {expected.items} items, {expected.bytes} bytes): the bundle is damaged or was altered"
            )

    def _parse(self, member: Member, number: int, raw: bytes) -> BundleItem:
        try:
            item = member.item.model_validate_json(raw)
            vector = getattr(item, "vector", None)
            if vector is not None:
                vector_from_text(vector, self.manifest.embedding.dim)
        except ValidationError as error:
            raise self._error(f"{member.file} line {number}: {_one_line(error)}") from None
        except ValueError as error:
            raise self._error(f"{member.file} line {number}: {error}") from None
        return item

    def items(self, name: str) -> Iterator[Any]:
        """The items of member `name`, in order, checksummed again as they are read (after `verify`)."""
        member = MEMBERS_BY_NAME[name]
        for number, raw in self._scan(member):
            yield self._parse(member, number, raw)

    # --- verification ---------------------------------------------------------------------------------
    def verify(self, show_progress: bool = False) -> None:
        """Read the whole bundle and check it; raises `InvalidBundleError` naming the first problem. A
        member that fails its checksum is reported as such even when the damage also broke a line."""
        references = _References()
        whole = hashlib.sha256()
        total = sum(self.manifest.counts().values())
        with tqdm(total=total, desc="verifying bundle", unit="item", disable=not show_progress) as progress:
            for member in MEMBERS:
                problem: InvalidBundleError | None = None
                previous: tuple[Any, ...] | None = None
                for number, raw in self._scan(member, whole):
                    progress.update()
                    if problem is not None:
                        continue  # read on: a checksum failure is the better explanation
                    try:
                        item = self._parse(member, number, raw)
                        key = tuple(getattr(item, column) for column in member.key)
                        if previous is not None and key <= previous:
                            raise self._error(
                                f"{member.file} line {number}: {', '.join(member.key)} {key} is not above the "
                                f"previous line's {previous} (items must be unique, in ascending order)"
                            )
                        previous = key
                        references.check(item, f"{member.file} line {number}")
                    except InvalidBundleError as error:
                        problem = error
                    except ValueError as error:
                        problem = self._error(str(error))
                if problem is not None:
                    raise problem
            try:
                references.check_pending()
            except ValueError as error:
                raise self._error(str(error)) from None
        if whole.hexdigest() != self.manifest.items_sha256:
            raise self._error(
                "the items fail the manifest's items_sha256: the bundle is damaged or was altered"
            )


class _References:
    """Ids seen so far, and references to check: members come in `MEMBERS` order, so chains and
    segments precede the pages that name them and facts precede their sources; a fact's successor may
    come later, so those are checked at the end."""

    def __init__(self) -> None:
        self.chains: set[int] = set()
        self.segments: set[int] = set()
        self.facts: set[int] = set()
        self.successors: dict[int, str] = {}

    def check(self, item: BundleItem, where: str) -> None:
        """Record `item`'s id, or raise `ValueError` for a reference to an item the bundle lacks."""
        if isinstance(item, ChainItem):
            self.chains.add(item.chain_id)
        elif isinstance(item, SegmentItem):
            self.segments.add(item.segment_id)
        elif isinstance(item, PageItem):
            if item.segment_id is not None and item.segment_id not in self.segments:
                raise ValueError(f"{where}: segment_id {item.segment_id} is not in segments.jsonl")
            if item.chain_id is not None and item.chain_id not in self.chains:
                raise ValueError(f"{where}: chain_id {item.chain_id} is not in chains.jsonl")
        elif isinstance(item, KnowledgeItem):
            self.facts.add(item.entry_id)
            if item.replaced_by is not None:
                self.successors.setdefault(item.replaced_by, where)
        elif isinstance(item, KnowledgeSourceItem) and item.entry_id not in self.facts:
            raise ValueError(f"{where}: entry_id {item.entry_id} is not in knowledge.jsonl")

    def check_pending(self) -> None:
        for entry_id, where in self.successors.items():
            if entry_id not in self.facts:
                raise ValueError(f"{where}: replaced_by {entry_id} is not in knowledge.jsonl")
