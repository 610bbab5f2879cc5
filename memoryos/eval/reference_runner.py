"""Run the reference MemoryOS (PyPI `memoryos-pro`) on LoCoMo pairs; executed by *its* interpreter.

Usage: `<reference python> -I reference_runner.py JOB.json RESULT.json`. The job names the pairs, the
questions, an OpenAI-compatible endpoint for the reference's LLM calls, and a local sentence-transformers
model directory for its embeddings; the result holds, per question, the pages the reference retrieved
(mid-term pages ranked by its score, and its short-term pages, which it always puts in the prompt),
plus add_memory and retrieval latencies and its LLM calls while ingesting and while retrieving.

Optional job keys, for the answer-quality bench (`bench/quality/answers.py`):
- `answer`: `{relationship, style_hint, meta_data, arms, fixed_prompt}`: each question goes through the
  reference's own `get_response` (its retrieval, its prompt, its answer call) instead of `retrieve_context`
  alone, once per arm in `arms`: "published" with its answer prompt as shipped, "fixed" with the prompt
  `answer_prompts` repairs (`fixed_prompt`: the format line its prompt announces and lacks, and the style
  line our prompt gives). The reply, the pages it was shown and each LLM call's tokens and finish reason are
  returned; the exchange is *not* stored back (its `add_memory` is blocked meanwhile), as our harness does
  not store questions either: later questions must find the conversation, not earlier questions.
- `prompts_only`: with `answer.fixed_prompt`, write `{"prompts": answer_prompts(...)}` and nothing else:
  the bench renders our memories into the reference's layout with them (its reverse swap).
- `temperature` / `max_tokens_cap`: every LLM call at this temperature and at most this many tokens (the
  reference asks for 0.7 and up to 2,000 tokens), so both systems run the same model the same way.
- `log_path`: a JSON-lines log of each pair added and each question answered, appended as they finish.
  A rerun with the same job and data directory skips what the log holds (the reference keeps its memory in
  files under `data_dir`), so a long run can stop and resume.

This file is not part of our package's import graph: it runs where only `memoryos-pro` is installed (whose
top-level package is also called `memoryos`), so it imports nothing of ours and only the standard
library besides the reference, and keeps to syntax Python 3.6+ accepts. The reference prints on
every call; its output goes to this process's stdout, which the caller discards.
"""

import json
import os
import sys
import threading
import time
from typing import Any

# Run as a script, this file's folder (our memoryos/eval) would shadow top-level modules such as the
# reference's own; `-I` removes it on Python 3.11+, this on older versions.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

REFERENCE_EMBEDDING_NAME = "all-MiniLM-L6-v2"
"""The model name the reference passes to its embedding cache by default."""

REFERENCE_LLM_ERROR = "Error: Could not get response from LLM."
"""What the reference's client returns instead of raising when a call fails (kept as it is)."""


def _page(page):
    return {"user_input": page.get("user_input", ""), "agent_response": page.get("agent_response", "")}


PHASES = ("ingest", "questions")


class _CallCounter:
    """Counts the reference's LLM calls, the characters sent and received, and the tokens the server
    reports, per phase. Its client drops the server's usage, so the counted call reads it from the
    response itself (a server that sends none leaves the caller to estimate tokens from characters)."""

    def __init__(self, temperature, max_tokens_cap):
        self.phase = "ingest"
        self.temperature = temperature
        self.max_tokens_cap = max_tokens_cap
        self.usage = {phase: self._empty() for phase in PHASES}
        self.calls = []
        """Each call's tokens and finish reason, in order: a question's calls are the slice it added."""
        self._lock = threading.Lock()

    @staticmethod
    def _empty():
        return {
            "calls": 0,
            "prompt_chars": 0,
            "completion_chars": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "cut_at_cap": 0,
            "errors": 0,
        }

    def wrap(self, clean_output):
        """A replacement for `OpenAIClient.chat_completion`: the same request and cleaning as the
        reference's own, with the job's temperature and cap applied and the usage kept."""
        counter = self

        def counted(client, model, messages, temperature=0.7, max_tokens=2000):
            if counter.temperature is not None:
                temperature = counter.temperature
            if counter.max_tokens_cap is not None:
                max_tokens = min(max_tokens, counter.max_tokens_cap)
            reply, usage, finish = None, None, None
            try:
                response = client.client.chat.completions.create(
                    model=model, messages=messages, temperature=temperature, max_tokens=max_tokens
                )
                choice = response.choices[0]
                reply = clean_output((choice.message.content or "").strip())
                usage, finish = response.usage, choice.finish_reason
            except Exception as error:  # the reference's client turns every failure into a reply
                print(f"Error calling OpenAI API: {error}")
            with counter._lock:
                entry = counter.usage[counter.phase]
                entry["calls"] += 1
                entry["prompt_chars"] += sum(len(str(m.get("content", ""))) for m in messages)
                entry["completion_chars"] += len(reply or "")
                if usage is not None:
                    entry["prompt_tokens"] += usage.prompt_tokens or 0
                    entry["completion_tokens"] += usage.completion_tokens or 0
                entry["cut_at_cap"] += finish == "length"
                entry["errors"] += reply is None
                counter.calls.append(
                    {
                        "prompt_tokens": getattr(usage, "prompt_tokens", None),
                        "completion_tokens": getattr(usage, "completion_tokens", None),
                        "finish_reason": finish,
                    }
                )
            return REFERENCE_LLM_ERROR if reply is None else reply

        return counted


