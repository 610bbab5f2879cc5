"""Scheduler figures (issue 10): the process's one scheduler serving many spaces and a slow LLM.

- **ingest**: turns per second until searchable for many spaces writing at once, against one space
  alone. Each space has a writer thread that adds a turn, waits until the turn is searchable (its vector
  is in the index: what a read after it waits for), and adds the next; the batcher's stats say how many
  encode calls that took and how full they were. Nothing leaves short-term memory in these runs
  (`short_term_capacity` is raised above the turns per space), so the figure is the write → vector path
  alone.
- **consolidate**: wall time to embed and consolidate a LoCoMo conversation — every pair added in one
  `add_memories` (background ingest), then `flush()` until nothing is left to do — with an OpenAI-compatible
  endpoint answering every request after `llm_delay_s` (`StubLLMServer` with `MEMORY_TASK_RULES`: a reply
  that parses for every consolidation task), at each `llm_max_concurrency`; LLM calls per task.
- **retrieve while consolidating**: a chat replay of the same conversation with the same endpoint: each
  pair added with `add_memory`, then a question retrieved at once, while consolidation's LLM calls run
  behind; latency of the reads, all of them and those that started with an LLM call in flight.

Every run builds its own `Scheduler` (its settings and batcher counters are its own) over a fresh data
directory, and every text carries the run's label, so the embedder's cache never answers for the model.
"""

import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.engine.latency import _percentiles
from memoryos.config import MemoryConfig
from memoryos.embedding.base import Embedder
from memoryos.eval.locomo import LocomoConversation, LocomoPair
from memoryos.eval.stub_llm_server import MEMORY_TASK_RULES, StubLLMServer
from memoryos.facade.memoryos import Memoryos
from memoryos.llm import LimitedLLM, MemoryLLM
from memoryos.llm.offline.backend import OfflineLLM
from memoryos.scheduler import Scheduler

SPACES = 200
ROUNDS = 3
"""Turns each of the many spaces writes, one after another."""
SOLO_TURNS = 100
LLM_DELAY_S = 0.2
CONCURRENCIES = (1, 16)
RETRIEVE_CONCURRENCY = 16
"""`llm_max_concurrency` of the retrieve run: the default."""
FLUSH_ROUNDS = 5
"""At most this many `flush()` calls to settle a consolidation run (one is enough when nothing failed)."""


def _config(base: MemoryConfig, data_dir: Path, **overrides: Any) -> MemoryConfig:
    return MemoryConfig.model_validate({**base.model_dump(), "data_dir": data_dir, **overrides})


def _turn(pair: LocomoPair, tag: str) -> dict[str, str]:
    """The pair as a turn, its user side tagged so that no run meets another run's cached vector."""
    return {
        "user_input": f"{pair.user_input} [{tag}]",
        "agent_response": pair.agent_response,
        "timestamp": pair.timestamp,
    }


def _add(memory: Memoryos, turn: dict[str, str]) -> int:
    return memory.add_memory(turn["user_input"], turn["agent_response"], turn["timestamp"])


def _limited(scheduler: Scheduler, llm: MemoryLLM) -> LimitedLLM:
    """The bounded view the scheduler gives `llm` (its in-flight counters)."""
    limited = scheduler.pooled_llm(llm)
    assert isinstance(limited, LimitedLLM)
    return limited


def _searchable(memory: Memoryos, page_id: int) -> None:
    """Block until every page up to `page_id` has its vector, as a read issued now waits (without the
    read's own query encode and search)."""
    memory._work.wait_embedded(page_id)


def _llm_config(base: MemoryConfig, data_dir: Path, server: StubLLMServer, concurrency: int) -> MemoryConfig:
    return _config(
        base,
        data_dir,
        openai_api_key="stub",
        openai_base_url=server.base_url,
        llm_max_concurrency=concurrency,
        llm_max_retries=0,  # the stub never fails; a failure should show, not be hidden by a retry
        llm_guards="off",  # canned facts are about no turn in particular: the guards would refuse them
    )


