"""Memory moving between files, systems and models: bundles, the reference system's import, reindex.

`bundles/` is the bundle: its `__init__.py` is the public entry (`memoryos export` / `import`) over
`format.py` (what a bundle holds), `export.py`, `read.py`, `target.py` and `importer.py`;
`reference_format.py` and `reference_import.py` read the reference MemoryOS's files for one user;
`reindex.py` re-embeds a space with another embedding model.
"""
