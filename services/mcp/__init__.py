"""The MCP server: MemoryOS as tools, resources and a prompt for agents (Claude Desktop, Cline, Cursor).

`memoryos mcp` serves it over stdio on the embedded engine (`stdio.py`); `mount_mcp` in `http_app.py` serves it
over streamable HTTP inside the API, behind the API's keys. The tools validate, pick the caller's space and
hand the work to `Memoryos`: no memory logic lives here. See docs/mcp.md.
"""
