"""A script that ends without closing its `Memoryos` ends quietly and loses nothing.

The README's pattern before it used `with` — open, add a dozen turns, retrieve, let the script end —
printed a traceback ("cannot schedule new futures after interpreter shutdown") and "Task was destroyed but
it is pending!" whenever a consolidation pass was still calling the LLM at exit. The LLM here is a real HTTP server that
answers every consolidation task after a delay, so a pass is in flight when the script ends.
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


@pytest.mark.parametrize("delay_s", [0.0, 0.5], ids=["llm-at-once", "llm-in-flight-at-exit"])
def test_a_script_that_never_closes_ends_quietly_and_its_pages_are_all_there_next_time(
    tmp_path: Path, delay_s: float
) -> None:
    with StubLLMServer(rules=MEMORY_TASK_RULES, delay_s=delay_s) as llm:
        child = subprocess.run(
            [sys.executable, "-c", README_PATTERN, str(tmp_path), llm.base_url],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert child.returncode == 0, child.stderr
        assert child.stderr == ""
        assert int(child.stdout) > 0

        memory = Memoryos(
            user_id="maya",
            openai_api_key="key",
            openai_base_url=llm.base_url,
            data_storage_path=tmp_path,
            short_term_capacity=3,
        )
        try:
            stats = memory.stats()  # waits until every page is embedded and a pass has run
            assert stats.short_term_pages + stats.mid_term_pages + stats.archived_pages == TURNS
            assert memory.space.page_index.count() == TURNS
        finally:
            memory.close()
