"""Run the reference MemoryOS (PyPI `memoryos-pro`) on LoCoMo pairs; executed by *its* interpreter.

Usage: `<reference python> -I reference_runner.py JOB.json RESULT.json`. The job names the pairs, the
questions, an OpenAI-compatible endpoint for the reference's LLM calls, and a local sentence-transformers
model directory for its embeddings; the result holds, per question, the pages the reference retrieved
(mid-term pages ranked by its score, and its short-term pages, which it always puts in the prompt),
plus add_memory and retrieval latencies and its LLM calls while ingesting and while retrieving.

This file is not part of our package's import graph: it runs where only `memoryos-pro` is installed (whose
top-level package is also called `memoryos`), so it imports nothing of ours and only the standard
library besides the reference, and keeps to syntax old Python versions accept. The reference prints on
every call; its output goes to this process's stdout, which the caller discards.
"""

import json
import os
import sys
import threading
import time

# Run as a script, this file's folder (our memoryos/eval) would shadow top-level modules such as the
# reference's own; `-I` removes it on Python 3.11+, this on older versions.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

REFERENCE_EMBEDDING_NAME = "all-MiniLM-L6-v2"
"""The model name the reference passes to its embedding cache by default."""


def _page(page):
    return {"user_input": page.get("user_input", ""), "agent_response": page.get("agent_response", "")}


PHASES = ("ingest", "questions")


class _CallCounter:
    """Counts the reference's LLM calls and the characters sent and received, per phase; its client
    drops the usage the server reports, so tokens are estimated from characters by the caller."""

    def __init__(self):
        self.phase = "ingest"
        self.usage = {phase: {"calls": 0, "prompt_chars": 0, "completion_chars": 0} for phase in PHASES}
        self._lock = threading.Lock()

    def wrap(self, chat_completion):
        def counted(client, model, messages, *args, **kwargs):
            reply = chat_completion(client, model, messages, *args, **kwargs)
            with self._lock:
                entry = self.usage[self.phase]
                entry["calls"] += 1
                entry["prompt_chars"] += sum(len(str(m.get("content", ""))) for m in messages)
                entry["completion_chars"] += len(reply or "")
            return reply

        return counted


def main(job_path, result_path):
    with open(job_path, encoding="utf-8") as handle:
        job = json.load(handle)

    from importlib import import_module
    from importlib.metadata import version

    from sentence_transformers import SentenceTransformer

    # Imported by name: in this interpreter `memoryos` is the reference, which type checkers of our
    # repository would otherwise take for ours.
    utils = import_module("memoryos.utils")
    Memoryos = import_module("memoryos.facade.memoryos").Memoryos

    # The reference loads `SentenceTransformer("all-MiniLM-L6-v2")` from the Hub on first use; the cache
    # entry makes it use the local weights instead.
    utils._model_cache[REFERENCE_EMBEDDING_NAME] = SentenceTransformer(job["embedding_model_path"])
    counter = _CallCounter()
    utils.OpenAIClient.chat_completion = counter.wrap(utils.OpenAIClient.chat_completion)
    memory = Memoryos(
        user_id=job["user_id"],
        openai_api_key="stub-key",
        data_storage_path=job["data_dir"],
        openai_base_url=job["llm_base_url"],
        short_term_capacity=job["short_term_capacity"],
        retrieval_queue_capacity=job["top_k"],
        llm_model=job["llm_model"],
    )
    add_ms = []
    for pair in job["pairs"]:
        started = time.perf_counter()
        memory.add_memory(pair["user_input"], pair["agent_response"], timestamp=pair["timestamp"])
        add_ms.append((time.perf_counter() - started) * 1000)
    counter.phase = "questions"
    answers = []
    retrieve_ms = []
    for question in job["questions"]:
        started = time.perf_counter()
        context = memory.retriever.retrieve_context(user_query=question, user_id=job["user_id"])
        short_term = memory.short_term_memory.get_all()
        retrieve_ms.append((time.perf_counter() - started) * 1000)
        answers.append(
            {
                "retrieved": [_page(page) for page in context["retrieved_pages"]],
                "short_term": [_page(page) for page in short_term],
            }
        )
    result = {
        "version": version("memoryos-pro"),
        "answers": answers,
        "add_ms": add_ms,
        "retrieve_ms": retrieve_ms,
        "llm_usage": counter.usage,
    }
    with open(result_path, "w", encoding="utf-8") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
