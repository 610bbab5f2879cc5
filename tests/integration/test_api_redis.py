"""The API with `--redis-url` (uvicorn on a free port, real HTTP, a real `redis-server`): writes are
acknowledged once Redis holds them, before any worker runs; every other route is answered by the worker
that owns the space (on a thread here, as in `test_queue_worker.py`); MCP over HTTP works the same way."""

import json
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
import redis

from memoryos import MemoryConfig
from memoryos.errors import StorageError
from memoryos.space.pool import SpaceKey
from services.api.settings import ApiSettings
from services.client import ApiError, MemoryClient
from services.queue.keys import Keys, shard_of
from services.queue.producer import WriteQueue
from services.queue.settings import QueueSettings
from tests.integration.test_mcp_http import connect, ok
from tests.support.api_server import RunningApi, running_api
from tests.support.fakes import BlockedEmbedder
from tests.support.queue_worker import Running, wait_for
from tests.support.redis_server import RedisServer, running_redis

pytestmark = pytest.mark.integration

KEYS = {"key-acme": "acme", "key-globex": "globex"}


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with running_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
def queue(redis_server: RedisServer, request: pytest.FixtureRequest) -> QueueSettings:
    """A namespace per test: tests share the server, never keys."""
    return QueueSettings(
        redis_url=redis_server.url,
        redis_namespace=f"api{abs(hash(request.node.name)) % 10**8}",
        shard_count=4,
        lease_ttl_s=1.0,
        read_timeout_s=5.0,
    )


@pytest.fixture
def config(tmp_path: Path) -> MemoryConfig:
    return MemoryConfig(data_dir=tmp_path / "data", faiss_use_gpu="never")


@pytest.fixture
def api(queue: QueueSettings, tmp_path: Path) -> Iterator[RunningApi]:
    settings = ApiSettings(keys=KEYS, port=0)
    # The API's own MemoryConfig points elsewhere: it must never open the workers' data directory.
    api_config = MemoryConfig(data_dir=tmp_path / "api-side")
    with running_api(settings, api_config, queue=queue) as running:
        yield running


def redis_keys(queue: QueueSettings) -> list[bytes]:
    return list(redis.Redis.from_url(queue.redis_url).scan_iter(f"{queue.redis_namespace}:*"))


def client(api: RunningApi, key: str = "key-acme") -> MemoryClient:
    return MemoryClient(api.url, api_key=key, timeout_s=30)


def test_writes_are_acknowledged_by_redis_alone_and_applied_in_order_by_the_owner(
    api: RunningApi, queue: QueueSettings, config: MemoryConfig, tmp_path: Path
) -> None:
    memory = client(api)
    assert api.http.get(f"{api.url}/readyz").status_code == 200  # Redis answers: ready with no worker
    added = memory.add("maya", "I adopted a dog called Pico.", "Lovely name!", write_id="w-dog")
    assert added.page_id is None and added.page_ids == []  # the owner assigns them when it applies
    batch = memory.add_batch(
        "maya", [{"user_input": f"Note {i}: topic {i}.", "agent_response": "Noted."} for i in range(5)]
    )
    with pytest.raises(ApiError) as no_owner:
        memory.stats("maya")
    assert no_owner.value.status == 503 and no_owner.value.retry_after_s is not None
    scraped = api.http.get(f"{api.url}/metrics").text
    assert "memoryos_queue_depth 2.0" in scraped  # two writes wait in Redis
    assert not (tmp_path / "api-side").exists()  # the API opened no space

    worker = Running(queue, config, "w-api")
    try:
        context = memory.retrieve(
            "maya", "What is my dog called?", wait_for_write_ids=["w-dog", batch.write_id], top_k=3
        )
        assert any("Pico" in page.user_input for page in context.retrieved_pages + context.short_term_memory)
        listed = memory.list_pages("maya")
        assert [page.user_input for page in listed.pages] == ["I adopted a dog called Pico."] + [
            f"Note {i}: topic {i}." for i in range(5)
        ]
        status = memory.write_status("maya", "w-dog")
        assert status.searchable and status.page_ids == [listed.pages[0].page_id]
        assert memory.add("maya", "I adopted a dog called Pico.", "Lovely name!", write_id="w-dog")  # retry
        assert memory.list_pages("maya").total == 6  # stored once
        assert "memoryos_queue_depth 0.0" in api.http.get(f"{api.url}/metrics").text
    finally:
        worker.stop()


