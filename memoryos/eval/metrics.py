"""Evaluation metrics for LoCoMo: evidence recall of retrieval, and token F1 / BLEU-1 of answers.

Recall is the offline quality metric (no LLM needed): each retrieved page is mapped back to the LoCoMo
turns it holds by its exact text, and a question scores the share of its evidence turns found in the top
k pages. F1 and BLEU-1 follow the LoCoMo and MemoryOS-paper answer scoring.
"""

import math
import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Protocol

from pydantic import BaseModel

from memoryos.errors import InvalidInputError
from memoryos.eval.locomo import LocomoPair, LocomoQuestion

RECALL_KS: tuple[int, ...] = (1, 3, 5, 7, 10)
"""The cut-offs every recall report covers, so numbers from different runs line up."""

PageKey = tuple[str, str]
"""(user_input, agent_response): how a retrieved page is recognised, by exact text."""

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


class Exchange(Protocol):
    """Anything retrieval returns as a page: a stored `Page`, a `LocomoPair`."""

    @property
    def user_input(self) -> str: ...

    @property
    def agent_response(self) -> str: ...


def page_dia_ids(pairs: Iterable[LocomoPair]) -> dict[PageKey, list[str]]:
    """Index the conversation's pairs by text, so retrieved pages can be mapped back to their turn ids.

    Pairs with identical text are indistinguishable once retrieved, so their ids are merged. Text is
    compared stripped, as the engine stores it.
    """
    index: dict[PageKey, list[str]] = {}
    for pair in pairs:
        ids = index.setdefault((pair.user_input.strip(), pair.agent_response.strip()), [])
        ids.extend(dia_id for dia_id in pair.dia_ids if dia_id not in ids)
    return index


def ranked_dia_ids(pages: Iterable[Exchange], index: dict[PageKey, list[str]]) -> list[list[str]]:
    """The turn ids of each retrieved page, in rank order; a page not in the conversation holds none."""
    return [index.get((page.user_input.strip(), page.agent_response.strip()), []) for page in pages]


def evidence_recall_at_k(
    evidence_ids: Sequence[str], ranked_dia_ids: Sequence[Sequence[str]], k: int
) -> float:
    """Fraction of the distinct `evidence_ids` found among the turn ids of the top `k` pages.

    Recall is undefined without evidence; such questions are left out of the mean, not scored 0 or 1.
    """
    if k < 1:
        raise InvalidInputError("k", f"must be at least 1, got {k}")
    wanted = set(evidence_ids)
    if not wanted:
        raise InvalidInputError("evidence_ids", "recall is undefined for a question without evidence")
    found = {dia_id for page_ids in ranked_dia_ids[:k] for dia_id in page_ids}
    return len(wanted & found) / len(wanted)


class RecallReport(BaseModel):
    """Mean evidence recall@k overall and per question category, over the questions that have evidence."""

    ks: tuple[int, ...]
    overall: dict[int, float]
    """k -> mean recall over all counted questions."""
    by_category: dict[int, dict[int, float]]
    """category -> k -> mean recall over that category's counted questions."""
    question_count: int
    category_counts: dict[int, int]
    without_evidence: int
    """Questions left out because their `evidence_norm` is empty."""

    @classmethod
    def build(
        cls,
        questions: Sequence[LocomoQuestion],
        rankings: Sequence[Sequence[Sequence[str]]],
        ks: Sequence[int] = RECALL_KS,
    ) -> "RecallReport":
        """Aggregate; `rankings[i]` is the ranked turn ids retrieved for `questions[i]`."""
        if len(questions) != len(rankings):
            raise InvalidInputError("rankings", f"{len(rankings)} rankings for {len(questions)} questions")
        scores: dict[int, list[dict[int, float]]] = {}
        for question, ranking in zip(questions, rankings, strict=True):
            if question.evidence_norm:
                recall = {k: evidence_recall_at_k(question.evidence_norm, ranking, k) for k in ks}
                scores.setdefault(question.category, []).append(recall)
        everything = [recall for category_scores in scores.values() for recall in category_scores]
        return cls(
            ks=tuple(ks),
            overall=_mean_by_k(everything, ks),
            by_category={category: _mean_by_k(scores[category], ks) for category in sorted(scores)},
            question_count=len(everything),
            category_counts={category: len(scores[category]) for category in sorted(scores)},
            without_evidence=len(questions) - len(everything),
        )


def _mean_by_k(recalls: list[dict[int, float]], ks: Sequence[int]) -> dict[int, float]:
    if not recalls:
        return {k: 0.0 for k in ks}
    return {k: sum(recall[k] for recall in recalls) / len(recalls) for k in ks}


def answer_tokens(text: str) -> list[str]:
    """Lowercase, drop punctuation and the articles a/an/the, split on whitespace."""
    return _ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split()


def token_f1(prediction: str, answer: str) -> float:
    """Harmonic mean of precision and recall over the shared token multiset.

    Two answers that normalize to nothing agree (1.0); one empty side scores 0.0.
    """
    predicted, gold = answer_tokens(prediction), answer_tokens(answer)
    if not predicted or not gold:
        return float(predicted == gold)
    shared = sum((Counter(predicted) & Counter(gold)).values())
    if shared == 0:
        return 0.0
    precision, recall = shared / len(predicted), shared / len(gold)
    return 2 * precision * recall / (precision + recall)


def bleu1(prediction: str, answer: str) -> float:
    """Clipped unigram precision times the brevity penalty (NLTK's sentence BLEU with weights (1,)).

    Empty sides are handled as in `token_f1` instead of dividing by zero.
    """
    predicted, gold = answer_tokens(prediction), answer_tokens(answer)
    if not predicted or not gold:
        return float(predicted == gold)
    precision = sum((Counter(predicted) & Counter(gold)).values()) / len(predicted)
    brevity = 1.0 if len(predicted) > len(gold) else math.exp(1 - len(gold) / len(predicted))
    return brevity * precision
