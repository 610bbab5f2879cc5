"""`memoryos export` and `memoryos import`: a user's memory as a bundle file, and back (`memoryos/portability/bundles/`).

`import` also reads the reference MemoryOS's JSON files (`--from-reference DIR`, `memoryos/portability/reference_import.py`).
Both follow the other commands' conventions (`main.py`): flags checked before anything is read or written,
one `error:` line naming the flag or file, exit 2 for bad input (a damaged bundle, a space that already
has memory), 3 when there is no memory to export, 4 when another process has the space open. The engine
modules are imported inside the commands, so `memoryos --help` stays fast. A progress bar shows on a
terminal. With `--redis-url` the space is a deployment's: an rq job has its owner export or import it
(`services/jobs/request.py`), and the command waits for the job.
"""

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryos.cli.output import print_json
from memoryos.cli.session import config_of

if TYPE_CHECKING:  # the engine's modules load inside the commands: `memoryos --help` stays fast
    from memoryos.portability.bundles.format import BundleManifest

DEFAULT_ASSISTANT = "default_assistant_profile"


def cmd_export(args: argparse.Namespace) -> None:
    from memoryos.errors import InvalidInputError
    from memoryos.portability.bundles import export_space

    out = Path(args.out)
    if out.is_dir():
        raise InvalidInputError("--out", f"{out} is a directory; give the bundle's file name")
    if not out.parent.is_dir():
        raise InvalidInputError("--out", f"directory {out.parent} does not exist")
    if args.redis_url:
        from memoryos.cli.service_entry import service_entry

        service_entry("export-job")(args)
        return
    manifest = export_space(
        config_of(args), args.user, args.assistant, out, show_progress=sys.stderr.isatty()
    )
    print_json(exported(out, manifest))


def exported(out: Path, manifest: "BundleManifest") -> dict[str, Any]:
    """What `export` prints of the bundle it wrote, here or through a deployment's job."""
    return {
        "bundle": str(out),
        "format_version": manifest.format_version,
        "counts": manifest.counts(),
        "embedding_model": manifest.embedding.model,
        "embedding_dim": manifest.embedding.dim,
        "items_sha256": manifest.items_sha256,
    }


def cmd_import(args: argparse.Namespace) -> None:
    from memoryos.errors import InvalidInputError

    if args.redis_url:
        _import_through_jobs(args)
        return
    config = config_of(args)
    show_progress = sys.stderr.isatty()
    if args.from_reference is not None:
        if args.bundle is not None:
            raise InvalidInputError(
                "--from-reference", "give a bundle file or --from-reference DIR, not both"
            )
        from memoryos.portability.reference_import import import_reference

        report = import_reference(
            config,
            args.user,
            args.assistant,
            Path(args.from_reference),
            reference_user=args.reference_user,
            show_progress=show_progress,
        )
    else:
        if args.bundle is None:
            raise InvalidInputError(
                "FILE", "missing: give the bundle file to import, or --from-reference DIR"
            )
        if args.reference_user is not None:
            raise InvalidInputError("--reference-user", "goes with --from-reference only")
        from memoryos.portability.bundles import import_space

        report = import_space(
            config, args.user, args.assistant, Path(args.bundle), show_progress=show_progress
        )
    print_json(report.model_dump())


def _import_through_jobs(args: argparse.Namespace) -> None:
    from memoryos.cli.service_entry import service_entry
    from memoryos.errors import InvalidInputError
    from memoryos.portability.bundles.format import InvalidBundleError

    if args.from_reference is not None:
        raise InvalidInputError(
            "--from-reference",
            "not with --redis-url: import the reference's files locally, export a bundle, then import it",
        )
    if args.bundle is None:
        raise InvalidInputError("FILE", "missing: give the bundle file to import")
    bundle = Path(args.bundle)
    if not bundle.is_file():
        raise InvalidBundleError(bundle, "no such file")
    service_entry("import-job")(args, bundle)


def register(subparsers: Any) -> None:
    """Add `export` and `import` to the `memoryos` command's subparsers."""
    export = subparsers.add_parser(
        "export",
        help="write a user's memory to a bundle file",
        description="Write everything remembered about a user (with one assistant) to a versioned bundle "
        "file: a consistent snapshot, taken while other processes may keep using the space.",
    )
    _space_flags(export)
    export.add_argument("--out", required=True, help="the bundle file to write (replaced if it exists)")
    export.set_defaults(handler=cmd_export)

    imported = subparsers.add_parser(
        "import",
        help="load a bundle (or the reference MemoryOS's files) into a user's empty memory",
        description="Load a bundle written by `memoryos export` into an empty memory space (any user, "
        "assistant, tenant or data directory), re-embedding when the configured model differs; or, with "
        "--from-reference, one user of the reference MemoryOS (memoryos-pro). The bundle is verified "
        "whole first: a damaged one is refused with nothing written.",
    )
    _space_flags(imported)
    imported.add_argument("bundle", nargs="?", metavar="FILE", help="the bundle file")
    imported.add_argument(
        "--from-reference",
        metavar="DIR",
        default=None,
        help="the reference MemoryOS's data_storage_path (holding users/ and assistants/), or users/<id>",
    )
    imported.add_argument(
        "--reference-user", default=None, help="the user id in the reference's files (default: --user)"
    )
    imported.set_defaults(handler=cmd_import)


def _space_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--user", required=True, help="user id")
    parser.add_argument("--assistant", default=DEFAULT_ASSISTANT, help="assistant id")
    parser.add_argument(
        "--redis-url",
        default=None,
        help="a deployment's space: an rq job has the worker that owns it do this, and the command waits "
        "for the job (tenant: MEMORYOS_TENANT; docs/service.md)",
    )
