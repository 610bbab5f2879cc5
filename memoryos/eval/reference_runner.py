"""Run the reference MemoryOS (PyPI `memoryos-pro`) on LoCoMo pairs; executed by *its* interpreter.

Usage: `<reference python> -I reference_runner.py JOB.json RESULT.json`. The job names the pairs, the
questions, an OpenAI-compatible endpoint for the reference's LLM calls, and a local sentence-transformers
model directory for its embeddings; the result holds, per question, the pages the reference retrieved
(mid-term pages ranked by its score, and its short-term pages, which it always puts in the prompt),
plus add_memory and retrieval latencies.

This file is not part of our package's import graph: it runs where only `memoryos-pro` is installed (whose
top-level package is also called `memoryos`), so it imports nothing of ours and only the standard
library besides the reference, and keeps to syntax old Python versions accept. The reference prints on
every call; its output goes to this process's stdout, which the caller discards.
"""

import json
import os
import sys
import time

# Run as a script, this file's folder (our memoryos/eval) would shadow top-level modules such as the
# reference's own; `-I` removes it on Python 3.11+, this on older versions.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

REFERENCE_EMBEDDING_NAME = "all-MiniLM-L6-v2"
"""The model name the reference passes to its embedding cache by default."""


def _page(page):
    return {"user_input": page.get("user_input", ""), "agent_response": page.get("agent_response", "")}


def main(job_path, result_path):
    with open(job_path, encoding="utf-8") as handle:
        job = json.load(handle)

    from importlib.metadata import version

    from sentence_transformers import SentenceTransformer

    from memoryos import utils
    from memoryos.memoryos import Memoryos

    # The reference loads `SentenceTransformer("all-MiniLM-L6-v2")` from the Hub on first use; the cache
    # entry makes it use the local weights instead.
    utils._model_cache[REFERENCE_EMBEDDING_NAME] = SentenceTransformer(job["embedding_model_path"])
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
    }
    with open(result_path, "w", encoding="utf-8") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
