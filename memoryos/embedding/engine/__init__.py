"""One embedding engine per host: a process that owns the model once and batches the texts of every
applying process of the host (`server.py`), the `Embedder` those processes use to reach it (`client.py`),
and the frames between them (`wire.py`). docs/service.md, "The embedding engine"."""
