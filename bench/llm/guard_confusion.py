"""`python -m bench.llm.guard_confusion`: each guard rule's confusion counts on the labelled set.

`tests/data/llm_proposals.json` holds facts and profile updates proposed by the local model over LoCoMo
turns (`bench/llm/collect_proposals.py`) and the issue's bad examples, labelled good or bad by hand, each
bad one with the rule that should refuse it. Per rule: bad ones it refuses (true refusals), bad ones it lets
through, good ones it keeps, good ones it refuses. `tests/unit/test_guard_rules.py` asserts on the same
verdicts; docs/evaluation.md ("Real-model tier") quotes this table.
"""

import json
from pathlib import Path
from typing import Any

from memoryos.config import MemoryConfig
from memoryos.planning.guards import GuardSettings, Rule, fact_refusal, profile_refusal, source_stems
from memoryos.types import Page

LABELLED_SET = Path(__file__).parents[2] / "tests" / "data" / "llm_proposals.json"
FACT_RULES: tuple[Rule, ...] = ("fact_not_sentence", "fact_ungrounded")
PROFILE_RULES: tuple[Rule, ...] = ("profile_dropped", "profile_unsupported")


class LabelledSet:
    """The labelled proposals and the guards' verdict on each, under the given settings."""

    def __init__(self, path: Path = LABELLED_SET, settings: GuardSettings | None = None) -> None:
        self.data: dict[str, Any] = json.loads(path.read_text())
        self.settings = settings or GuardSettings.of(MemoryConfig())
        self.facts: list[dict[str, Any]] = self.data["facts"]
        self.profiles: list[dict[str, Any]] = self.data["profiles"]

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


def main() -> None:
    labelled = LabelledSet()
    print("| rule | bad refused | bad let through | good kept | good refused |")
    print("| --- | --- | --- | --- | --- |")
    for rule in (*FACT_RULES, *PROFILE_RULES):
        c = labelled.confusion(rule)
        print(f"| {rule} | {c['bad_refused']} | {c['bad_missed']} | {c['good_kept']} | {c['good_refused']} |")


if __name__ == "__main__":
    main()