def test_every_lifecycle_route_reaches_the_owner_and_tenants_stay_apart(
    api: RunningApi, queue: QueueSettings, config: MemoryConfig
) -> None:
    acme, globex = client(api), client(api, "key-globex")
    acme.add_batch("rui", [{"user_input": f"Rui note {i}.", "agent_response": "Ok."} for i in range(3)])
    worker = Running(queue, config, "w-life")
    try:
        first, second, third = acme.list_pages("rui").pages
        assert acme.get_page("rui", first.page_id).user_input == "Rui note 0."
        assert (
            acme.update_page("rui", second.page_id, user_input="Rui note one.").user_input == "Rui note one."
        )
        assert acme.delete_page("rui", third.page_id).page_ids == [third.page_id]
        with pytest.raises(ApiError) as gone:
            acme.get_page("rui", third.page_id)
        assert (gone.value.status, gone.value.code) == (404, "item_not_found")
        assert acme.facts("rui") == [] or all(fact.entry_id for fact in acme.facts("rui"))
        acme.consolidate("rui")
        stats = acme.stats("rui")
        assert stats.short_term_pages + stats.mid_term_pages == 2
        assert stats.storage_bytes is not None and stats.storage_bytes > 0  # the playground's storage size
        with pytest.raises(ApiError) as other_tenant:  # globex's key names globex's own (empty) rui
            globex.list_pages("rui")
        assert (other_tenant.value.status, other_tenant.value.code) == (404, "space_not_found")
        assert "data" not in other_tenant.value.message  # no worker path leaks into the message
        with pytest.raises(ApiError) as bad:
            acme.update_page("rui", first.page_id, user_input="")
        assert bad.value.status == 422 and bad.value.field == "user_input"
        bundle = acme.export_bundle("rui")  # written by the owner, through Redis
        assert bundle[:2] == b"PK"
        report = acme.import_bundle("rui-copy", bundle)
        assert report.counts["pages"] == 2 and report.space == "rui-copy/default_assistant_profile"
        copied = [page.user_input for page in acme.list_pages("rui-copy").pages]
        assert copied == [page.user_input for page in acme.list_pages("rui").pages]
        with pytest.raises(ApiError) as again:
            acme.import_bundle("rui-copy", bundle)
        assert (again.value.status, again.value.code) == (409, "conflict")
        with pytest.raises(ApiError) as damaged:
            acme.import_bundle("zed", b"PK not a bundle")
        assert (
            damaged.value.status == 422 and not config.space_dir("zed", "default_assistant_profile").exists()
        )
        assert not any(Keys(queue.redis_namespace).bundle("") in k.decode() for k in redis_keys(queue))

        acme.forget("rui")
        wait_for(lambda: not config.space_dir("rui", "default_assistant_profile").exists())
        with pytest.raises(ApiError) as forgotten:
            acme.stats("rui")
        assert forgotten.value.status == 404
        assert not (config.data_dir / "globex").exists()  # globex's reads created nothing
    finally:
        worker.stop()


def test_forget_purges_writes_no_worker_applied_yet(
    api: RunningApi, queue: QueueSettings, redis_server: RedisServer
) -> None:
    memory = client(api)
    memory.add("lena", "My secret is 4321.", "Noted.")
    memory.forget("lena")
    stream_text = b"".join(
        value
        for shard in range(queue.shard_count)
        for _, fields in redis.Redis.from_url(redis_server.url).xrange(
            Keys(queue.redis_namespace).writes(shard)
        )
        for value in fields.values()
    )
    assert b"4321" not in stream_text and b"forget_space" in stream_text


