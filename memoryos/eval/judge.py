"""The LLM judge of LoCoMo answers: CORRECT or WRONG against the gold answer, as in the mem0 paper.

The prompt is mem0's `ACCURACY_PROMPT` (evaluation/metrics/llm_judge.py) word for word, with its system
message, temperature 0 and a JSON reply `{"label": ...}`, so our judge scores read like the published
ones. Token F1 punishes a right answer worded differently ("7 May 2023" vs "May 7th"); the judge does not,
which is why both are reported. Judge calls are counted apart from the system's own LLM usage.
"""

import json
import re
from typing import Protocol, cast

from openai import OpenAIError
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

from memoryos.config import MemoryConfig
from memoryos.errors import LLMError
from memoryos.llm.base import OperationUsage
from memoryos.llm.openai_backend import openai_client
from memoryos.llm.parsing import strip_think
from memoryos.llm.usage import estimate_tokens

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


class AnswerJudge(Protocol):
    """Grades one generated answer; `usage` sums the judge's own calls."""

    @property
    def usage(self) -> OperationUsage: ...

    def is_correct(self, question: str, gold_answer: str, generated_answer: str) -> bool: ...


def judge_messages(question: str, gold_answer: str, generated_answer: str) -> list[dict[str, str]]:
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


class OpenAIJudge:
    """The judge on an OpenAI-compatible endpoint: the configured key and base URL, `model` or the
    configured `llm_model`."""

    def __init__(self, config: MemoryConfig, model: str | None = None) -> None:
        self._client = openai_client(config, "the LLM judge")
        self.model = model or config.llm_model
        self._usage = OperationUsage()

    @property
    def usage(self) -> OperationUsage:
        return self._usage.model_copy()

    def is_correct(self, question: str, gold_answer: str, generated_answer: str) -> bool:
        """One judge call; an unparseable reply is asked for once more, then raises `LLMError`."""
        messages = judge_messages(question, gold_answer, generated_answer)
        try:
            return parse_label(self._complete(messages))
        except LLMError:
            return parse_label(self._complete(messages))

    def _complete(self, messages: list[dict[str, str]]) -> str:
        try:
            response = self._client.chat.completions.create(
                model=self.model,
                messages=cast(list[ChatCompletionMessageParam], messages),
                temperature=0.0,
                response_format={"type": "json_object"},
            )
        except (OpenAIError, ValueError) as err:
            raise LLMError(f"judge call failed: {type(err).__name__}: {err}"[:300]) from err
        if (
            not isinstance(response, ChatCompletion)
            or not response.choices
            or not response.choices[0].message
        ):
            raise LLMError("judge call got a malformed response")
        content = response.choices[0].message.content or ""
        usage = response.usage
        self._usage.calls += 1
        if usage is not None and usage.prompt_tokens is not None and usage.completion_tokens is not None:
            self._usage.prompt_tokens += usage.prompt_tokens
            self._usage.completion_tokens += usage.completion_tokens
        else:
            self._usage.prompt_tokens += sum(estimate_tokens(m["content"]) for m in messages)
            self._usage.completion_tokens += estimate_tokens(content)
        return content
