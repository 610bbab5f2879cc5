"""A script that ends without closing its `Memoryos` ends quietly and loses nothing.

The README's pattern before it used `with` — open, add a dozen turns, retrieve, let the script end —
printed a traceback ("cannot schedule new futures after interpreter shutdown") and "Task was destroyed but
it is pending!" whenever a consolidation pass was still calling the LLM at exit. The LLM here is a real HTTP server that
answers every consolidation task after a delay, so a pass is in flight when the script ends.

Then (issue 57) a script in the reference's style printed `BatcherClosedError: the embedding batcher is
closed` at exit in 2 runs of 5: a pass waiting for its fact texts' vectors when the scheduler closed its
batchers before cancelling the passes. The exit is a race, so each case runs the script `RUNS` times, each
into a new data directory: every run must end with nothing on stderr and every turn there at the next open
(`tests/unit/test_scheduler_exit.py` holds the order deterministically).
"""

import subprocess
import sys
from pathlib import Path

import pytest

from memoryos import Memoryos
from memoryos.eval.stub_llm_server import MEMORY_TASK_RULES, StubLLMServer

REPO = Path(__file__).resolve().parents[2]
TURNS = 12

README_PATTERN = f"""
import sys
from memoryos import Memoryos

memory = Memoryos(user_id="maya", openai_api_key="key", openai_base_url=sys.argv[2],
                  data_storage_path=sys.argv[1], short_term_capacity=3)
for i in range({TURNS}):
    memory.add_memory(f"Pottery class number {{i}} with my friend Jo.", f"How was class {{i}}?",
                      timestamp=f"2026-03-{{i + 1:02d}} 10:00:00")
print(len(memory.retrieve("What class did I take?").retrieved_pages))
"""


RUNS = 3
"""Runs of the script per case: the race lost 2 runs in 5 where it was seen, so 3 clean runs of each case
leave it about a 1-in-5 chance per case to hide (about 1 in 20 for both); the order itself is held by
`tests/unit/test_scheduler_exit.py`, which fails every time, and the suite's 10 minutes are spent
elsewhere."""


@pytest.mark.parametrize("delay_s", [0.0, 0.5], ids=["llm-at-once", "llm-in-flight-at-exit"])
def test_a_script_that_never_closes_ends_quietly_and_its_pages_are_all_there_next_time(
    tmp_path: Path, delay_s: float
) -> None:
    # The script's LLM holds each answer `delay_s`; the check after it uses one that answers at once: what
    # is checked is the script's exit, and the next open's consolidation pass (which `stats` and `close`
    # wait for) would otherwise wait out the delay at each of its LLM calls.
    with (
        StubLLMServer(rules=MEMORY_TASK_RULES, delay_s=delay_s) as llm,
        StubLLMServer(rules=MEMORY_TASK_RULES) as at_once,
    ):
        for run in range(RUNS):
            data = tmp_path / f"run-{run}"
            child = subprocess.run(
                [sys.executable, "-c", README_PATTERN, str(data), llm.base_url],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert child.returncode == 0, (run, child.stderr)
            assert child.stderr == "", f"run {run} of {RUNS}:\n{child.stderr}"
            assert int(child.stdout) > 0

            memory = Memoryos(
                user_id="maya",
                openai_api_key="key",
                openai_base_url=at_once.base_url,
                data_storage_path=data,
                short_term_capacity=3,
            )
            try:
                stats = memory.stats()  # waits until every page is embedded and a pass has run
                assert stats.short_term_pages + stats.mid_term_pages + stats.archived_pages == TURNS, run
                assert memory.space.page_index.count() == TURNS, run
            finally:
                memory.close()
