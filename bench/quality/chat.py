"""`python -m bench.quality.chat`: how well the offline chat answers from what was said, as a pass rate.

The cases (`bench/data/chat_pairs.json`) are personas, each with lines said through the chat
(`Memoryos.get_response`, as `memoryos chat` does: statements, a few unrelated questions and small talk),
then questions, each asked through a fresh `Memoryos` on the same data directory: a restart before every
question, and every earlier question and answer stored, as in a real chat. The default configuration:
the bundled MiniLM embedder and the offline LLM backend.

A question passes when its answer contains the expected text (case-insensitive) and does not say "I don't
have that in memory."; a question nothing said answers passes when the answer says exactly that. Also
counted: statements acknowledged (a reply that is not "I don't have that in memory."), stored answers that
nest an earlier exchange (a speaker label or a `[YYYY-MM-DD` timestamp), and assistant facts that echo the
conversation (the same markers) after a forced mid-term analysis.

Writes `docs/benchmarks/chat.json` (every question with its answer) unless `--out` says otherwise.
"""

import argparse
import json
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memoryos.facade.memoryos import Memoryos
from memoryos.llm.offline.replies import NOT_IN_MEMORY

CASES = Path(__file__).resolve().parents[1] / "data" / "chat_pairs.json"
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "chat.json"
NESTED = re.compile(r"\b(?:User|Assistant):|\[\d{4}-\d{2}-\d{2}")
"""What an answer quoting an earlier exchange looks like: a speaker label or a page timestamp."""


def load_cases(path: Path = CASES) -> list[dict[str, Any]]:
    personas: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))["personas"]
    return personas


def passes(answer: str, expect: str | None) -> bool:
    if expect is None:
        return NOT_IN_MEMORY.casefold() in answer.casefold()
    return expect.casefold() in answer.casefold() and NOT_IN_MEMORY.casefold() not in answer.casefold()


def run_persona(persona: dict[str, Any], data_dir: Path) -> dict[str, Any]:
    user = persona["user"]
    said = []
    with Memoryos(user, None, data_dir) as memory:
        for line in persona["say"]:
            said.append({"said": line, "reply": memory.get_response(line)})
    asked = []
    for case in persona["ask"]:
        with Memoryos(user, None, data_dir) as memory:  # a restart before every question
            answer = memory.get_response(case["q"])
        asked.append({**case, "answer": answer, "pass": passes(answer, case["expect"])})
    with Memoryos(user, None, data_dir) as memory:
        memory.force_mid_term_analysis()
        pages = memory.space.pages(list(range(1, memory.space.max_page_id() + 1)))
        assistant_facts = [k["knowledge"] for k in memory.get_assistant_knowledge_summary()]
    return {
        "user": user,
        "set": persona.get("set", "dev"),
        "said": said,
        "asked": asked,
        "nested_answers": sum(bool(NESTED.search(page.agent_response)) for page in pages),
        "stored_answers": len(pages),
        "assistant_facts": assistant_facts,
        "echo_assistant_facts": sum(bool(NESTED.search(fact.split(":", 1)[-1])) for fact in assistant_facts),
    }


def pass_counts(asked: list[dict[str, Any]]) -> dict[str, Any]:
    answerable = [case for case in asked if case["expect"] is not None]
    unanswerable = [case for case in asked if case["expect"] is None]
    return {
        "questions": len(asked),
        "passed": sum(case["pass"] for case in asked),
        "pass_rate": round(sum(case["pass"] for case in asked) / len(asked), 3),
        "answerable": len(answerable),
        "answerable_passed": sum(case["pass"] for case in answerable),
        "unanswerable": len(unanswerable),
        "unanswerable_passed": sum(case["pass"] for case in unanswerable),
    }


def summarize(personas: list[dict[str, Any]]) -> dict[str, Any]:
    """Pass counts over every question and per set ("dev": written before the rules; "holdout": after)."""
    asked = [case for persona in personas for case in persona["asked"]]
    sets = sorted({persona["set"] for persona in personas})
    said = [line for persona in personas for line in persona["said"]]
    statements = [line for line in said if not line["said"].rstrip().endswith("?")]
    return {
        **pass_counts(asked),
        "by_set": {
            name: pass_counts([c for p in personas if p["set"] == name for c in p["asked"]]) for name in sets
        },
        "statements": len(statements),
        "statements_acknowledged": sum(NOT_IN_MEMORY not in line["reply"] for line in statements),
        "nested_answers": sum(persona["nested_answers"] for persona in personas),
        "stored_answers": sum(persona["stored_answers"] for persona in personas),
        "assistant_facts": sum(len(persona["assistant_facts"]) for persona in personas),
        "echo_assistant_facts": sum(persona["echo_assistant_facts"] for persona in personas),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quality.chat", description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=Path, default=CASES)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the JSON report goes")
    parser.add_argument("--show", action="store_true", help="print every question with its answer")
    args = parser.parse_args(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="memoryos-bench-chat-") as scratch:
        personas = [run_persona(persona, Path(scratch)) for persona in load_cases(args.cases)]
    summary = summarize(personas)
    for persona in personas:
        for case in persona["asked"]:
            if args.show or not case["pass"]:
                mark = "pass" if case["pass"] else "FAIL"
                answer = case["answer"].replace("\n", " | ")
                print(f"{mark}  {persona['user']}: {case['q']}  (expect {case['expect']!r})\n      {answer}")
    for name, counts in summary["by_set"].items():
        print(
            f"{name}: {counts['passed']}/{counts['questions']} = {counts['pass_rate']:.1%} (answerable "
            f"{counts['answerable_passed']}/{counts['answerable']}, unanswerable "
            f"{counts['unanswerable_passed']}/{counts['unanswerable']})"
        )
    print(
        f"chat pass rate: {summary['passed']}/{summary['questions']} = {summary['pass_rate']:.1%} "
        f"(answerable {summary['answerable_passed']}/{summary['answerable']}, "
        f"unanswerable {summary['unanswerable_passed']}/{summary['unanswerable']}); statements acknowledged "
        f"{summary['statements_acknowledged']}/{summary['statements']}; nested answers "
        f"{summary['nested_answers']}/{summary['stored_answers']}; echoing assistant facts "
        f"{summary['echo_assistant_facts']}/{summary['assistant_facts']}; "
        f"{time.monotonic() - started:.0f} s"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"summary": summary, "personas": personas}, indent=2, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
