"""`build_server`: the MemoryOS MCP server — tools, resources and the prompt — over a `MemoryAccess`.

The transport is the caller's: `stdio.py` runs it on the process's stdin/stdout, `http_app.py` mounts its
streamable HTTP app in the API. Building it loads no model: the embedder is created by the first call that
opens a space, so `initialize` is answered as soon as the process has imported the engine.
"""

from mcp.server.mcpserver import MCPServer

import memoryos
from services.mcp.access import MemoryAccess
from services.mcp.lifecycle_tools import register_lifecycle_tools
from services.mcp.prompts import register_prompts
from services.mcp.resources import register_resources
from services.mcp.tools import register_memory_tools

INSTRUCTIONS = """\
MemoryOS gives you long-term memory of the user across conversations. Each turn: call retrieve_memory
with the user's message before answering, and add_memory with the exchange after. get_user_profile shows
what is known about the user; delete_memory, delete_fact and forget_user act on it when the user asks.
The memory_turn prompt shows the loop."""


def build_server(access: MemoryAccess) -> MCPServer:
    """A server whose every call reaches the caller's spaces through `access`."""
    server: MCPServer = MCPServer(
        "memoryos",
        title="MemoryOS",
        instructions=INSTRUCTIONS,
        version=memoryos.__version__,
        log_level="WARNING",
    )
    register_memory_tools(server, access)
    register_lifecycle_tools(server, access)
    register_resources(server, access)
    register_prompts(server)
    return server
