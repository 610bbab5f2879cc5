"""The engine alone, in one process: latency as stores grow, the scheduler, vector indexes, CPU run sizes,
store opening, the command's cold start, lifecycle costs and the space pool."""
