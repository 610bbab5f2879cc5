"""The interactive chat loop behind `memoryos chat`, independent of the terminal.

`chat_loop` reads a line with `read_line(prompt)` (`input` in the CLI) and writes each reply with
`write(text)` (`print`), so tests drive it with scripted lines. Every message goes through
`Memoryos.get_response`: it is answered from memory, then remembered. With the offline backend a statement
is acknowledged as remembered and a question is answered from what the user said
(`memoryos/llm/offline/backend.py`).

Ctrl-C is the caller's to handle: `KeyboardInterrupt` propagates out of `read_line` or `get_response`.
"""

from collections.abc import Callable
from typing import TYPE_CHECKING

from memoryos.errors import InvalidInputError, LLMError

if TYPE_CHECKING:  # the loop only calls methods: importing it costs the CLI nothing
    from memoryos.facade.memoryos import Memoryos

PROMPT = "you> "
NO_PROFILE = "(no profile yet)"
HELP = """Type a message and press Enter: statements are remembered, questions are answered from memory.
  /profile   show what memory holds about you (the profile built from past conversations)
  /help      show this help
  /quit      end the chat (so do Ctrl-D and /exit)
An empty line does nothing. Everything you say is remembered across runs."""


def greeting(memory: "Memoryos") -> str:
    return (
        f"Chatting as {memory.user_id}; memory in {memory.space.directory}. "
        "/help for commands, /quit or Ctrl-D to end."
    )


def chat_loop(memory: "Memoryos", read_line: Callable[[str], str], write: Callable[[str], None]) -> None:
    """Greet, then answer each line until `/quit`, `/exit` or end of input (`EOFError` from `read_line`).

    `/profile` writes the user profile (or "(no profile yet)"), `/help` the commands; an empty line just
    prompts again; any other line is answered as `assistant: <reply>`. A message memory refuses (too
    long) or an LLM failure is written as `error: ...` and the chat goes on: nothing was stored for it.
    """
    write(greeting(memory))
    while True:
        try:
            line = read_line(PROMPT)
        except EOFError:
            write("")  # end the prompt's line, so the shell's prompt starts on its own
            return
        text = line.strip()
        if not text:
            continue
        if text.startswith("/"):
            command = text.split()[0].casefold()
            if command in ("/quit", "/exit"):
                return
            if command == "/profile":
                write(memory.get_user_profile_summary().strip() or NO_PROFILE)
            elif command == "/help":
                write(HELP)
            else:
                write(f"unknown command {command}; /help lists the commands")
            continue
        try:
            reply = memory.get_response(text)
        except (InvalidInputError, LLMError) as error:
            write(f"error: {error}")
            continue
        write(f"assistant: {reply}")
