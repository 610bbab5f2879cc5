"""The typed client, sync and async, and the CLI's `--api-url`, against a running server."""

import asyncio
import json
from collections.abc import Iterator

import pytest

from memoryos.cli.main import main as cli_main
from memoryos.types import PageList, RetrievedContext
from services.api.settings import ApiSettings
from services.client import ApiError, AsyncMemoryClient, MemoryClient
from tests.support.api_server import RunningApi, offline_config, running_api
from tests.support.fakes import HashEmbedder

pytestmark = pytest.mark.integration

KEY = "client-test-key-0123456789"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApi]:
    config = offline_config(tmp_path_factory.mktemp("client-data"))
    with running_api(ApiSettings(port=0, keys={KEY: "acme"}), config, embedder=HashEmbedder()) as running:
        yield running


def test_the_sync_client_writes_and_reads_typed_results(api: RunningApi) -> None:
    with MemoryClient(api.url, KEY) as client:
        added = client.add("maya", "I adopted a dog called Pico.", "Lovely!", write_id="c-1")
        batch = client.add_batch("maya", [{"user_input": "I live in Lyon.", "agent_response": "Nice."}])
        context = client.retrieve("maya", "dog Pico", wait_for_write_ids=[batch.write_id], top_k=5)
        assert isinstance(context, RetrievedContext)
        assert added.page_id in {p.page_id for p in context.short_term_memory + context.retrieved_pages}
        assert client.write_status("maya", "c-1").page_ids == [added.page_id]
        listed = client.list_pages("maya")
        assert isinstance(listed, PageList) and listed.total == 2
        assert client.delete_page("maya", added.page_id).page_ids == [added.page_id]
        assert client.stats("maya").short_term_pages == 1


def test_errors_raise_api_error_with_the_field(api: RunningApi) -> None:
    with MemoryClient(api.url, KEY) as client:
        with pytest.raises(ApiError) as bad:
            client.add("maya", "", "empty input")
        assert bad.value.status == 422 and bad.value.field == "user_input"
        with pytest.raises(ApiError) as missing:
            client.retrieve("nobody", "anything")
        assert missing.value.status == 404 and missing.value.code == "space_not_found"
    with MemoryClient(api.url, "wrong-key") as intruder, pytest.raises(ApiError) as denied:
        intruder.stats("maya")
    assert denied.value.status == 401


def test_the_async_client_shares_the_routes(api: RunningApi) -> None:
    async def scenario() -> tuple[int, str]:
        async with AsyncMemoryClient(api.url, KEY) as client:
            added = await client.add("async-user", "My bike is red.", "Noted.")
            context = await client.retrieve("async-user", "bike colour")
            return added.page_id, context.short_term_memory[0].user_input

    page_id, text = asyncio.run(scenario())
    assert page_id == 1 and text == "My bike is red."


def test_the_cli_asks_a_running_server(
    api: RunningApi, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORYOS_API_KEY", KEY)
    remote = ["--api-url", api.url]
    assert (
        cli_main(
            ["add", "--user", "cli-user", "--user-input", "I sing.", "--agent-response", "Nice.", *remote]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out) == {"page_ids": [1]}
    assert cli_main(["retrieve", "--user", "cli-user", "sing", "--json", *remote]) == 0
    assert json.loads(capsys.readouterr().out)["short_term_memory"][0]["user_input"] == "I sing."
    assert cli_main(["stats", "--user", "cli-user", "--json", *remote]) == 0
    assert json.loads(capsys.readouterr().out)["short_term_pages"] == 1
    assert cli_main(["retrieve", "--user", "ghost", "hello", *remote]) == 3
    assert "no memory for user 'ghost'" in capsys.readouterr().err
    assert cli_main(["stats", "--user", "ghost", "--json", *remote]) == 0
    assert json.loads(capsys.readouterr().out)["space_exists"] is False
    assert cli_main(["add", "--user", "cli-user", "--user-input", "", "--agent-response", "x", *remote]) == 2
    assert not (api.data_dir.parent / "memoryos_data").exists()
