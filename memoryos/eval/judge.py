"""The LLM judge of LoCoMo answers: CORRECT or WRONG against the gold answer, as in the mem0 paper.

The prompt is mem0's `ACCURACY_PROMPT` (evaluation/metrics/llm_judge.py) word for word, with its system
message, temperature 0 and a JSON reply `{"label": ...}`, so our judge scores read like the published
ones. The call is bounded as the engine's are (`openai_client.CompletionCodec`): a token cap, the label's
JSON schema where the endpoint takes it and free text where it refuses it, one re-ask of an unparseable
reply. Token F1 punishes a right answer worded differently ("7 May 2023" vs "May 7th"); the judge does not,
which is why both are reported. Judge calls are counted apart from the system's own LLM usage.
"""

import json
import re
from typing import Any, Protocol

from memoryos.config import MemoryConfig
from memoryos.errors import LLMError
from memoryos.llm.base import OperationUsage
from memoryos.llm.chat_tasks import ChatTask
from memoryos.llm.openai_client import CallBounds, CompletionCodec, ask_blocking, openai_client
from memoryos.llm.parsing import strip_think
from memoryos.llm.prompts import ChatMessage

JUDGE_SYSTEM = "You are an expert grader that determines if answers to questions match a gold standard answer"

ACCURACY_PROMPT = """
Your task is to label an answer to a question as 'CORRECT' or 'WRONG'. You will be given the following data:
    (1) a question (posed by one user to another user),
    (2) a 'gold' (ground truth) answer,
    (3) a generated answer
which you will score as CORRECT/WRONG.

The point of the question is to ask about something one user should know about the other user based on their prior conversations.
The gold answer will usually be a concise and short answer that includes the referenced topic, for example:
Question: Do you remember what I got the last time I went to Hawaii?
Gold answer: A shell necklace
The generated answer might be much longer, but you should be generous with your grading - as long as it touches on the same topic as the gold answer, it should be counted as CORRECT.

For time related questions, the gold answer will be a specific date, month, year, etc. The generated answer might be much longer or use relative time references (like "last Tuesday" or "next month"), but you should be generous with your grading - as long as it refers to the same date or time period as the gold answer, it should be counted as CORRECT. Even if the format differs (e.g., "May 7th" vs "7 May"), consider it CORRECT if it's the same date.

Now it's time for the real question:
Question: {question}
Gold answer: {gold_answer}
Generated answer: {generated_answer}

First, provide a short (one sentence) explanation of your reasoning, then finish with CORRECT or WRONG.
Do NOT include both CORRECT and WRONG in your response, or it will break the evaluation script.

Just return the label CORRECT or WRONG in a json format with the key as "label".
"""

_LABEL = re.compile(r"\b(CORRECT|WRONG)\b")

JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"label": {"type": "string", "enum": ["CORRECT", "WRONG"]}},
    "required": ["label"],
    "additionalProperties": False,
}
"""The reply mem0 asks for, as a strict schema: a server with structured outputs can send nothing else."""

JUDGE_MAX_TOKENS = 256
"""The judge's reply cap: a label in JSON is a dozen tokens, and a model answering in free text (the
fallback) writes a sentence of reasoning before it; a reply that loops unbounded holds the endpoint (a
local model's slot) until it ends."""


class AnswerJudge(Protocol):
    """Grades one generated answer; `usage` sums the judge's own calls."""

    @property
    def usage(self) -> OperationUsage: ...

    def is_correct(self, question: str, gold_answer: str, generated_answer: str) -> bool: ...


def judge_messages(question: str, gold_answer: str, generated_answer: str) -> list[ChatMessage]:
    prompt = ACCURACY_PROMPT.format(
        question=question, gold_answer=gold_answer, generated_answer=generated_answer
    )
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": prompt}]


def parse_label(reply: str) -> bool:
    """True for CORRECT. The JSON `label` decides; a reply that is not JSON is read for the last label word
    (mem0 asks for JSON but models sometimes reason first). No label at all raises `LLMError`."""
    text = strip_think(reply).strip()
    match = re.search(r"\{.*\}", text, re.DOTALL)
    if match:
        try:
            data = json.loads(match.group(0))
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("label"), str):
            label = data["label"].strip().upper()
            if label in ("CORRECT", "WRONG"):
                return label == "CORRECT"
    labels = _LABEL.findall(text.upper())
    if not labels:
        raise LLMError("the judge reply has no CORRECT/WRONG label")
    return bool(labels[-1] == "CORRECT")


def judge_task(question: str, gold_answer: str, generated_answer: str) -> ChatTask[bool]:
    """One judge call as a chat task: the engine's codec then sends it bounded, with its fallback."""
    return ChatTask(
        "judge", judge_messages(question, gold_answer, generated_answer), parse_label, schema=JUDGE_SCHEMA
    )


class OpenAIJudge:
    """The judge on an OpenAI-compatible endpoint: the configured key and base URL, `model` or the
    configured `llm_model`, at temperature 0 and at most `max_tokens` a reply."""

    def __init__(
        self, config: MemoryConfig, model: str | None = None, max_tokens: int = JUDGE_MAX_TOKENS
    ) -> None:
        self._client = openai_client(config, "the LLM judge")
        judge_config = config.model_copy(update={"llm_model": model or config.llm_model})
        self._codec = CompletionCodec(judge_config, bounds={"judge": CallBounds(max_tokens, 0.0)})
        self.model = judge_config.llm_model

    @property
    def usage(self) -> OperationUsage:
        return self._codec.usage.snapshot().get("judge", OperationUsage())

    def is_correct(self, question: str, gold_answer: str, generated_answer: str) -> bool:
        """One judge call; an unparseable reply is asked for once more, then raises `LLMError`."""
        return ask_blocking(self._client, self._codec, judge_task(question, gold_answer, generated_answer))
