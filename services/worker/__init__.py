"""The worker process: owns shards of spaces through Redis leases, applies their queued writes with the
engine, and answers their reads. One per GPU (or per CPU box); the engine's scheduler in it batches the
embeddings and LLM calls of every space it holds."""
