"""Record-store benchmarks: the PostgreSQL store beside the SQLite store (issue 56)."""