def ingest(
    config: MemoryConfig,
    embedder: Embedder,
    pairs: Sequence[LocomoPair],
    *,
    spaces: int,
    rounds: int,
    workdir: Path,
    short_term_capacity: int,
) -> dict[str, Any]:
    """`spaces` writers at once, each adding `rounds` turns one after another, each turn waited for until
    searchable; turns per second over the whole run, add → searchable latency per turn, batcher stats."""
    label = f"ingest{spaces}x{rounds}"
    run_config = _config(config, workdir / label, short_term_capacity=short_term_capacity)
    scheduler = Scheduler(run_config, name=f"bench-{label}")
    llm = OfflineLLM()  # nothing is consolidated (see short_term_capacity); one backend for every space
    memories = [
        Memoryos.from_config(f"{label}-{s}", run_config, embedder=embedder, llm=llm, scheduler=scheduler)
        for s in range(spaces)
    ]
    samples: list[float] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(spaces + 1)

    def write(space: int) -> None:
        memory = memories[space]
        own = [
            _turn(pairs[(space * rounds + r) % len(pairs)], f"{label} s{space} r{r}") for r in range(rounds)
        ]
        barrier.wait()
        try:
            for turn in own:
                started = time.perf_counter()
                _searchable(memory, _add(memory, turn))
                samples.append((time.perf_counter() - started) * 1000)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=write, args=(s,), name=f"bench-writer-{s}") for s in range(spaces)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    stats = scheduler.batcher(embedder).stats()
    for memory in memories:
        memory.close()
    scheduler.close()
    if errors:
        raise errors[0]
    turns = spaces * rounds
    return {
        "spaces": spaces,
        "turns_per_space": rounds,
        "turns": turns,
        "seconds": round(elapsed, 2),
        "turns_per_s": round(turns / elapsed, 1),
        "add_until_searchable": _percentiles(samples),
        "encode_calls": stats.batches,
        "texts_encoded": stats.texts,
        "mean_batch_size": round(stats.mean_batch_size, 1),
        "largest_batch": stats.largest_batch,
    }


def _settled(memory: Memoryos) -> bool:
    """Nothing left to consolidate: STM within capacity, no segment due, no LLM work backing off."""
    space = memory.space
    return (
        len(space.short_term_pages()) <= space.config.short_term_capacity
        and not space.segments_to_promote(memory.clock())
        and memory._work.consolidator.retry_in_s() is None
    )


def _llm_calls(memory: Memoryos) -> dict[str, int]:
    return {operation: usage.calls for operation, usage in sorted(memory.llm.usage.items())}


def _open_conversation(
    config: MemoryConfig,
    embedder: Embedder,
    conversation: LocomoConversation,
    server: StubLLMServer,
    concurrency: int,
    directory: Path,
) -> tuple[Scheduler, Memoryos]:
    """A scheduler of its own and the conversation's space under `directory`, on the stub LLM."""
    run_config = _llm_config(config, directory, server, concurrency)
    scheduler = Scheduler(run_config, name=f"bench-{directory.name}")
    memory = Memoryos.from_config(conversation.sample_id, run_config, embedder=embedder, scheduler=scheduler)
    return scheduler, memory


def consolidate(
    config: MemoryConfig,
    embedder: Embedder,
    conversation: LocomoConversation,
    server: StubLLMServer,
    *,
    concurrency: int,
    workdir: Path,
) -> dict[str, Any]:
    """Add every pair of the conversation at once, then flush until it is all embedded and consolidated."""
    label = f"consolidate-c{concurrency}"
    scheduler, memory = _open_conversation(
        config, embedder, conversation, server, concurrency, workdir / label
    )
    requests_before = server.requests_served
    started = time.perf_counter()
    memory.add_memories([_turn(pair, label) for pair in conversation.pairs])
    _searchable(memory, memory.space.max_page_id())
    embedded_s = time.perf_counter() - started
    flushes = 0
    while flushes < FLUSH_ROUNDS:
        memory.flush()
        flushes += 1
        if _settled(memory):
            break
    wall_s = time.perf_counter() - started
    settled = _settled(memory)
    calls = _llm_calls(memory)
    limited = _limited(scheduler, memory.llm)
    stats = memory.stats()
    batcher = scheduler.batcher(embedder).stats()
    memory.close()
    scheduler.close()
    return {
        "llm_max_concurrency": concurrency,
        "pages": len(conversation.pairs),
        "wall_s": round(wall_s, 2),
        "embedded_s": round(embedded_s, 2),
        "flushes": flushes,
        "settled": settled,
        "llm_calls": sum(calls.values()),
        "llm_calls_by_task": calls,
        "llm_requests_served": server.requests_served - requests_before,
        "llm_max_in_flight": limited.max_in_flight_seen,
        "short_term_pages": stats.short_term_pages,
        "mid_term_pages": stats.mid_term_pages,
        "segments": len(stats.segments),
        "user_facts": stats.user_knowledge,
        "assistant_facts": stats.assistant_knowledge,
        "profile_versions": stats.profile_versions,
        "encode_calls": batcher.batches,
        "mean_batch_size": round(batcher.mean_batch_size, 1),
    }


