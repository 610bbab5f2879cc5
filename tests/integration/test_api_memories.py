"""The API over the real engine (bundled MiniLM, offline LLM) under uvicorn, over real HTTP: writes,
reads, the read contract with write ids, idempotent retries, lifecycle, bundles, metrics."""

import time
from collections.abc import Iterator

import httpx
import pytest

from services.api.settings import ApiSettings
from tests.support.api_server import RunningApi, offline_config, running_api

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApi]:
    data_dir = tmp_path_factory.mktemp("api-data")
    with running_api(ApiSettings(port=0), offline_config(data_dir)) as running:
        yield running


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30) as client:
        yield client


def turn(user_input: str, agent_response: str = "Noted.") -> dict[str, str]:
    return {"user_input": user_input, "agent_response": agent_response}


def test_a_written_exchange_is_retrieved_with_its_page_id(api: RunningApi, http: httpx.Client) -> None:
    space = api.space_url("maya")
    added = http.post(f"{space}/memories", json=turn("I adopted a dog called Pico.", "Lovely name!"))
    assert added.status_code == 201, added.text
    page_id = added.json()["page_id"]
    assert added.json()["page_ids"] == [page_id] and added.json()["write_id"]
    http.post(f"{space}/memories", json=turn("My sister lives in Lisbon."))
    found = http.post(f"{space}/retrieve", json={"query": "What is my dog called?"})
    assert found.status_code == 200, found.text
    pages = found.json()["short_term_memory"] + found.json()["retrieved_pages"]
    assert any(p["page_id"] == page_id and "Pico" in p["user_input"] for p in pages)


def test_a_batch_is_accepted_then_searchable(api: RunningApi, http: httpx.Client) -> None:
    space = api.space_url("batcher")
    turns = [
        turn(f"Fact number {i}: I collect {thing}.") for i, thing in enumerate(["stamps", "coins", "maps"])
    ]
    accepted = http.post(f"{space}/memories/batch", json={"turns": turns, "write_id": "batch-1"})
    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["write_id"] == "batch-1" and len(accepted.json()["page_ids"]) == 3
    deadline = time.monotonic() + 30
    while True:
        status = http.get(f"{space}/writes/batch-1")
        assert status.status_code == 200
        if status.json()["searchable"]:
            break
        assert time.monotonic() < deadline, "the batch never became searchable"
        time.sleep(0.05)
    assert status.json()["page_ids"] == accepted.json()["page_ids"]
    assert http.get(f"{space}/writes/never-written").status_code == 404


def test_a_read_naming_write_ids_sees_them(api: RunningApi, http: httpx.Client) -> None:
    space = api.space_url("reader")
    batch = {"turns": [turn(f"My locker code is {1000 + i}.") for i in range(20)], "write_id": "codes"}
    assert http.post(f"{space}/memories/batch", json=batch).status_code == 202
    body = {"query": "What is my locker code?", "wait_for_write_ids": ["codes"], "top_k": 20}
    found = http.post(f"{space}/retrieve", json=body)
    assert found.status_code == 200, found.text
    texts = {p["user_input"] for p in found.json()["short_term_memory"] + found.json()["retrieved_pages"]}
    assert "My locker code is 1019." in texts


def test_waiting_for_a_write_never_acknowledged_is_422_naming_the_field(
    api: RunningApi, http: httpx.Client
) -> None:
    """Not a wait that ends in a timeout (issue 57; tests/integration/test_api_write_wait.py has both modes)."""
    space = api.space_url("reader")
    body = {"query": "anything", "wait_for_write_ids": ["not-sent-yet"], "wait_timeout_s": 0.2}
    answer = http.post(f"{space}/retrieve", json=body)
    assert answer.status_code == 422 and answer.json()["field"] == "wait_for_write_ids"
    assert "not-sent-yet" in answer.json()["message"]


def test_a_retry_with_the_same_write_id_stores_nothing_twice(api: RunningApi, http: httpx.Client) -> None:
    space = api.space_url("retrier")
    body = {**turn("I moved to Porto in May."), "write_id": "chat-1-turn-1"}
    first = http.post(f"{space}/memories", json=body)
    again = http.post(f"{space}/memories", json=body)
    assert first.status_code == again.status_code == 201
    assert again.json()["page_ids"] == first.json()["page_ids"]
    assert http.get(f"{space}/memories").json()["total"] == 1


