"""The memory spaces the front ends (`api/`, `mcp/`) serve, whichever mode serves them: the `Spaces`
protocol, the owner calls it runs, the embedded implementation (the engine in this process) and the queued
one (Redis and the workers that own the spaces) side by side, and the one table of how their errors are
answered."""
