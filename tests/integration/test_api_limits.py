"""Bad input over real HTTP: every case a 4xx whose JSON names the field, never a 5xx, never a file
outside the data directory; and backpressure when the embedding backlog is over its bound."""

import concurrent.futures
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from memoryos import MemoryConfig
from services.api.settings import ApiSettings
from services.spaces.embedded import REQUEST_THREADS
from tests.support.api_server import RunningApi, offline_config, running_api
from tests.support.fakes import BlockedEmbedder, HashEmbedder

pytestmark = pytest.mark.integration

JSON = {"content-type": "application/json"}


@contextlib.contextmanager
def stuck_embedder_api(
    settings: ApiSettings, config: MemoryConfig
) -> Iterator[tuple[RunningApi, BlockedEmbedder]]:
    """An API whose page batches wait until the test sets `embedder.release`. Released before the server
    stops, whatever the test did: stopping waits for the batch inside the embedder."""
    embedder = BlockedEmbedder()
    with running_api(settings, config, embedder=embedder) as api:
        try:
            yield api, embedder
        finally:
            embedder.release.set()


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApi]:
    settings = ApiSettings(port=0, max_body_bytes=64 * 1024, max_turns_per_batch=4)
    config = offline_config(tmp_path_factory.mktemp("root") / "data", max_text_chars=1000)
    with running_api(settings, config, embedder=HashEmbedder()) as running:
        yield running


def post_raw(api: RunningApi, url: str, body: str) -> httpx.Response:
    """`body` is JSON text as a client may send it, escapes included (`\\udcff`)."""
    return api.http.post(url, content=body.encode(), headers=JSON)


def test_a_body_over_the_limit_is_413_before_it_is_read(api: RunningApi) -> None:
    url = f"{api.space_url('maya')}/memories"
    declared = api.http.post(url, content=b"x" * (65 * 1024), headers=JSON)
    assert declared.status_code == 413 and declared.json()["error"] == "body_too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield from (b"x" * 8192 for _ in range(20))

    streamed = api.http.post(url, content=chunks(), headers=JSON)
    assert streamed.status_code == 413 and "65536" in streamed.json()["message"]


def test_too_many_turns_in_a_batch_is_422(api: RunningApi) -> None:
    turns = [{"user_input": f"u{i}", "agent_response": "a"} for i in range(5)]
    answer = api.http.post(f"{api.space_url('maya')}/memories/batch", json={"turns": turns})
    assert answer.status_code == 422 and answer.json()["field"] == "turns"
    assert "at most 4 turns" in answer.json()["message"]


