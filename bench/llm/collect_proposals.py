"""Collect what a real model proposes for long-term memory, with the turns it came from, to label.

`tests/data/llm_proposals.json` measures the guards (`memoryos/planning/guards.py`) on replies of the
local model (`bench/llm/local_model.sh`), not on replies written to pass them. This asks the model the two
long-term tasks the planner asks, `extract_knowledge` and `update_profile`, over windows of consecutive
LoCoMo turns, the profile carried from window to window as consolidation carries it, and writes every
proposal unlabelled; labels and reasons are added by hand.

    python -m bench.llm.collect_proposals --base-url http://127.0.0.1:8088/v1 --slots 2 \\
        --conversations 2 --windows 8 --out /tmp/llm_proposals.raw.json
"""

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from memoryos.config import MemoryConfig
from memoryos.errors import LLMError
from memoryos.eval.locomo import LocomoConversation, LocomoPair, load_conversations
from memoryos.llm.openai_backend import OpenAILLM
from memoryos.types import Page

LOCOMO_DEV = Path("/work/shared/data/locomo/locomo_dev.json")


def window_pages(pairs: list[LocomoPair]) -> list[Page]:
    return [
        Page(
            page_id=pair.index + 1,
            user_input=pair.user_input,
            agent_response=pair.agent_response,
            timestamp=pair.timestamp,
        )
        for pair in pairs
    ]


def collect_conversation(
    llm: OpenAILLM, conversation: LocomoConversation, windows: int, size: int, pool: ThreadPoolExecutor
) -> dict[str, Any]:
    """Windows of `size` turns from the start of the conversation: facts of each window asked alongside the
    profile update (the planner asks both at once), the profile carried to the next window."""
    collected: list[dict[str, Any]] = []
    profile = ""
    for number in range(windows):
        pairs = conversation.pairs[number * size : (number + 1) * size]
        if not pairs:
            break
        pages = window_pages(pairs)
        facts = pool.submit(llm.extract_knowledge, pages)
        proposed = pool.submit(llm.update_profile, profile, pages)
        entry: dict[str, Any] = {
            "window": f"{conversation.sample_id}-w{number}",
            "turns": [
                {"timestamp": p.timestamp, "user": p.user_input, "assistant": p.agent_response} for p in pages
            ],
            "previous_profile": profile,
        }
        try:
            knowledge = facts.result()
            entry["user_facts"], entry["assistant_facts"] = knowledge.user_facts, knowledge.assistant_facts
        except LLMError as error:
            entry["facts_error"] = str(error)
        try:
            entry["proposed_profile"] = proposed.result()
            profile = entry["proposed_profile"]
        except LLMError as error:
            entry["profile_error"] = str(error)
        collected.append(entry)
        print(f"{entry['window']}: {len(entry.get('user_facts', []))} user facts", flush=True)
    return {"sample_id": conversation.sample_id, "windows": collected}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--slots", type=int, default=2, help="the server's slots: requests in flight")
    parser.add_argument("--conversations", type=int, default=2)
    parser.add_argument("--windows", type=int, default=8, help="windows per conversation")
    parser.add_argument("--size", type=int, default=6, help="turns per window")
    parser.add_argument("--locomo", type=Path, default=LOCOMO_DEV)
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=512,
        help="cap of the profile and facts replies: below the engine's 2048, since a looping reply at the "
        "2-5 tokens/s of a busy machine holds a slot for minutes (a reply cut there is kept as an error)",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    config = MemoryConfig(
        openai_base_url=args.base_url,
        llm_model="local",
        llm_timeout_s=900,
        llm_max_retries=0,
        llm_max_tokens_profile=args.max_tokens,
        llm_max_tokens_knowledge=args.max_tokens,
    )
    llm = OpenAILLM(config)
    started = time.monotonic()
    with ThreadPoolExecutor(args.slots) as pool:
        conversations = load_conversations(args.locomo)[: args.conversations]
        results = [collect_conversation(llm, c, args.windows, args.size, pool) for c in conversations]
    usage = {name: u.model_dump() for name, u in llm.usage.items()}
    args.out.write_text(
        json.dumps({"usage": usage, "wall_s": time.monotonic() - started, "conversations": results}, indent=1)
    )
    print(f"{args.out}: {time.monotonic() - started:.0f} s, usage {usage}")


if __name__ == "__main__":
    main()
