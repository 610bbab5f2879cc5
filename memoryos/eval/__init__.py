"""Benchmark data and metrics: LoCoMo conversations and the scores a memory system is judged by."""

from memoryos.eval.locomo import LocomoConversation, LocomoPair, LocomoQuestion, load_conversations
from memoryos.eval.metrics import RecallReport, bleu1, evidence_recall_at_k, page_dia_ids, token_f1

__all__ = [
    "LocomoConversation",
    "LocomoPair",
    "LocomoQuestion",
    "RecallReport",
    "bleu1",
    "evidence_recall_at_k",
    "load_conversations",
    "page_dia_ids",
    "token_f1",
]
