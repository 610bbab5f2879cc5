"""`python -m bench.llm.guard_confusion`: each guard rule's confusion counts on the two labelled sets.

`tests/data/llm_proposals.json` holds facts and profile updates proposed by the local model over LoCoMo
turns of the dev conversations (`bench/llm/collect_proposals.py`) and the issue's bad examples, labelled
good or bad by hand, each bad one with the rule that should refuse it: the set the thresholds were tuned
on. `tests/data/llm_proposals_heldout.json` is the same kind of set from other conversations, labelled
before the guards changed again, with Chinese and Japanese windows: the measure of what the tuning did not
see. Per rule: bad ones it refuses (true refusals), bad ones it lets through, good ones it keeps, good ones
it refuses. `tests/unit/test_guard_rules.py` asserts on the tuning set's verdicts; docs/evaluation.md
("Guards on long-term memory") quotes these tables.
"""

import json
from pathlib import Path
from typing import Any

from memoryos.config import MemoryConfig
from memoryos.planning.guards import GuardSettings, Rule, fact_refusal, profile_refusal, source_stems
from memoryos.types import Page

LABELLED_SET = Path(__file__).parents[2] / "tests" / "data" / "llm_proposals.json"
HELD_OUT_SET = LABELLED_SET.with_name("llm_proposals_heldout.json")
FACT_RULES: tuple[Rule, ...] = ("fact_not_sentence", "fact_ungrounded")
PROFILE_RULES: tuple[Rule, ...] = ("profile_dropped", "profile_unsupported")


class LabelledSet:
    """The labelled proposals and the guards' verdict on each, under the given settings."""

    def __init__(
        self, path: Path = LABELLED_SET, settings: GuardSettings | None = None, language: str | None = None
    ) -> None:
        self.data: dict[str, Any] = json.loads(path.read_text())
        self.settings = settings or GuardSettings.of(MemoryConfig())
        wanted = [c for c in (*self.data["facts"], *self.data["profiles"]) if self._speaks(c, language)]
        self.facts: list[dict[str, Any]] = [c for c in wanted if "text" in c]
        self.profiles: list[dict[str, Any]] = [c for c in wanted if "proposed" in c]

    def _speaks(self, case: dict[str, Any], language: str | None) -> bool:
        """Whether the case's window is in `language` (any, when None); windows say theirs, English
        when they do not."""
        return language is None or self.data["windows"][case["window"]].get("language", "en") == language

    def pages(self, window: str) -> list[Page]:
        turns = self.data["windows"][window]["turns"]
        return [
            Page(page_id=i + 1, user_input=t["user"], agent_response=t["assistant"], timestamp=t["timestamp"])
            for i, t in enumerate(turns)
        ]

    def fact_verdict(self, case: dict[str, Any]) -> Rule | None:
        return fact_refusal(case["text"], source_stems(self.pages(case["window"])), self.settings)

    def profile_verdict(self, case: dict[str, Any]) -> Rule | None:
        verdict = profile_refusal(
            case["previous"], case["proposed"], source_stems(self.pages(case["window"])), self.settings
        )
        return verdict[0] if verdict else None

    def confusion(self, rule: Rule) -> dict[str, int]:
        """Bad proposals labelled for `rule` that it refuses or misses; good ones it keeps or refuses."""
        cases, verdict = (
            (self.facts, self.fact_verdict) if rule in FACT_RULES else (self.profiles, self.profile_verdict)
        )
        bad = [verdict(c) == rule for c in cases if c["label"] == "bad" and c["rule"] == rule]
        good = [verdict(c) == rule for c in cases if c["label"] == "good"]
        return {
            "bad_refused": sum(bad),
            "bad_missed": len(bad) - sum(bad),
            "good_kept": len(good) - sum(good),
            "good_refused": sum(good),
        }


def print_table(labelled: LabelledSet) -> None:
    print("| rule | bad refused | bad let through | good kept | good refused |")
    print("| --- | --- | --- | --- | --- |")
    for rule in (*FACT_RULES, *PROFILE_RULES):
        c = labelled.confusion(rule)
        print(f"| {rule} | {c['bad_refused']} | {c['bad_missed']} | {c['good_kept']} | {c['good_refused']} |")


def main() -> None:
    """The tuning set's table, then the held-out set's, whole and per language."""
    tables = [
        ("tuning set (conv-26, conv-30, conv-41)", LABELLED_SET, None),
        ("held-out set", HELD_OUT_SET, None),
        *(
            (f"held-out set, {language} windows only", HELD_OUT_SET, language)
            for language in ("en", "zh", "ja")
        ),
    ]
    for title, path, language in tables:
        labelled = LabelledSet(path, language=language)
        print(f"\n{title}: {len(labelled.facts)} facts, {len(labelled.profiles)} profile updates\n")
        print_table(labelled)


if __name__ == "__main__":
    main()