class _Log:
    """The job's JSON-lines log: what earlier runs of the same job finished, and each new step appended
    and flushed as it finishes. Without a log path nothing is kept."""

    def __init__(self, path):
        self.path = path
        self.added = 0
        self.answered = {}
        """(question, arm) -> its event; arm is None when only retrieving."""
        if path and os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                for line in handle:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event["kind"] == "added":
                        self.added = max(self.added, event["pair"] + 1)
                    elif event["kind"] == "answered":
                        self.answered[(event["question"], event.get("arm"))] = event

    def write(self, event):
        if not self.path:
            return
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(event) + "\n")
            handle.flush()
            os.fsync(handle.fileno())


def _attempt(call, *args, **kwargs):
    """Run one of the reference's calls: (its result, None), or (None, what it raised as text), and the
    run goes on. A real model's reply can crash its ingest (a topic reply that is a JSON string:
    `AttributeError` in its updater), and one such pair would otherwise end the whole part; the pair or
    question is logged with the error and counted against the reference."""
    try:
        return call(*args, **kwargs), None
    except Exception as error:
        return None, f"{type(error).__name__}: {error}"[:500]


def _usage_between(before, after):
    return {key: after[key] - before[key] for key in after}


FORMAT_ANNOUNCED = "using the following format (maximum 30 words, must be in English):"
"""Where the reference's answer prompt announces a format and then gives none (`prompts.py` of 0.1.0: the
next line is its timestamp reminder, which a small model then repeats as its answer)."""


def answer_prompts(prompts, fixed_prompt):
    """The reference's answer prompt as published and as repaired, with its system prompt: the repair puts
    `fixed_prompt["format_line"]` where the announced format belongs and `fixed_prompt["style_line"]` after
    it, and leaves every other word as shipped. A release whose prompt no longer announces the format
    raises: the repair would not be the one the bench describes."""
    published = prompts.GENERATE_SYSTEM_RESPONSE_USER_PROMPT
    head, found, tail = published.partition(FORMAT_ANNOUNCED)
    if not found:
        raise RuntimeError("the reference's answer prompt no longer announces its format: nothing to repair")
    inserted = "\n".join(
        line.replace("{", "{{").replace("}", "}}")
        for line in (fixed_prompt["format_line"], fixed_prompt["style_line"])
    )
    return {
        "system": prompts.GENERATE_SYSTEM_RESPONSE_SYSTEM_PROMPT,
        "published": published,
        "fixed": head + FORMAT_ANNOUNCED + "\n" + inserted + "\n" + tail.lstrip(" \n"),
    }


class _RetrievalSeen:
    """Wraps the retriever's `retrieve_context` to keep what the last call found: `get_response` uses and
    drops it, and the bench scores evidence recall on the pages the model was shown."""

    def __init__(self, retriever):
        self.last: Any = None
        original = retriever.retrieve_context

        def seen(*args, **kwargs):
            self.last = original(*args, **kwargs)
            return self.last

        retriever.retrieve_context = seen


