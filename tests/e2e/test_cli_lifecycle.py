"""`memoryos list`, `delete` and `history` through the real CLI entry point (in process, real MiniLM)."""

import json
import subprocess
from pathlib import Path

import pytest

from tests.e2e.test_cli import run

pytestmark = pytest.mark.e2e


def test_delete_a_page_by_the_id_retrieve_showed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--data-dir", str(tmp_path)]
    for text in ("My locker code is zanzibar4471.", "My dog is called Pico."):
        code, _, _ = run(
            capsys, *base, "add", "--user", "maya", "--user-input", text, "--agent-response", "Ok."
        )
        assert code == 0
    code, out, _ = run(capsys, *base, "retrieve", "--user", "maya", "locker code", "--json")
    page_id = json.loads(out)["retrieved_pages"][0]["page_id"]
    code, out, _ = run(capsys, *base, "list", "--user", "maya")
    listed = json.loads(out)
    assert code == 0 and listed["total"] == 2 and listed["pages"][0]["op_id"]
    code, out, _ = run(capsys, *base, "delete", "--user", "maya", "--page", str(page_id))
    assert code == 0 and json.loads(out)["page_ids"] == [page_id]
    found = subprocess.run(["grep", "-rla", "zanzibar4471", str(tmp_path)], capture_output=True, text=True)
    assert found.stdout == ""
    code, _, err = run(capsys, *base, "delete", "--user", "maya", "--page", str(page_id))
    assert code == 3 and f"no page with id {page_id}" in err
    code, _, err = run(capsys, *base, "history", "--user", "maya", "--fact", "99")
    assert code == 3 and "no fact with id 99" in err
    with pytest.raises(SystemExit) as exited:  # argparse refuses it: exit 2, the flag named
        run(capsys, *base, "delete", "--user", "maya", "--page", "x")
    assert (
        exited.value.code == 2 and "argument --page: must be a positive integer id" in capsys.readouterr().err
    )
    code, _, err = run(capsys, *base, "delete", "--user", "nobody", "--page", "1")
    assert code == 3 and not (tmp_path / "default" / "nobody").exists()