def retrieve_while_consolidating(
    config: MemoryConfig,
    embedder: Embedder,
    conversation: LocomoConversation,
    server: StubLLMServer,
    *,
    concurrency: int,
    workdir: Path,
) -> dict[str, Any]:
    """Replay the conversation as a chat: each pair added, then a question retrieved at once; consolidation
    runs behind with the slow LLM. Latency of every read, and of the reads that began with a call in flight."""
    label = f"retrieve-c{concurrency}"
    scheduler, memory = _open_conversation(
        config, embedder, conversation, server, concurrency, workdir / label
    )
    limited = _limited(scheduler, memory.llm)
    questions = [q.question for q in conversation.qa] or [pair.user_input for pair in conversation.pairs]
    reads: list[float] = []
    busy_reads: list[float] = []
    adds: list[float] = []
    started = time.perf_counter()
    for i, pair in enumerate(conversation.pairs):
        began = time.perf_counter()
        _add(memory, _turn(pair, label))
        adds.append((time.perf_counter() - began) * 1000)
        busy = limited.in_flight > 0
        began = time.perf_counter()
        memory.retrieve(f"{questions[i % len(questions)]} [{label} {i}]")
        elapsed_ms = (time.perf_counter() - began) * 1000
        reads.append(elapsed_ms)
        if busy:
            busy_reads.append(elapsed_ms)
    replay_s = time.perf_counter() - started
    memory.flush()
    drained_s = time.perf_counter() - started
    calls = _llm_calls(memory)
    memory.close()
    scheduler.close()
    return {
        "llm_max_concurrency": concurrency,
        "reads": len(reads),
        "retrieve": _percentiles(reads),
        "reads_with_llm_call_in_flight": len(busy_reads),
        "retrieve_with_llm_call_in_flight": _percentiles(busy_reads) if busy_reads else None,
        "add_memory": _percentiles(adds),
        "replay_s": round(replay_s, 2),
        "consolidated_s": round(drained_s, 2),
        "llm_calls": sum(calls.values()),
    }


