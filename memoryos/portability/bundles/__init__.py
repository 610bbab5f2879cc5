"""Export and import of memory spaces as bundles: the public entry points (`memoryos export` / `import`).

A bundle moves one user's memory between data directories, tenants or deployments, or keeps it as a
backup: `export_space` writes a versioned, self-describing file (`memoryos/portability/bundles/format.py`), `import_space`
verifies all of it and writes it into an empty space (`memoryos/portability/bundles/importer.py`), re-embedding when the
configured model differs. `memoryos/portability/reference_import.py` imports the reference MemoryOS's JSON files instead.
"""

from memoryos.portability.bundles.export import export_space
from memoryos.portability.bundles.format import FORMAT_VERSION, BundleManifest, InvalidBundleError
from memoryos.portability.bundles.importer import ImportReport, import_space
from memoryos.portability.bundles.target import SpaceNotEmptyError

__all__ = [
    "FORMAT_VERSION",
    "BundleManifest",
    "ImportReport",
    "InvalidBundleError",
    "SpaceNotEmptyError",
    "export_space",
    "import_space",
]
