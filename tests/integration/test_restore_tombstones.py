"""A restore must not bring a forgotten user back (docs/deploy.md, "Backups and restores").

Real components throughout: uvicorn serving the API, a real `redis-server` with AOF whose `appendonlydir`
is copied aside and put back as an operator restores it, a worker on a thread, SQLite files copied as a
volume snapshot is. Each restore is taken before a forget and put back after it; the next start must
erase the forgotten user again, keep everyone else, and keep a user written again after the forget."""

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import httpx
import pytest
import redis

from memoryos import MemoryConfig
from memoryos.space import tombstones as volume
from memoryos.space.pool import SpaceKey
from memoryos.space.tombstones import digest
from services.api.settings import ApiSettings
from services.queue import tombstones as in_redis
from services.queue.keys import Keys, shard_of, space_name
from services.queue.settings import QueueSettings
from tests.support.api_server import RunningApi, offline_config, running_api
from tests.support.fakes import HashEmbedder
from tests.support.queue_worker import Running, wait_for
from tests.support.redis_server import RedisServer, running_redis

pytestmark = pytest.mark.integration

KEY = "key-tombstones"
HEADERS = {"authorization": f"Bearer {KEY}"}
TOMBSTONES = ".tombstones"
"""`<data_dir>/.tombstones`: the one part of the data volume a restore keeps from now (docs/deploy.md)."""
NAMESPACE = "memoryos"
StreamEntries = list[tuple[bytes, dict[bytes, bytes]]]


def write(api: RunningApi, user: str, text: str, write_id: str | None = None) -> None:
    body = {"user_input": text, "agent_response": "Noted."} | ({"write_id": write_id} if write_id else {})
    answer = api.http.post(
        f"{api.space_url(user)}/memories",
        json=body,
        headers=HEADERS,
    )
    assert answer.status_code in (201, 202), answer.text


def memories(api: RunningApi, user: str) -> httpx.Response:
    return api.http.get(f"{api.space_url(user)}/memories", headers=HEADERS, timeout=30)


def forget(api: RunningApi, user: str) -> None:
    assert api.http.delete(api.space_url(user), headers=HEADERS, timeout=30).status_code == 204


def files_holding(directory: Path, text: str) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def restore_volume(data: Path, backup: Path, keep_tombstones: bool) -> None:
    """Put the data directory back from `backup`; with `keep_tombstones`, as docs/deploy.md says: the
    tombstones of now are saved first and copied over the restored ones."""
    saved = data.parent / "tombstones-now"
    if keep_tombstones and (data / TOMBSTONES).is_dir():
        shutil.copytree(data / TOMBSTONES, saved)
    shutil.rmtree(data)
    shutil.copytree(backup, data)
    if saved.is_dir():
        shutil.copytree(saved, data / TOMBSTONES, dirs_exist_ok=True)


def test_embedded_restore_of_a_forgotten_user(tmp_path: Path) -> None:
    data, backup = tmp_path / "data", tmp_path / "backup"
    settings = ApiSettings(port=0, preload_model=False, keys={KEY: "acme"})
    config = offline_config(data)
    with running_api(settings, config, embedder=HashEmbedder()) as api:
        write(api, "maya", "My locker code is ALPHA-7731")
        write(api, "noor", "I keep bees named BRAVO-2290")
    shutil.copytree(data, backup)  # the snapshot, taken with the server stopped
    with running_api(settings, config, embedder=HashEmbedder()) as api:
        forget(api, "maya")
    restore_volume(data, backup, keep_tombstones=True)
    assert files_holding(data, "ALPHA-7731")  # the restore brought her back, on disk

    with running_api(settings, config, embedder=HashEmbedder()) as api:
        assert memories(api, "maya").status_code == 404
        assert not files_holding(data, "ALPHA-7731")
        assert "BRAVO-2290" in memories(api, "noor").text  # the other user of the same copy is intact
        write(api, "maya", "Written again after the forget: CHARLIE-5108")
    with running_api(settings, config, embedder=HashEmbedder()) as api:  # a start keeps what came after
        again = memories(api, "maya")
        assert again.status_code == 200 and "CHARLIE-5108" in again.text and "ALPHA" not in again.text