def test_mcp_tools_work_through_the_queue(
    api: RunningApi, queue: QueueSettings, config: MemoryConfig
) -> None:
    worker = Running(queue, config, "w-mcp")
    try:
        with ExitStack() as stack:
            session = connect(api, "key-acme", stack)
            added = ok(
                session.tool(
                    "add_memory", user_input="My cat is called Miso.", agent_response="Cute!", user_id="ana"
                )
            )
            assert added["details"]["page_id"] is None and added["details"]["write_id"]
            wait_for(lambda: ok(session.tool("retrieve_memory", query="cat", user_id="ana"))["space_exists"])
            found = ok(session.tool("retrieve_memory", query="What is my cat called?", user_id="ana"))
            pages = found["short_term_memory"] + found["retrieved_pages"]
            assert any("Miso" in page["user_input"] for page in pages)
            profile = ok(session.tool("get_user_profile", user_id="ana"))
            assert profile["space_exists"] and profile["user_knowledge"] is not None
            missing = session.tool("delete_memory", page_id=999, user_id="ana")
            assert missing.is_error and "999" in str(missing.content)  # the engine's message, via the owner
            assert ok(session.tool("retrieve_memory", query="cat", user_id="nobody"))["space_exists"] is False
    finally:
        worker.stop()


def test_dead_letters_are_listed_to_their_tenant_only_and_go_with_a_forget(
    api: RunningApi, queue: QueueSettings, config: MemoryConfig, redis_server: RedisServer
) -> None:
    acme, globex = client(api), client(api, "key-globex")
    acme.add("rui", "Before the poison.", "Ok.")
    keys = Keys(queue.redis_namespace)
    space = SpaceKey("acme", "rui", "default_assistant_profile")  # the client's default assistant
    stream = keys.writes(shard_of(space, queue.shard_count))
    poison = '{"kind": "add_turns", "write_id": "w-poison", "turns": "my secret papaya"}'
    redis.Redis.from_url(redis_server.url).xadd(
        stream, {"space": "acme/rui/default_assistant_profile", "op": poison}
    )
    worker = Running(queue, config, "w-dead")
    try:
        wait_for(lambda: dead_letters(api, "key-acme") != [])
        (letter,) = dead_letters(api, "key-acme")
        assert (letter["user_id"], letter["kind"], letter["write_id"]) == ("rui", "add_turns", "w-poison")
        assert "papaya" not in json.dumps(letter)  # the tenant sees why, never the text (a word no
        # entry id holds: "777" failed once, inside the stream id 1795777308356-0)
        assert dead_letters(api, "key-globex") == []
        assert [page.user_input for page in acme.list_pages("rui").pages] == ["Before the poison."]
        with pytest.raises(ApiError):
            globex.list_pages("rui")
        acme.forget("rui")
        assert dead_letters(api, "key-acme") == []
        assert b"papaya" not in b"".join(
            redis.Redis.from_url(redis_server.url).lrange(keys.dead_letters(), 0, -1)
        )
    finally:
        worker.stop()


def dead_letters(api: RunningApi, key: str) -> list[dict[str, object]]:
    response = api.http.get(f"{api.url}/v1/dead-letters", headers={"authorization": f"Bearer {key}"})
    assert response.status_code == 200, response.text
    letters: list[dict[str, object]] = response.json()
    return letters


def test_a_write_to_a_full_shard_stream_gets_429_with_spread_retry_after(
    queue: QueueSettings, tmp_path: Path
) -> None:
    """No worker runs, so the shard's stream fills: further writes are refused, nothing queued, and the
    refused clients are told to come back at different times within the configured window (3 to 7 s),
    not all in the same next second."""
    settings = ApiSettings(
        keys=KEYS, port=0, backpressure_retry_after_s=3, backpressure_retry_spread_s=4, max_write_lag_s=0
    )
    full = queue.model_copy(update={"queue_max_entries": 1})
    with running_api(settings, MemoryConfig(data_dir=tmp_path / "api-side"), queue=full) as running:
        space = f"{running.space_url('ann')}/memories"
        acme = {"Authorization": "Bearer key-acme"}
        turn = {"user_input": "queued while no worker runs", "agent_response": "noted"}
        assert running.http.post(space, json=turn, headers=acme).status_code == 201
        refusals = [running.http.post(space, json=turn, headers=acme) for _ in range(20)]
    assert {r.status_code for r in refusals} == {429}
    assert {r.json()["error"] for r in refusals} == {"overloaded"}
    waits = {int(r.headers["retry-after"]) for r in refusals}
    assert len(waits) > 1 and waits <= set(range(3, 8)), waits