def test_memories_are_listed_in_pages(api: RunningApi, http: httpx.Client) -> None:
    space = api.space_url("lister")
    http.post(f"{space}/memories/batch", json={"turns": [turn(f"Item {i}") for i in range(5)]})
    listed = http.get(f"{space}/memories", params={"offset": 2, "limit": 2}).json()
    assert listed["total"] == 5 and [p["user_input"] for p in listed["pages"]] == ["Item 2", "Item 3"]


def test_pages_are_read_corrected_and_deleted(api: RunningApi, http: httpx.Client) -> None:
    space = api.space_url("editor")
    page_id = http.post(f"{space}/memories", json=turn("My cat is called Tom.")).json()["page_id"]
    assert http.get(f"{space}/memories/{page_id}").json()["user_input"] == "My cat is called Tom."
    edited = http.patch(f"{space}/memories/{page_id}", json={"user_input": "My cat is called Tim."})
    assert edited.status_code == 200 and edited.json()["page_id"] == page_id
    assert edited.json()["user_input"] == "My cat is called Tim."
    deleted = http.delete(f"{space}/memories/{page_id}")
    assert deleted.status_code == 200 and page_id in deleted.json()["page_ids"]
    assert http.get(f"{space}/memories/{page_id}").json()["error"] == "item_not_found"
    assert http.get(f"{space}/facts/999999/history").status_code == 404
    assert isinstance(http.get(f"{space}/facts", params={"kind": "assistant"}).json(), list)


def test_reads_of_an_unknown_user_are_404_and_create_nothing(api: RunningApi, http: httpx.Client) -> None:
    space = api.space_url("nobody")
    answers = [
        http.post(f"{space}/retrieve", json={"query": "hello"}),
        http.get(f"{space}/memories"),
        http.get(f"{space}/stats"),
        http.get(f"{space}/profile"),
        http.get(f"{space}/export"),
        http.delete(space),
    ]
    assert [a.status_code for a in answers] == [404] * len(answers)
    assert answers[0].json() == {
        "error": "space_not_found",
        "message": "no memory for user 'nobody' (assistant 'bot')",
        "field": None,
    }
    assert not (api.data_dir / "default" / "nobody").exists()


def test_forget_erases_the_space(api: RunningApi, http: httpx.Client) -> None:
    space = api.space_url("leaver")
    http.post(f"{space}/memories", json=turn("Please forget me later."))
    assert (api.data_dir / "default" / "leaver").is_dir()
    assert http.delete(space).status_code == 204
    assert http.get(f"{space}/memories").status_code == 404
    assert not (api.data_dir / "default" / "leaver").exists()


def test_an_export_imports_into_another_user(api: RunningApi, http: httpx.Client) -> None:
    source = api.space_url("exporter")
    http.post(f"{source}/memories", json=turn("I play the cello."))
    bundle = http.get(f"{source}/export")
    assert bundle.status_code == 200 and bundle.headers["content-type"] == "application/zip"
    target = api.space_url("importer")
    imported = http.post(f"{target}/import", content=bundle.content)
    assert imported.status_code == 201, imported.text
    assert imported.json()["counts"]["pages"] == 1
    assert http.get(f"{target}/memories").json()["pages"][0]["user_input"] == "I play the cello."
    again = http.post(f"{target}/import", content=bundle.content)
    assert again.status_code == 409


def test_a_response_is_generated_from_memory(api: RunningApi, http: httpx.Client) -> None:
    space = api.space_url("asker")
    http.post(f"{space}/memories", json=turn("My favourite colour is teal."))
    answer = http.post(f"{space}/response", json={"query": "What is my favourite colour?"})
    assert answer.status_code == 200 and "teal" in answer.json()["response"].lower()
    assert http.get(f"{space}/profile").status_code == 200
    assert http.get(f"{space}/stats").json()["short_term_pages"] == 2


def test_metrics_name_routes_by_template(api: RunningApi, http: httpx.Client) -> None:
    http.post(f"{api.space_url('metered')}/memories", json=turn("Count me."))
    text = http.get(f"{api.url}/metrics").text
    for name in (
        "memoryos_http_request_duration_seconds_bucket",
        "memoryos_queue_depth",
        "memoryos_write_lag_seconds",
        "memoryos_embed_batch_size_count",
        "memoryos_embed_batch_size_sum",
    ):
        assert name in text
    assert 'route="/v1/users/{user_id}/assistants/{assistant_id}/memories"' in text
    assert "metered" not in text
