"""The answer prompt's stable part (instructions, relationship, profile) comes before everything a request
brings, so provider prefix caches reuse it; the harness reports that share from the rendered prompts."""

from pathlib import Path

from memoryos.config import MemoryConfig
from memoryos.eval.harness import evaluate_conversation, shared_prefix_tokens
from memoryos.eval.locomo import LocomoConversation, LocomoPair, LocomoQuestion
from memoryos.llm.base import AnswerRequest
from memoryos.llm.offline.backend import OfflineLLM
from memoryos.llm.prompts import AnswerPrompt, answer_messages, answer_prompt
from memoryos.llm.usage import estimate_tokens
from memoryos.types import Page
from tests.support.fakes import HashEmbedder

PROFILE = "- Lives in Lisbon\n- Plays the cello"
STABLE_ITEMS = ("study partner", "Lives in Lisbon", "Plays the cello")
VOLATILE_ITEMS = (
    "meta-marker",
    "Short-term marker",
    "Assistant-fact marker",
    "User-fact marker",
    "Retrieved marker",
    "Which bridge did I cross?",
    "Style marker",
)


def page(page_id: int, user_input: str, timestamp: str = "2024-03-02 18:20:00") -> Page:
    return Page(page_id=page_id, user_input=user_input, agent_response="Noted.", timestamp=timestamp)


def request(**changes: object) -> AnswerRequest:
    """A request with a marker in every field, so each one's position in the prompt can be found."""
    fields: dict[str, object] = {
        "query": "Which bridge did I cross?",
        "short_term": [page(1, "Short-term marker: I walked home.")],
        "retrieved": [page(2, "Retrieved marker: the 25 de Abril bridge.", "2024-01-05 09:00:00")],
        "user_profile": PROFILE,
        "user_knowledge": ["User-fact marker: the user cycles to work."],
        "assistant_knowledge": ["Assistant-fact marker: the assistant suggested a map."],
        "relationship_with_user": "study partner",
        "style_hint": "Style marker, one sentence",
        "user_meta_data": {"channel": "meta-marker"},
    }
    fields.update(changes)
    return AnswerRequest.model_validate(fields)


def rendered(prompt: AnswerPrompt) -> str:
    return "".join(message["content"] for message in prompt.messages())


def shared_text(first: AnswerPrompt, second: AnswerPrompt) -> str:
    """The longest common start of two rendered prompts, in characters."""
    a, b = rendered(first), rendered(second)
    length = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return a[:length]


def test_the_stable_part_comes_before_every_volatile_item() -> None:
    prompt = answer_prompt(request())
    text = rendered(prompt)

    assert prompt.messages()[0] == {"role": "system", "content": prompt.stable}
    assert answer_messages(request()) == prompt.messages()
    for item in STABLE_ITEMS:
        assert item in prompt.stable
    for item in VOLATILE_ITEMS:
        assert item not in prompt.stable and item in prompt.volatile
    last_stable = max(text.index(item) for item in STABLE_ITEMS)
    assert all(text.index(item) > last_stable for item in VOLATILE_ITEMS)


def test_requests_with_the_same_profile_share_exactly_the_stable_prefix() -> None:
    first = answer_prompt(request())
    second = answer_prompt(
        request(
            query="Where did I buy the cello strings?",
            short_term=[],
            retrieved=[page(9, "Another memory entirely.")],
            user_knowledge=["The user buys strings online."],
            assistant_knowledge=[],
            style_hint="",
            user_meta_data=None,
        )
    )

    assert first.stable == second.stable
    shared = shared_text(first, second)
    assert shared.startswith(first.stable) and PROFILE in shared
    # Past the stable part only the volatile part's fixed opening is shared, no request's data.
    assert not any(item in shared for item in VOLATILE_ITEMS)
    assert len(shared) - len(first.stable) < len("<CONVERSATION METADATA>")
    assert shared_prefix_tokens(first.messages(), second.messages()) == estimate_tokens(
        first.stable
    ) + estimate_tokens(shared[len(first.stable) :])


def test_changing_the_query_never_changes_the_prefix() -> None:
    speakers = {"user_name": "Ana", "assistant_name": "Ben"}
    first = answer_prompt(request(user_meta_data=speakers))
    # The same metadata in another key order renders the same: only the query differs.
    second = answer_prompt(
        request(query="And which river runs under it?", user_meta_data=dict(reversed(speakers.items())))
    )

    assert first.stable == second.stable
    before_query = rendered(first).split("Which bridge did I cross?")[0]
    assert shared_text(first, second) == before_query
    for item in (*STABLE_ITEMS, "Ana", *VOLATILE_ITEMS[1:-2]):  # all but the query and the style after it
        assert item in before_query