def test_a_text_over_the_engines_limit_names_its_field(api: RunningApi) -> None:
    turns = [{"user_input": "ok", "agent_response": "a"}, {"user_input": "ok", "agent_response": "b" * 1001}]
    answer = api.http.post(f"{api.space_url('maya')}/memories/batch", json={"turns": turns})
    assert answer.status_code == 422
    assert (
        answer.json()["field"] == "turns[1].agent_response" and "1001 characters" in answer.json()["message"]
    )
    assert not (api.data_dir / "default" / "maya").exists()  # nothing of the batch was stored


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("memories", '{"user_input": "\\udcff", "agent_response": "a"}', "user_input"),
        ("memories", '{"user_input": "a", "agent_response": "x\\ud800y"}', "agent_response"),
        ("memories", '{"user_input": "a", "agent_response": "b", "timestamp": "\\udfff"}', "timestamp"),
        (
            "memories",
            '{"user_input": "a", "agent_response": "b", "meta_data": {"k": ["\\udcff"]}}',
            "meta_data",
        ),
        ("memories", '{"user_input": "a", "agent_response": "b", "meta_data": {"\\udcff": 1}}', "meta_data"),
        (
            "memories/batch",
            '{"turns": [{"user_input": "\\udcff", "agent_response": "a"}]}',
            "turns[0].user_input",
        ),
        ("retrieve", '{"query": "\\udcff"}', "query"),
        ("response", '{"query": "hi", "style_hint": "\\ud83d"}', "style_hint"),
    ],
)
def test_a_lone_surrogate_is_422_naming_the_field(api: RunningApi, route: str, body: str, field: str) -> None:
    answer = post_raw(api, f"{api.space_url('surrogates')}/{route}", body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == field and "surrogate" in answer.json()["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("{not json", "body"),
        ("[1, 2]", "body"),
        ('{"user_input": "a"}', "agent_response"),
        ('{"user_input": "a", "agent_response": "b", "extra": 1}', "extra"),
        ('{"user_input": "a", "agent_response": "b", "ttl_s": Infinity}', "ttl_s"),
        ('{"user_input": "a", "agent_response": "b", "ttl_s": -1}', "ttl_s"),
        ('{"user_input": "a", "agent_response": "b", "write_id": "../x"}', "write_id"),
        ('{"user_input": "a", "agent_response": "b", "timestamp": "yesterday"}', "timestamp"),
        ('{"user_input": "   ", "agent_response": "b"}', "user_input"),
        ('{"user_input": "a\\u0000", "agent_response": "b"}', "user_input"),
        ('{"user_input": "a", "agent_response": "b", "meta_data": {"x": NaN}}', "meta_data"),
        ('{"user_input": "a", "agent_response": "b", "meta_data": {"x": [Infinity]}}', "meta_data"),
        ('{"user_input": "a", "agent_response": "b", "meta_data": {"x": 1e400}}', "meta_data"),
        ('{"user_input": "a", "agent_response": "b", "meta_data": {"k\\u0000": 1}}', "meta_data"),
        ('{"user_input": "a", "agent_response": "b", "meta_data": {"k": "v\\u0000"}}', "meta_data"),
        (
            '{"user_input": "a", "agent_response": "b", "meta_data": ' + '{"a": ' * 500 + "1" + "}" * 501,
            "meta_data",
        ),
    ],
)
def test_malformed_writes_are_422_naming_the_field(api: RunningApi, body: str, field: str) -> None:
    answer = post_raw(api, f"{api.space_url('malformed')}/memories", body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == field and answer.json()["message"]
    assert len(answer.json()["message"]) < 200  # a short message, not a path through 500 levels


@pytest.mark.parametrize(
    "user_id", ["..", "..%2F..%2Fetc", "a%20b", "-lead", "x" * 200, "%2e%2e", ".hidden", "a%00b", "%C3%A9"]
)
def test_bad_ids_never_touch_a_file_outside_the_data_dir(api: RunningApi, user_id: str) -> None:
    before = sorted(p.name for p in api.data_dir.parent.iterdir())
    for answer in (
        api.http.post(
            f"{api.url}/v1/users/{user_id}/assistants/bot/memories",
            json={"user_input": "a", "agent_response": "b"},
        ),
        api.http.get(f"{api.url}/v1/users/{user_id}/assistants/bot/memories"),
        api.http.get(f"{api.url}/v1/users/maya/assistants/{user_id}/stats"),
    ):
        assert answer.status_code in (404, 422), answer.text
        assert answer.json()["message"]
    assert sorted(p.name for p in api.data_dir.parent.iterdir()) == before


@pytest.mark.parametrize(
    "path",
    [
        "memories/0",
        "memories/-1",
        "memories/abc",
        "memories/99999999999999999999999",
        "facts/1.5",
        "writes/..",
        "writes/" + "w" * 65,
    ],
)
def test_bad_item_ids_are_4xx(api: RunningApi, path: str) -> None:
    api.http.post(f"{api.space_url('items')}/memories", json={"user_input": "a", "agent_response": "b"})
    answer = api.http.get(f"{api.space_url('items')}/{path}")
    assert 400 <= answer.status_code < 500, answer.text


def test_paging_bounds_are_422(api: RunningApi) -> None:
    url = f"{api.space_url('items')}/memories"
    for params in ({"limit": 0}, {"limit": 100000}, {"offset": -1}, {"offset": 2**70}):
        answer = api.http.get(url, params=params)
        assert answer.status_code == 422 and answer.json()["field"] in ("limit", "offset")


def test_writes_over_the_backlog_bound_get_429_with_retry_after(tmp_path: Path) -> None:
    settings = ApiSettings(
        port=0,
        max_pending_pages=3,
        backpressure_retry_after_s=2,
        backpressure_retry_spread_s=0,
        sampler_interval_s=0.05,
    )
    with stuck_embedder_api(settings, offline_config(tmp_path)) as (api, embedder):
        space = api.space_url("flood")
        turns = [{"user_input": f"u{i}", "agent_response": "a"} for i in range(3)]
        assert api.http.post(f"{space}/memories/batch", json={"turns": turns}).status_code == 202
        refused = api.http.post(f"{space}/memories", json={"user_input": "one more", "agent_response": "a"})
        assert refused.status_code == 429 and refused.headers["retry-after"] == "2"
        assert refused.json()["error"] == "overloaded"
        deadline = time.monotonic() + 5  # the sampler's next figure: the 3 pages stuck in the embedder
        while "memoryos_queue_depth 3.0" not in api.http.get(f"{api.url}/metrics").text:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        embedder.release.set()
        status = api.http.get(f"{space}/memories")  # reads go on meanwhile
        assert status.status_code == 200 and status.json()["total"] == 3


def test_writes_are_acknowledged_while_reads_wait_for_the_embedder(tmp_path: Path) -> None:
    """Reads wait on their threads for the writes before them to be searchable; with the embedder stuck,
    more waiting reads than the API has request threads must not hold up the next write's acknowledgement
    (`services/spaces/embedded.py`, `WRITE_THREADS`)."""
    # No lag bound here: with the embedder stuck it would refuse the write this test acknowledges.
    settings = ApiSettings(port=0, max_write_lag_s=0)
    with stuck_embedder_api(settings, offline_config(tmp_path)) as (api, embedder):
        space = api.space_url("reader")
        first = {"user_input": "the first exchange", "agent_response": "noted"}
        assert api.http.post(f"{space}/memories", json=first).status_code == 201
        strict_read = {"query": "first", "max_vector_wait_s": 30}  # waits for the stuck embedder
        with concurrent.futures.ThreadPoolExecutor(REQUEST_THREADS + 5) as readers:
            reads = [
                readers.submit(api.http.post, f"{space}/retrieve", json=strict_read, timeout=120)
                for _ in range(REQUEST_THREADS + 5)
            ]
            time.sleep(2)  # every read has reached the server and waits for the stuck embedder
            assert not any(read.done() for read in reads)
            later = {"user_input": "written while reads wait", "agent_response": "noted"}
            written = api.http.post(f"{api.space_url('writer')}/memories", json=later, timeout=20)
            assert written.status_code == 201
            embedder.release.set()
            assert all(read.result().status_code == 200 for read in reads)


def test_writes_get_429_while_the_oldest_unembedded_write_is_older_than_the_bound(tmp_path: Path) -> None:
    """The lag bound: reads wait for the writes before them, so writes are refused while the embedder is
    that far behind, and accepted again once it catches up. Refused writes are told to come back at
    different times (3 to 7 s), not all in the same second."""
    settings = ApiSettings(
        port=0,
        max_write_lag_s=0.5,
        backpressure_retry_after_s=3,
        backpressure_retry_spread_s=4,
        sampler_interval_s=0.05,
    )
    config = offline_config(tmp_path, embedding_yield_max_s=0.2)  # below the lag bound, as required
    with stuck_embedder_api(settings, config) as (api, embedder):
        space = api.space_url("lagging")
        turn = {"user_input": "stuck in the embedder", "agent_response": "noted"}
        assert api.http.post(f"{space}/memories", json=turn).status_code == 201
        deadline = time.monotonic() + 10
        while (answer := api.http.post(f"{space}/memories", json=turn)).status_code == 201:
            assert time.monotonic() < deadline, "never refused"
            time.sleep(0.1)
        assert answer.status_code == 429 and "acknowledged" in answer.json()["message"]
        refusals = [api.http.post(f"{space}/memories", json=turn) for _ in range(20)]
        assert {r.status_code for r in refusals} == {429}
        waits = {int(r.headers["retry-after"]) for r in [*refusals, answer]}
        assert len(waits) > 1 and waits <= set(range(3, 8))
        embedder.release.set()
        deadline = time.monotonic() + 10
        while (answer := api.http.post(f"{space}/memories", json=turn)).status_code == 429:
            assert time.monotonic() < deadline, "still refused once embedded"
            time.sleep(0.1)
        assert answer.status_code == 201


def test_a_read_answers_within_its_vector_wait_says_what_it_lacked_and_is_counted(tmp_path: Path) -> None:
    """With the embedder stuck, a retrieve waits `read_vector_wait_s` for the vectors of the writes before
    it, then answers 200: the page found by its words, `pages_without_vectors` saying how many pages had
    none, and /metrics counting such reads apart. A bound over the limit, or below 0, is 422."""
    settings = ApiSettings(port=0, max_write_lag_s=0, read_vector_wait_s=0.2, max_wait_for_writes_s=5)
    with stuck_embedder_api(settings, offline_config(tmp_path)) as (api, embedder):
        space = api.space_url("reader")
        turn = {"user_input": "My zeppelin model is painted red.", "agent_response": "Lovely."}
        assert api.http.post(f"{space}/memories", json=turn).status_code == 201
        read = api.http.post(f"{space}/retrieve", json={"query": "zeppelin"}, timeout=20)
        assert read.status_code == 200, read.text
        context = read.json()
        assert context["pages_without_vectors"] == 1
        assert [p["user_input"] for p in context["short_term_memory"]] == [turn["user_input"]]
        metrics = api.http.get(f"{api.url}/metrics").text
        assert "memoryos_retrieves_without_vectors_total 1.0" in metrics
        assert "memoryos_retrieves_total 1.0" in metrics
        for bad in (6, -1):
            refused = api.http.post(f"{space}/retrieve", json={"query": "zeppelin", "max_vector_wait_s": bad})
            assert refused.status_code == 422 and "max_vector_wait_s" in refused.text
        embedder.release.set()
        complete = api.http.post(f"{space}/retrieve", json={"query": "zeppelin", "max_vector_wait_s": 5})
        assert complete.status_code == 200 and complete.json()["pages_without_vectors"] == 0
        assert complete.json()["retrieved_pages"][0]["user_input"] == turn["user_input"]