def first_refusal(api: RunningApi, url: str, turn: dict[str, str], headers: dict[str, str]) -> httpx.Response:
    """Writes `turn` until a write is refused, as it must be within 10 s: that refusal, a 429. Each write
    before it is acknowledged (201)."""
    deadline = time.monotonic() + 10
    while (answer := api.http.post(url, json=turn, headers=headers)).status_code == 201:
        assert time.monotonic() < deadline, "writes never refused"
        time.sleep(0.05)
    assert answer.status_code == 429, answer.text
    return answer


def test_writes_get_429_while_the_oldest_queued_write_waits_past_the_lag_bound(
    queue: QueueSettings, config: MemoryConfig, tmp_path: Path
) -> None:
    """A read waits until its space's writes are applied: writes are refused while the oldest write not yet
    applied is older than `max_write_lag_s`, so reads never wait behind an unbounded queue. Reads are never
    refused for it; once a worker applies the queue, writes are accepted again."""
    settings = ApiSettings(keys=KEYS, port=0, max_write_lag_s=0.5, sampler_interval_s=0.05)
    with running_api(settings, MemoryConfig(data_dir=tmp_path / "api-side"), queue=queue) as running:
        space = running.space_url("ann")
        acme = {"Authorization": "Bearer key-acme"}
        turn = {"user_input": "queued while no worker runs", "agent_response": "noted"}
        assert running.http.post(f"{space}/memories", json=turn, headers=acme).status_code == 201
        # No worker: the write stays queued past the bound, and the sampler sees it.
        refused = first_refusal(running, f"{space}/memories", turn, acme)
        assert "not applied" in refused.json()["message"] and refused.headers["retry-after"]
        worker = Running(queue, config, "w-lag")
        try:
            deadline = time.monotonic() + 30
            while (
                answer := running.http.post(f"{space}/memories", json=turn, headers=acme)
            ).status_code == 429:
                assert time.monotonic() < deadline, "writes still refused after the queue was applied"
                time.sleep(0.1)
            assert answer.status_code == 201
            read = running.http.post(f"{space}/retrieve", json={"query": "queued"}, headers=acme, timeout=30)
            assert read.status_code == 200
        finally:
            worker.stop()


def test_a_worker_behind_on_embedding_leaves_new_writes_queued_so_the_api_refuses_them(
    queue: QueueSettings, config: MemoryConfig, tmp_path: Path
) -> None:
    """Applying is cheaper than embedding: a worker that took every write while its embedder lagged held
    a backlog the API could not see, and reads waited for it. While its oldest page waits past
    `worker_max_embedding_lag_s`, the worker leaves new writes in the stream, where the API's lag bound
    refuses more (429); once the embedder catches up, both move again."""
    embedder = BlockedEmbedder()
    settings = ApiSettings(keys=KEYS, port=0, max_write_lag_s=0.5, sampler_interval_s=0.05)
    holding = queue.model_copy(update={"worker_max_embedding_lag_s": 0.2})
    acme = {"Authorization": "Bearer key-acme"}
    turn = {"user_input": "written while the embedder is stuck", "agent_response": "noted"}
    worker = Running(holding, config, "w-behind", embedder=embedder)
    try:
        with running_api(settings, MemoryConfig(data_dir=tmp_path / "api-side"), queue=holding) as running:
            space = f"{running.space_url('ann')}/memories"
            assert (
                running.http.post(space, json=turn, headers=acme).status_code == 201
            )  # applied, not embedded
            wait_for(
                lambda: (
                    worker.worker.consumer is not None
                    and not WriteQueue(redis.Redis.from_url(queue.redis_url), holding).depth()
                )
            )
            time.sleep(0.4)  # its page now waits past the worker's bound
            assert running.http.post(space, json=turn, headers=acme).status_code == 201  # queued, left there
            first_refusal(running, space, turn, acme)  # ... past the API's bound
            embedder.release.set()
            deadline = time.monotonic() + 30
            while (answer := running.http.post(space, json=turn, headers=acme)).status_code == 429:
                assert time.monotonic() < deadline, "writes still refused after the embedder caught up"
                time.sleep(0.1)
            assert answer.status_code == 201
    finally:
        embedder.release.set()
        worker.stop()