def test_tombstone_holds_a_digest_and_a_time_only(tmp_path: Path) -> None:
    """No id of the forgotten user (often an email) stays on the volume, not even in its tombstone."""
    data = tmp_path / "data"
    settings = ApiSettings(port=0, preload_model=False, keys={KEY: "acme"})
    with running_api(settings, offline_config(data), embedder=HashEmbedder()) as api:
        write(api, "maya", "My locker code is ALPHA-7731")
        forget(api, "maya")
    written = list((data / TOMBSTONES).glob("*"))
    assert [path.name for path in written] == [f"{digest(SpaceKey('acme', 'maya', 'bot'))}.json"]
    assert list(json.loads(written[0].read_bytes())) == ["forgotten_at"]
    assert not files_holding(data, "maya") and not any("maya" in str(path) for path in data.rglob("*"))
    assert not files_holding(data, "ALPHA-7731")


def redis_contents(client: redis.Redis) -> bytes:
    """Every key and value Redis holds, as bytes to search for a text."""
    found = []
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        if kind == b"stream":
            value = repr(client.xrange(key))
        elif kind == b"list":
            value = repr(client.lrange(key, 0, -1))
        elif kind == b"hash":
            value = repr(client.hgetall(key))
        elif kind == b"set":
            value = repr(client.smembers(key))
        elif kind == b"zset":
            value = repr(client.zrange(key, 0, -1))
        else:
            value = repr(client.get(key))
        found.append(key + b" " + value.encode())
    return b"\n".join(found)


class Deployment:
    """Redis, the API in Redis mode (up throughout) and a worker started and stopped between phases."""

    def __init__(self, server: RedisServer, api: RunningApi, queue: QueueSettings, data: Path) -> None:
        self.server, self.api, self.queue, self.data = server, api, queue, data
        self.client = redis.Redis.from_url(server.url)
        self.workers = 0

    def worker(self) -> Running:
        self.workers += 1
        return Running(
            self.queue, MemoryConfig(data_dir=self.data, faiss_use_gpu="never"), f"w{self.workers}"
        )

    def backup_redis(self, to: Path) -> None:
        self.server.stop()
        shutil.copytree(self.server.directory / "appendonlydir", to)
        self.server.start()

    def restore_redis(self, backup: Path) -> None:
        self.server.stop()
        shutil.rmtree(self.server.directory / "appendonlydir")
        shutil.copytree(backup, self.server.directory / "appendonlydir")
        self.server.start()

    def space(self, user: str) -> Path:
        return self.data / "acme" / user / "bot"

    def forgotten(self, user: str) -> bool:
        """The forget applied: the space's directory is gone (its worker step, tombstones included, done)."""
        return not self.space(user).exists()


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    with running_redis(tmp_path / "redis") as server:
        queue = QueueSettings(
            redis_url=server.url,
            redis_namespace=NAMESPACE,
            shard_count=4,
            lease_ttl_s=2.0,
            read_timeout_s=20.0,
        )
        settings = ApiSettings(port=0, keys={KEY: "acme"})
        with running_api(settings, MemoryConfig(data_dir=tmp_path / "api-side"), queue=queue) as api:
            yield Deployment(server, api, queue, tmp_path / "data")


def test_redis_tombstone_holds_a_digest_and_a_time_only(deployment: Deployment) -> None:
    """After a forget applied by a worker, neither Redis nor the volume holds the user's id: both
    tombstones are the same digest of the key."""
    api = deployment.api
    worker = deployment.worker()
    try:
        write(api, "maya", "My locker code is ALPHA-7731")
        assert "ALPHA-7731" in memories(api, "maya").text
        forget(api, "maya")
        wait_for(lambda: deployment.forgotten("maya"))
    finally:
        worker.stop()
    expected = digest(SpaceKey("acme", "maya", "bot"))
    assert deployment.client.hkeys(f"{NAMESPACE}:tombstones") == [expected.encode()]
    assert [path.stem for path in (deployment.data / TOMBSTONES).glob("*")] == [expected]
    assert b"maya" not in redis_contents(deployment.client)
    assert not files_holding(deployment.data, "maya")


