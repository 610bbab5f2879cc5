"""What the API's start-up loaded is kept out of Python's full collections while it serves, and given back
to them when it stops (`services/api/lifespan.py`)."""

import gc
from pathlib import Path

import httpx

from services.api.settings import ApiSettings
from tests.support.api_server import offline_config, running_api


def test_startup_objects_are_frozen_while_serving_and_unfrozen_after(tmp_path: Path) -> None:
    gc.unfreeze()  # whatever an earlier test left
    with running_api(ApiSettings(port=0), offline_config(tmp_path)) as api:
        frozen = gc.get_freeze_count()
        space = api.space_url("alice")
        written = httpx.post(
            f"{space}/memories", json={"user_input": "I keep bees", "agent_response": "Nice"}
        )
        assert written.status_code == 201
        assert frozen > 10_000, f"{frozen} objects frozen: start-up's modules and model are not"
    assert gc.get_freeze_count() == 0