def test_a_read_of_a_page_the_worker_cannot_embed_yet_answers_within_its_vector_wait(
    queue: QueueSettings, config: MemoryConfig, tmp_path: Path
) -> None:
    """Redis mode: the owning worker's read waits `read_vector_wait_s` for the vectors (the embedder is
    stuck), then answers with the page in short-term memory and `pages_without_vectors` 1 — not the 503
    of a read that waited past the API's timeout for the owner."""
    embedder = BlockedEmbedder()
    settings = ApiSettings(keys=KEYS, port=0, max_write_lag_s=0, read_vector_wait_s=0.2)
    acme = {"Authorization": "Bearer key-acme"}
    turn = {"user_input": "My zeppelin model is painted red.", "agent_response": "Lovely."}
    worker = Running(queue, config, "w-vector-wait", embedder=embedder)
    try:
        with running_api(settings, MemoryConfig(data_dir=tmp_path / "api-side"), queue=queue) as running:
            space = running.space_url("ann")
            written = running.http.post(f"{space}/memories", json=turn, headers=acme)
            assert written.status_code == 201
            body = {"query": "zeppelin", "wait_for_write_ids": [written.json()["write_id"]]}
            read = running.http.post(f"{space}/retrieve", json=body, headers=acme, timeout=30)
            assert read.status_code == 200, read.text
            assert read.json()["pages_without_vectors"] == 1
            assert [p["user_input"] for p in read.json()["short_term_memory"]] == [turn["user_input"]]
    finally:
        embedder.release.set()
        worker.stop()


def test_a_forget_that_fails_is_answered_202_retried_and_shown_never_dead_lettered(
    queue: QueueSettings, config: MemoryConfig, tmp_path: Path
) -> None:
    """The owner's erase fails (a store that cannot be written, say) until the failure clears: the API
    answers 202 with where to look, the forget is retried after growing pauses, `/readyz` and `/metrics`
    count it meanwhile, it never reaches the dead letters, and once the erase succeeds the space is gone
    and the count is back to nothing. An erase that works is answered 204 once done.

    The 202 comes once the read timeout passes, while the retries' pauses double: a read timeout of 1.5 s
    (the fixture's is 5 s; this worker's reads, hashed embedder, take milliseconds) keeps both short."""
    short = queue.model_copy(update={"read_timeout_s": 1.5})
    settings = ApiSettings(keys=KEYS, port=0)
    with running_api(settings, MemoryConfig(data_dir=tmp_path / "api-side"), queue=short) as api:
        memory = client(api)
        worker = Running(short, config, "w-forget")
        try:
            memory.add("lena", "My secret is 4321.", "Noted.")
            memory.add("omar", "Mine is 1234.", "Noted.")
            assert memory.stats("lena").short_term_pages == 1
            broken = threading.Event()
            broken.set()
            forget = worker.worker.spaces.forget

            def failing_forget(*args: object, **kwargs: object) -> object:
                if broken.is_set():
                    raise StorageError("the memory store could not be written: disk I/O error")
                return forget(*args, **kwargs)  # type: ignore[arg-type]

            worker.worker.spaces.forget = failing_forget  # type: ignore[method-assign]
            answer = api.http.delete(
                f"{api.url}/v1/users/lena/assistants/default_assistant_profile",
                headers={"Authorization": "Bearer key-acme"},
                timeout=30,
            )
            assert answer.status_code == 202
            assert answer.headers["Location"] == "/v1/users/lena/assistants/default_assistant_profile/stats"
            wait_for(lambda: api.http.get(f"{api.url}/readyz").json().get("forgets_failing") == 1)
            assert api.http.get(f"{api.url}/readyz").status_code == 200  # still serving
            assert "memoryos_forgets_failing 1.0" in api.http.get(f"{api.url}/metrics").text
            broken.clear()
            wait_for(lambda: api.http.get(f"{api.url}/readyz").json() == {"status": "ready"})
            with pytest.raises(ApiError) as gone:
                memory.stats("lena")
            assert gone.value.status == 404
            assert dead_letters(api, "key-acme") == []
            assert memory.forget("omar") is True  # erased by the time the API answered: 204
            with pytest.raises(ApiError):
                memory.stats("omar")
        finally:
            worker.stop()