def test_redis_restored_from_before_a_forget(deployment: Deployment, tmp_path: Path) -> None:
    """Writes still queued in the backup: the forgotten user's are dropped, not applied again; a user
    written again after the forget keeps the new writes only; another user is untouched."""
    api = deployment.api
    write(api, "maya", "My locker code is ALPHA-7731", write_id="maya-locker")
    write(api, "omar", "My first pet was DELTA-4410")
    write(api, "noor", "I keep bees named BRAVO-2290")
    deployment.backup_redis(tmp_path / "aof-backup")  # all three writes queued, none applied

    worker = deployment.worker()
    assert "ALPHA-7731" in memories(api, "maya").text
    forget(api, "maya")
    forget(api, "omar")
    wait_for(lambda: deployment.forgotten("maya") and deployment.forgotten("omar"))
    write(api, "omar", "Written again after the forget: CHARLIE-5108")
    assert "CHARLIE-5108" in memories(api, "omar").text
    worker.stop()

    deployment.restore_redis(tmp_path / "aof-backup")
    assert b"ALPHA-7731" in redis_contents(deployment.client)  # the restore brought the writes back
    digests = f"{NAMESPACE}:write-digests:acme/maya/bot"
    assert deployment.client.hexists(digests, "maya-locker")  # and her write id's content digest
    worker = deployment.worker()
    try:
        contents = redis_contents(deployment.client)
        assert b"ALPHA-7731" not in contents and b"DELTA-4410" not in contents
        assert not deployment.client.sismember(f"{NAMESPACE}:spaces", "acme/maya/bot")
        assert not deployment.client.hexists(digests, "maya-locker")
        notes = [f"{NAMESPACE}:last-write:{shard}" for shard in range(deployment.queue.shard_count)]
        assert not any(deployment.client.hexists(note, "acme/maya/bot") for note in notes)
        assert deployment.client.sismember(f"{NAMESPACE}:spaces", "acme/omar/bot")  # he lives on
        assert memories(api, "maya").status_code == 404
        assert not deployment.space("maya").exists()
        omar = memories(api, "omar").text
        assert "CHARLIE-5108" in omar and "DELTA-4410" not in omar
        assert "BRAVO-2290" in memories(api, "noor").text
        assert not files_holding(deployment.data, "ALPHA-7731")
    finally:
        worker.stop()


def test_volume_restored_from_before_a_forget(deployment: Deployment, tmp_path: Path) -> None:
    """The whole data volume put back, its tombstones too (a snapshot of before the forget): Redis's
    tombstone is copied to it and the space erased again before the worker serves."""
    api = deployment.api
    worker = deployment.worker()
    write(api, "maya", "My locker code is ALPHA-7731")
    write(api, "noor", "I keep bees named BRAVO-2290")
    assert "ALPHA-7731" in memories(api, "maya").text and "BRAVO-2290" in memories(api, "noor").text
    worker.stop()
    shutil.copytree(deployment.data, tmp_path / "volume-backup")

    worker = deployment.worker()
    forget(api, "maya")
    wait_for(lambda: deployment.forgotten("maya"))
    worker.stop()
    restore_volume(deployment.data, tmp_path / "volume-backup", keep_tombstones=False)
    assert deployment.space("maya").exists()

    worker = deployment.worker()
    try:
        assert not deployment.space("maya").exists()
        assert list((deployment.data / TOMBSTONES).glob("*.json"))  # copied back from Redis
        assert memories(api, "maya").status_code == 404
        assert "BRAVO-2290" in memories(api, "noor").text
    finally:
        worker.stop()


def test_a_restored_redis_is_matched_by_hashing_each_space_name_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A digest names no space: the names Redis holds are hashed, each once however many entries carry
    it, and only the tombstoned space's entries from before its forget go."""
    maya, noor = SpaceKey("acme", "maya", "bot"), SpaceKey("acme", "noor", "bot")
    forgotten_at, keys = 1000.0, Keys(NAMESPACE)
    with running_redis(tmp_path / "redis") as server:
        client = redis.Redis.from_url(server.url)
        for key, at in (
            [(maya, forgotten_at - 1)] * 5 + [(maya, forgotten_at + 1)] + [(noor, forgotten_at - 1)] * 3
        ):
            op = json.dumps({"kind": "add_turns", "at": at})
            client.xadd(keys.writes(shard_of(key, 4)), {"space": space_name(key), "op": op})
        client.sadd(keys.spaces(), space_name(maya), space_name(noor))
        dead = {"space": space_name(maya), "op": json.dumps({"at": forgotten_at - 1})}
        client.rpush(keys.dead_letters(), json.dumps(dead))
        hashed: list[SpaceKey] = []

        def counted(key: SpaceKey) -> str:
            hashed.append(key)
            return digest(key)

        monkeypatch.setattr(volume, "digest", counted)

        dropped = in_redis.drop_before(client, keys, 4, {digest(maya): forgotten_at}, lambda _: True)
        assert dropped == {digest(maya): 6}  # five queued writes and the dead letter
        assert sorted(hashed) == [maya, noor]
        entries = [cast(StreamEntries, client.xrange(keys.writes(shard))) for shard in range(4)]
        left = [fields[b"space"] for shard in entries for _, fields in shard]
        assert sorted(left) == [b"acme/maya/bot"] + [b"acme/noor/bot"] * 3  # the write after the forget
        assert client.llen(keys.dead_letters()) == 0
