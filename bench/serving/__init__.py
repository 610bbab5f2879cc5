"""The service as deployed: the HTTP API and its event loop, the worker's ingest (`memoryos worker`
processes against Redis), soaks, fault loops, hostile input, MCP, many spaces per worker, migrations."""