def main(job_path, result_path):
    with open(job_path, encoding="utf-8") as handle:
        job = json.load(handle)

    from importlib import import_module
    from importlib.metadata import version

    prompts: Any = import_module("memoryos.prompts")
    answering = job.get("answer")
    if job.get("prompts_only"):
        with open(result_path, "w", encoding="utf-8") as handle:
            json.dump({"prompts": answer_prompts(prompts, answering["fixed_prompt"])}, handle)
        return

    from sentence_transformers import SentenceTransformer

    # Imported by name: in this interpreter `memoryos` is the reference, which type checkers of our
    # repository would otherwise take for ours.
    utils = import_module("memoryos.utils")
    Memoryos = import_module("memoryos.memoryos").Memoryos

    # The reference loads `SentenceTransformer("all-MiniLM-L6-v2")` from the Hub on first use; the cache
    # entry makes it use the local weights instead.
    utils._model_cache[REFERENCE_EMBEDDING_NAME] = SentenceTransformer(job["embedding_model_path"])
    counter = _CallCounter(job.get("temperature"), job.get("max_tokens_cap"))
    utils.OpenAIClient.chat_completion = counter.wrap(utils.clean_reasoning_model_output)
    memory = Memoryos(
        user_id=job["user_id"],
        openai_api_key="stub-key",
        data_storage_path=job["data_dir"],
        openai_base_url=job["llm_base_url"],
        short_term_capacity=job["short_term_capacity"],
        retrieval_queue_capacity=job["top_k"],
        llm_model=job["llm_model"],
    )
    log = _Log(job.get("log_path"))
    add_ms = []
    for number, pair in enumerate(job["pairs"]):
        if number < log.added:
            continue
        before = dict(counter.usage["ingest"])
        started = time.perf_counter()
        _, failure = _attempt(
            memory.add_memory, pair["user_input"], pair["agent_response"], timestamp=pair["timestamp"]
        )
        add_ms.append((time.perf_counter() - started) * 1000)
        log.write(
            {
                "kind": "added",
                "pair": number,
                "add_ms": add_ms[-1],
                "llm": _usage_between(before, counter.usage["ingest"]),
                "error": failure,
            }
        )
    counter.phase = "questions"
    arms: Any = answering.get("arms", ["published"]) if answering else [None]
    if answering:
        # get_response stores its exchange through add_memory; the bench asks without storing.
        memory.add_memory = lambda *args, **kwargs: None
        templates = {"published": prompts.GENERATE_SYSTEM_RESPONSE_USER_PROMPT}
        if "fixed" in arms:
            templates["fixed"] = answer_prompts(prompts, answering["fixed_prompt"])["fixed"]
        retrieval = _RetrievalSeen(memory.retriever)
    answers = []
    retrieve_ms = []
    for number, question in enumerate(job["questions"]):
        for arm in arms:
            if (number, arm) in log.answered:
                answers.append(log.answered[(number, arm)]["result"])
                continue
            before = dict(counter.usage["questions"])
            first_call = len(counter.calls)
            started = time.perf_counter()
            if answering:
                # get_response reads the template from its prompts module at each call.
                prompts.GENERATE_SYSTEM_RESPONSE_USER_PROMPT = templates[arm]
                retrieval.last = None
                reply, failure = _attempt(
                    memory.get_response,
                    question,
                    relationship_with_user=answering["relationship"],
                    style_hint=answering["style_hint"],
                    user_conversation_meta_data=answering["meta_data"],
                )
                found = retrieval.last or {"retrieved_pages": []}
                result = {
                    "prediction": reply or "",
                    "error": failure,
                    "retrieved": [_page(page) for page in found["retrieved_pages"]],
                    "short_term": [_page(page) for page in memory.short_term_memory.get_all()],
                }
            else:
                context = memory.retriever.retrieve_context(user_query=question, user_id=job["user_id"])
                short_term = memory.short_term_memory.get_all()
                result = {
                    "retrieved": [_page(page) for page in context["retrieved_pages"]],
                    "short_term": [_page(page) for page in short_term],
                }
            retrieve_ms.append((time.perf_counter() - started) * 1000)
            answers.append(result)
            log.write(
                {
                    "kind": "answered",
                    "question": number,
                    "arm": arm,
                    "ms": retrieve_ms[-1],
                    "llm": _usage_between(before, counter.usage["questions"]),
                    "calls": counter.calls[first_call:],
                    "result": result,
                }
            )
    output = {
        "version": version("memoryos-pro"),
        "answers": answers,
        "add_ms": add_ms,
        "retrieve_ms": retrieve_ms,
        "llm_usage": counter.usage,
    }
    with open(result_path, "w", encoding="utf-8") as handle:
        json.dump(output, handle)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
