"""The LoCoMo harness: ingest a conversation into a fresh space, ask every question, score retrieval.

Each conversation goes into its own space (user id = sample id) under a scratch directory, session by
session as one `add_memories` batch each, as an agent would store a day's conversation.
"""

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel

from memoryos.config import MemoryConfig
from memoryos.embedding.base import Embedder
from memoryos.eval.locomo import LocomoConversation
from memoryos.eval.metrics import RECALL_KS, RecallReport, page_dia_ids, ranked_dia_ids
from memoryos.llm.base import MemoryLLM
from memoryos.memoryos import Memoryos


class ConversationResult(BaseModel):
    sample_id: str
    pairs: int
    questions: int
    ingest_s: float
    retrieve_ms_mean: float
    recall: RecallReport
    llm_calls: int


def evaluate_conversation(
    conversation: LocomoConversation,
    data_dir: Path,
    config: MemoryConfig,
    embedder: Embedder | None = None,
    llm_factory: Callable[[], MemoryLLM] | None = None,
    ks: Sequence[int] = RECALL_KS,
) -> ConversationResult:
    """Evidence recall@k of our retrieval on one conversation (questions without evidence are skipped)."""
    memory = Memoryos(
        user_id=conversation.sample_id,
        openai_api_key=config.openai_api_key.get_secret_value() if config.openai_api_key else None,
        data_storage_path=data_dir,
        openai_base_url=config.openai_base_url,
        config=config,
        embedder=embedder,
        llm=llm_factory() if llm_factory else None,
        short_term_capacity=config.short_term_capacity,
        mid_term_capacity=config.mid_term_capacity,
        retrieval_queue_capacity=config.retrieval_queue_capacity,
        embedding_model_name=config.embedding_model_name,
    )
    with memory:
        started = time.perf_counter()
        sessions: dict[int, list[dict[str, str]]] = {}
        for pair in conversation.pairs:
            sessions.setdefault(pair.session, []).append(
                {
                    "user_input": pair.user_input,
                    "agent_response": pair.agent_response,
                    "timestamp": pair.timestamp,
                }
            )
        for turns in sessions.values():
            memory.add_memories(turns)
        ingest_s = time.perf_counter() - started
        index = page_dia_ids(conversation.pairs)
        questions = [q for q in conversation.qa if q.evidence_norm]
        rankings: list[list[list[str]]] = []
        started = time.perf_counter()
        for question in questions:
            context = memory.retrieve(question.question, top_k=max(ks))
            rankings.append(ranked_dia_ids(context.retrieved_pages, index))
        retrieve_ms = (time.perf_counter() - started) * 1000 / max(1, len(questions))
        calls = sum(usage.calls for usage in memory.llm.usage.values())
        memory.forget_user()
    return ConversationResult(
        sample_id=conversation.sample_id,
        pairs=len(conversation.pairs),
        questions=len(questions),
        ingest_s=ingest_s,
        retrieve_ms_mean=retrieve_ms,
        recall=RecallReport.build(questions, rankings, ks=ks),
        llm_calls=calls,
    )