def test_only_the_profile_and_the_relationship_change_the_stable_part() -> None:
    base = answer_prompt(request()).stable
    per_request = request(
        query="Anything else?",
        short_term=[],
        retrieved=[],
        user_knowledge=[],
        assistant_knowledge=[],
        style_hint="",
        user_meta_data={"channel": "app", "device": "phone"},
    )

    assert answer_prompt(per_request).stable == base
    assert answer_prompt(request(user_profile="- Lives in Porto")).stable != base
    assert answer_prompt(request(relationship_with_user="coach")).stable != base


def conversation() -> LocomoConversation:
    exchanges = [
        ("I started violin lessons with Marta.", "Marta sounds kind."),
        ("We bought a red kayak for the lake.", "A kayak sounds lovely."),
        ("Pablo opened a bakery selling sourdough.", "Sourdough, yum."),
    ]
    pairs = [
        LocomoPair(
            index=index,
            session=1,
            timestamp=f"2023-05-01 10:0{index}:00",
            timestamp_raw=f"10:0{index} am on 1 May, 2023",
            user_input=user_input,
            agent_response=agent_response,
            dia_ids=[f"D1:{2 * index + 1}", f"D1:{2 * index + 2}"],
        )
        for index, (user_input, agent_response) in enumerate(exchanges)
    ]
    questions = [
        LocomoQuestion(question=question, answer=answer, evidence=[dia], evidence_norm=[dia], category=4)
        for question, answer, dia in (
            ("Who teaches violin?", "Marta", "D1:1"),
            ("What colour is the kayak?", "red", "D1:3"),
            ("What does the bakery sell?", "sourdough", "D1:5"),
        )
    ]
    return LocomoConversation(sample_id="prefix", speaker_a="Ana", speaker_b="Ben", pairs=pairs, qa=questions)


class RecordingLLM(OfflineLLM):
    """The offline backend, keeping every answer request, so a test can render what the harness saw."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[AnswerRequest] = []

    def answer(self, request: AnswerRequest) -> str:
        self.requests.append(request)
        return super().answer(request)


def test_the_harness_reports_the_prefix_shares_of_its_rendered_prompts(tmp_path: Path) -> None:
    # Pages leave short-term memory at once and consolidate at the first visit: the prompts get a profile.
    config = MemoryConfig(data_dir=tmp_path, short_term_capacity=1, mid_term_heat_threshold=0.1)
    llm = RecordingLLM()
    result = evaluate_conversation(
        conversation(),
        tmp_path,
        config,
        HashEmbedder(),
        lambda: llm,
        answer_questions=True,
        keep_details=True,
    )

    records = result.details
    assert records is not None and len(records) == len(llm.requests) == 3
    prompts = [answer_prompt(request) for request in llm.requests]
    for record, request, prompt in zip(records, llm.requests, prompts, strict=True):
        assert request.user_profile.strip() and request.user_profile.strip() in prompt.stable
        assert record.stable_prefix_tokens == estimate_tokens(prompt.stable)
        assert record.context_tokens == estimate_tokens(prompt.stable) + estimate_tokens(prompt.volatile)
    assert records[0].shared_prefix_tokens is None  # nothing before the first question to share with
    for record, previous, prompt in zip(records[1:], prompts[:-1], prompts[1:], strict=True):
        assert record.shared_prefix_tokens == shared_prefix_tokens(previous.messages(), prompt.messages())
        # Nothing is written while asking: each prompt starts with the previous one's whole stable part.
        assert record.stable_prefix_tokens <= record.shared_prefix_tokens < record.context_tokens
    assert result.prompt_prefix is not None
    stable, shared = result.prompt_prefix.stable, result.prompt_prefix.shared
    assert 0 < stable.share_mean < 1 and 0 < shared.share_mean < 1
    assert 0 < stable.share_weighted <= shared.share_weighted < 1
    assert stable.share_weighted == round(
        sum(r.stable_prefix_tokens for r in records) / sum(r.context_tokens for r in records), 4
    )
    assert shared.tokens_mean == round(sum(r.shared_prefix_tokens or 0 for r in records[1:]) / 2, 1)
