"""Memory moving between files, systems and models: bundles, the reference system's import, reindex.

`bundle.py` is the public entry (`memoryos export` / `import`) over `bundle_format.py` (what a bundle
holds), `bundle_export.py`, `bundle_read.py`, `bundle_target.py` and `bundle_import.py`;
`reference_format.py` and `reference_import.py` read the reference MemoryOS's files for one user;
`reindex.py` re-embeds a space with another embedding model.
"""
