"""The `memory_turn` prompt: how a client uses memory in one turn — recall, answer, remember.

Clients that show prompts (Claude Desktop's prompt picker, Cursor) insert it as the user's turn; an agent
framework can read it once to learn the loop. It names the tools and fields the server really has, so it
doubles as their usage example.
"""

from typing import Annotated

from mcp.server.mcpserver import MCPServer
from pydantic import Field

TEMPLATE = """\
You have long-term memory of this user through the MemoryOS tools. For this turn:

1. Call `retrieve_memory` with query set to the user's message below{user_hint}. Read from its result:
   - `user_profile` and `retrieved_user_knowledge`: who the user is, what they like, facts they told you;
   - `short_term_memory`: the latest exchanges, oldest first;
   - `retrieved_pages`: older exchanges about this topic, each with its time and `meta_info` (the summary
     of the conversation it belongs to);
   - `retrieved_assistant_knowledge`: what you yourself said or know about this user.
2. Answer the user. Use what memory says when it is relevant and do not invent memories it does not hold.
   Relationship with the user: {relationship}.{style}
3. Call `add_memory` with user_input set to the user's message and agent_response set to your answer,
   so the next turn remembers this one{user_hint}.

If the user asks what you remember, call `get_user_profile`. If they ask you to forget something, find
its `page_id` or `entry_id` in a result and call `delete_memory` or `delete_fact`; to forget them entirely,
call `forget_user` with confirm true — only when they ask for it.

The user's message:
{user_message}
"""


def memory_turn_text(
    user_message: str,
    relationship_with_user: str = "friend",
    style_hint: str = "",
    user_id: str | None = None,
) -> str:
    return TEMPLATE.format(
        user_message=user_message,
        relationship=relationship_with_user or "friend",
        style=f" Style: {style_hint}." if style_hint else "",
        user_hint=f" and user_id {user_id!r}" if user_id else "",
    )


def register_prompts(server: MCPServer) -> None:
    """Add the `memory_turn` prompt to `server`."""

    @server.prompt(title="Answer with memory")
    def memory_turn(
        user_message: Annotated[str, Field(description="The user's message this turn.")],
        relationship_with_user: Annotated[
            str, Field(description="How the assistant relates to the user (friend, coach, ...).")
        ] = "friend",
        style_hint: Annotated[str, Field(description="Style of the answer (brief, warm, ...).")] = "",
        user_id: Annotated[
            str | None, Field(description="Whose memory, if not the server's default.")
        ] = None,
    ) -> str:
        """Recall what is relevant, answer with it, then remember the exchange."""
        return memory_turn_text(user_message, relationship_with_user, style_hint, user_id)
