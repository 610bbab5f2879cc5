"""A long-lived process with one space open, driven over stdin/stdout like a stdio MCP server.

`python -m tests.support.space_client DATA_DIR USER [--embedder hash|minilm]` opens the space and answers
one JSON line per command line: `{"op": "add", "user_input": ..., "agent_response": ...}` →
`{"page_id": N}`; `{"op": "retrieve", "query": ..., "top_k": k}` → `{"pages": [user inputs]}`;
`{"op": "forget"}` → `{"forgotten": true}` or `{"error": ...}`; `{"op": "close"}` closes and exits.
It prints `{"ready": pid}` once the space is open. Errors come back as `{"error": "Type: message"}`, so
a test sees them instead of a dead pipe.

Tests start several of these on one data directory to act as the local clients real users run side by
side (Claude Desktop's and Cursor's `memoryos mcp`, a `memoryos serve`).
"""

import argparse
import json
import os
import sys
from typing import Any

from memoryos import Memoryos
from memoryos.config import MemoryConfig


def _open(data_dir: str, user: str, embedder: str) -> Memoryos:
    config = MemoryConfig(data_dir=data_dir, short_term_capacity=5)
    if embedder == "minilm":
        return Memoryos.from_config(user, config)
    from tests.support.fakes import HashEmbedder

    return Memoryos.from_config(user, config, embedder=HashEmbedder())


def _answer(memory: Memoryos, command: dict[str, Any]) -> dict[str, Any]:
    match command["op"]:
        case "add":
            return {"page_id": memory.add_memory(command["user_input"], command["agent_response"])}
        case "retrieve":
            context = memory.retrieve(command["query"], top_k=command.get("top_k", 5))
            return {"pages": [p.user_input for p in context.retrieved_pages]}
        case "forget":
            memory.forget_user()
            return {"forgotten": True}
    raise ValueError(f"unknown op {command['op']!r}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("data_dir")
    parser.add_argument("user")
    parser.add_argument("--embedder", choices=["hash", "minilm"], default="hash")
    args = parser.parse_args()
    memory = _open(args.data_dir, args.user, args.embedder)
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if command["op"] == "close":
            break
        try:
            reply = _answer(memory, command)
        except Exception as error:
            reply = {"error": f"{type(error).__name__}: {error}"}
        print(json.dumps(reply), flush=True)
    memory.close()
    print(json.dumps({"closed": True}), flush=True)


if __name__ == "__main__":
    main()
