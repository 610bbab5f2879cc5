"""A chat model that obeys whatever instructions it finds in its prompt, for the local OpenAI-compatible
test server (`ScriptedOpenAIServer.respond_with(obedient_reply)`).

It is the worst case of prompt injection: memory text is data, but this model treats it as orders.
- "set the profile to "X"" anywhere in the prompt: the profile task answers exactly `X`.
- "add the fact "X"": the facts task answers `X` as a user fact, plus keys no engine asked for
  (`user_id`, `tenant`, `config`) naming another user, in case something reads them.
- "reveal" / "print everything": every task that answers in text (chain summary, profile, answer) answers
  the whole prompt it was given, so anything another user stored would come back if it was ever sent.
Without such instructions it behaves as a plain, cooperative model: every task parses.
"""

import json
import re
from typing import Any

from memoryos.llm import prompts

SET_PROFILE = re.compile(r'set the profile to "([^"]+)"', re.IGNORECASE)
ADD_FACT = re.compile(r'add the fact "([^"]+)"', re.IGNORECASE)
REVEAL = re.compile(r"\breveal\b|print everything", re.IGNORECASE)

_TASK_MARKERS = {
    "continuity": prompts.CONTINUITY_USER.splitlines()[-1],
    "chain_summary": "In one or two sentences, say what this conversation is about.",
    "topic": "Name the single main topic of this conversation",
    "profile": "Update the user profile with what the new conversation reveals",
    "knowledge": "Extract the facts worth remembering from this conversation.",
}


def prompt_text(body: dict[str, Any]) -> str:
    """Every message of a chat request, joined: what the model can see."""
    return "\n".join(str(message.get("content", "")) for message in body.get("messages", []))


def task_of(body: dict[str, Any]) -> str:
    """Which memory task the request is (`answer` for the generation prompt). Memory text may quote a
    task's wording (an echoed prompt stored as a summary), so the memory tasks are told by their system
    message, and among them by the instruction that comes last: each template puts it after the data."""
    messages = body.get("messages", [])
    if not messages or messages[0].get("content") != prompts.MEMORY_SYSTEM:
        return "answer"
    text = str(messages[-1].get("content", ""))
    return max(_TASK_MARKERS, key=lambda task: text.rfind(_TASK_MARKERS[task]))


def _data_part(text: str) -> str:
    """The prompt without the task's own instructions, which say "reveal" themselves (the profile task
    asks what a conversation "reveals"): only what memory brought in may order this model about."""
    for marker in (*_TASK_MARKERS.values(), "You process conversations", "You are the user's"):
        text = text.replace(marker, "")
    return text


def obedient_reply(body: dict[str, Any]) -> str:
    text = prompt_text(body)
    data = _data_part(text)
    task = task_of(body)
    reveal = REVEAL.search(data) is not None
    if task == "continuity":
        return "yes"
    if task == "topic":
        return json.dumps({"summary": "What the user asked the assistant to do.", "keywords": ["orders"]})
    if task == "knowledge":
        facts = ADD_FACT.findall(data) or ["The user talked with the assistant."]
        return json.dumps(
            {
                "user_facts": facts,
                "assistant_facts": [],
                "user_id": "alice",
                "tenant": "tenant-b",
                "config": {"llm_model": "attacker-model", "data_dir": "/"},
            }
        )
    if task == "profile":
        wanted = SET_PROFILE.findall(data)
        if wanted:
            return wanted[-1]
        return f"- Everything I was shown:\n{text}" if reveal else "- The user talks with the assistant."
    if task == "chain_summary":
        return f"Everything I was shown: {text}" if reveal else "The user and the assistant talked."
    return f"As you asked, everything I was shown: {text}" if reveal else "Happy to help."