def run_scheduler(
    config: MemoryConfig,
    embedder: Embedder,
    conversation: LocomoConversation,
    *,
    spaces: int = SPACES,
    rounds: int = ROUNDS,
    solo_turns: int = SOLO_TURNS,
    llm_delay_s: float = LLM_DELAY_S,
    concurrencies: Sequence[int] = CONCURRENCIES,
    retrieve_concurrency: int = RETRIEVE_CONCURRENCY,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every scheduler figure; `config` carries the shared settings (torch threads, batch limits)."""
    results: dict[str, Any] = {
        "conversation": conversation.sample_id,
        "embedding_model": embedder.name,
        "torch_threads": config.torch_threads,
        "embedding_batch_size": config.embedding_batch_size,
        "embedding_max_wait_ms": config.embedding_max_wait_ms,
        "short_term_capacity": config.short_term_capacity,
        "ingest_short_term_capacity": max(rounds, solo_turns, config.short_term_capacity),
        "llm_delay_ms": round(llm_delay_s * 1000),
        "load_average_1min": [round(os.getloadavg()[0], 2)],
    }
    capacity = results["ingest_short_term_capacity"]
    with (
        tempfile.TemporaryDirectory() as scratch,
        StubLLMServer(rules=MEMORY_TASK_RULES, delay_s=llm_delay_s) as server,
    ):
        workdir = Path(scratch)
        results["ingest"] = []
        for many, turns in ((1, solo_turns), (spaces, rounds)):
            row = ingest(
                config,
                embedder,
                conversation.pairs,
                spaces=many,
                rounds=turns,
                workdir=workdir,
                short_term_capacity=capacity,
            )
            log(f"ingest: {row}")
            results["ingest"].append(row)
        results["consolidate"] = []
        for concurrency in concurrencies:
            row = consolidate(
                config, embedder, conversation, server, concurrency=concurrency, workdir=workdir
            )
            log(f"consolidate: {row}")
            results["consolidate"].append(row)
        results["retrieve"] = retrieve_while_consolidating(
            config, embedder, conversation, server, concurrency=retrieve_concurrency, workdir=workdir
        )
        log(f"retrieve: {results['retrieve']}")
    results["load_average_1min"].append(round(os.getloadavg()[0], 2))
    return results


def scheduler_markdown(results: dict[str, Any]) -> str:
    """The tables of docs/benchmarks/scheduler.md."""
    lines = [
        f"Machine: {results.get('machine', '?')}; {results['embedding_model']}, {results['torch_threads']} "
        f"torch thread(s), embedding_batch_size {results['embedding_batch_size']}, embedding_max_wait_ms "
        f"{results['embedding_max_wait_ms']}; conversation {results['conversation']}; LLM endpoint answering "
        f"after {results['llm_delay_ms']} ms. Load average (1 min) at start / end: "
        f"{' / '.join(str(x) for x in results['load_average_1min'])}.",
        "",
        "| ingest until searchable | turns | seconds | turns/s | add → searchable p50 / p95 | encode calls "
        "| mean batch | largest batch |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in results["ingest"]:
        who = "one space alone" if row["spaces"] == 1 else f"{row['spaces']} spaces at once"
        lines.append(
            f"| {who}, {row['turns_per_space']} turns each | {row['turns']} | {row['seconds']} "
            f"| {row['turns_per_s']} | {row['add_until_searchable']['p50_ms']} / "
            f"{row['add_until_searchable']['p95_ms']} ms | {row['encode_calls']} | {row['mean_batch_size']} "
            f"| {row['largest_batch']} |"
        )
    lines += [
        "",
        "| consolidate (add all, flush) | pages | wall s | embedded at s | LLM calls | calls by task "
        "| most in flight | segments | user / assistant facts | settled |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in results["consolidate"]:
        by_task = ", ".join(f"{task} {count}" for task, count in row["llm_calls_by_task"].items())
        lines.append(
            f"| llm_max_concurrency {row['llm_max_concurrency']} | {row['pages']} | {row['wall_s']} "
            f"| {row['embedded_s']} | {row['llm_calls']} | {by_task} | {row['llm_max_in_flight']} "
            f"| {row['segments']} | {row['user_facts']} / {row['assistant_facts']} | {row['settled']} |"
        )
    retrieve = results["retrieve"]
    busy = retrieve["retrieve_with_llm_call_in_flight"]
    busy_cell = f"{busy['p50_ms']} / {busy['p95_ms']} ms" if busy else "—"
    lines += [
        "",
        "| retrieve right after each add, consolidation behind | reads | p50 / p95 | reads begun with an LLM "
        "call in flight | their p50 / p95 | add_memory p50 / p95 | replay s | consolidated at s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        f"| llm_max_concurrency {retrieve['llm_max_concurrency']} | {retrieve['reads']} "
        f"| {retrieve['retrieve']['p50_ms']} / {retrieve['retrieve']['p95_ms']} ms "
        f"| {retrieve['reads_with_llm_call_in_flight']} | {busy_cell} "
        f"| {retrieve['add_memory']['p50_ms']} / {retrieve['add_memory']['p95_ms']} ms "
        f"| {retrieve['replay_s']} | {retrieve['consolidated_s']} |",
    ]
    return "\n".join(lines) + "\n"
