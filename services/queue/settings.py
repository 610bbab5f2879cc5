"""Settings of the Redis queue, read by the API (producer) and the workers (consumers) alike."""

from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def redacted_url(url: str) -> str:
    """`url` without its user and password, for printing: a Redis URL may carry a password."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return parts._replace(netloc=netloc).geturl()


class QueueSettings(BaseSettings):
    """Every default with its reason; environment variables `MEMORYOS_<NAME>`."""

    model_config = SettingsConfigDict(env_prefix="MEMORYOS_", extra="ignore")

    redis_url: str = Field("redis://127.0.0.1:6379/0", description="The Redis holding queue and leases.")
    redis_socket_timeout_s: float = Field(
        10.0,
        gt=1.0,
        description="A Redis command unanswered this long fails (services/queue/connection.py); blocking "
        "waits are sliced below it.",
    )
    redis_max_connections: int = Field(
        512, ge=1, description="Connections one process opens to Redis at most; more requests wait for one."
    )
    redis_namespace: str = Field(
        "memoryos", pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="Prefix of every key: deployments apart."
    )
    shard_count: int = Field(
        64, ge=1, le=4096, description="Spaces hash onto this many shards; a worker owns whole shards."
    )
    lease_ttl_s: float = Field(
        10.0, gt=0.5, description="A dead worker's shards move after this (plus a renewal period)."
    )
    queue_max_entries: int = Field(
        100_000, ge=1, description="Unapplied writes per shard before writes are refused with 503."
    )
    queue_soft_limit_fraction: float = Field(
        0.8,
        gt=0,
        le=1,
        description="The API refuses writes (503 queue_full) once Redis's used memory reaches this share of "
        "its maxmemory, read from INFO memory; forgets still pass. The room above it keeps the workers "
        "draining and forgets accepted while Redis is nearly full (services/queue/redis_full.py). 1: only "
        "Redis's own maxmemory refuses.",
    )
    queue_soft_limit_bytes: int | None = Field(
        None,
        ge=1,
        description="The same limit as an absolute size of used memory, for a managed Redis whose INFO hides "
        "maxmemory; when set, it replaces queue_soft_limit_fraction.",
    )
    write_digest_ttl_s: int = Field(
        3600,
        ge=1,
        description="How long the API remembers a caller's write id with its content's digest, to refuse "
        "(409) the id reused for other content before acknowledging it (services/queue/producer.py). Later, "
        "the worker's op log still refuses such a write: it is dead-lettered, never stored.",
    )
    max_deliveries: int = Field(
        5, ge=1, description="Deliveries of one write that failed to apply before it is dead-lettered."
    )
    read_timeout_s: float = Field(
        10.0, gt=0, description="How long the API waits for the owning worker's answer to a read."
    )
    bundle_timeout_s: float = Field(
        300.0, gt=0, description="How long the API waits for the owner to export or import a bundle."
    )
    reindex_timeout_s: float = Field(
        3600.0,
        gt=0,
        description="How long a reindex job waits for the owner to re-embed a space (every page and fact "
        "through the model: minutes for a large space on CPU).",
    )
    reindex_retries: int = Field(
        3, ge=0, description="rq retries of a reindex job that failed (no owner yet, a worker restarted)."
    )
    bundle_job_retries: int = Field(
        3,
        ge=0,
        description="rq retries of an export or import job that failed (no owner yet, a worker restarted).",
    )
    job_result_ttl_s: int = Field(
        3600,
        ge=60,
        description="How long a finished job's status and result are kept, and with them an export job's "
        "bundle in Redis for its download (and an import job's upload for the job to run, retries included).",
    )
    max_held_bundles_mb: int = Field(
        1024,
        ge=1,
        description="Bundles Redis may hold at once (exports awaiting download, uploads awaiting import): "
        "beyond it new bundle jobs are refused (503), so bundles never fill the Redis that holds the writes.",
    )
    max_queued_bundle_mb: int = Field(
        256, ge=1, description="Largest bundle that crosses Redis for an export or import (it holds it once)."
    )
    batch_entries: int = Field(256, ge=1, description="Stream entries one worker read takes per shard.")
    write_run: int = Field(
        64,
        ge=1,
        description="Queued writes of one space a worker applies in one transaction (1: each on its own).",
    )
    worker_memory_budget_mb: int = Field(
        4096,
        ge=16,
        description="Resident memory of the spaces a worker process keeps open (LRU beyond it). Unset, in "
        "a container with a memory limit, each process gets its share of that limit instead (less "
        "worker_model_memory_mb and worker_process_memory_mb, services/worker/memory_budget.py); 4096 without one.",
    )
    worker_model_memory_mb: int = Field(
        3072,
        ge=0,
        description="Memory the embedding model takes where it loads (the host's embedding engine, or each "
        "worker process without one): weights, runtime and batches (an estimate: torch with CUDA alone "
        "takes one to two GiB of host memory). Taken off the container's limit before the open spaces' budget.",
    )
    worker_process_memory_mb: int = Field(
        1024,
        ge=0,
        description="Memory each worker process takes besides its open spaces: the interpreter and "
        "libraries, a batch of writes in flight, a bundle being imported (max_queued_bundle_mb). Taken off "
        "the container's limit, once per process, before the open spaces' budget.",
    )
    sweep_interval_s: int = Field(
        300, ge=1, description="How often rq's cron asks every space's owner to erase what expired."
    )
    worker_metrics_port: int = Field(
        9400,
        ge=0,
        le=65535,
        description="Where a worker serves /metrics for Prometheus (0: not served); with worker_processes "
        "N, process i serves on this port + i.",
    )
    worker_processes: int = Field(
        1,
        ge=1,
        le=256,
        description="Worker processes `memoryos worker` runs on this host, each owning its share of the "
        "shards and applying on its own core; they embed through one embedding engine, which holds the model "
        "once for the host (worker_embedding_engine). "
        "services/worker/processes.py.",
    )
    worker_embedding_engine: bool | None = Field(
        None,
        description="Run one embedding engine process beside the worker processes of this host: the model "
        "loaded once, the texts of every process batched together (memoryos/embedding/engine/). None: on "
        "when worker_processes > 1. Not started where MEMORYOS_EMBEDDING_ENGINE_SOCKET names one run apart.",
    )
    worker_health_port: int = Field(
        9399,
        ge=0,
        le=65535,
        description="Where `memoryos worker` answers its probes (0: not served): GET /livez 200 while the "
        "worker (with worker_processes N, the supervisor's loop) runs; GET /readyz and /healthz 200 while "
        "every process it runs is up (each child alive and each worker child's metrics port answering), "
        "503 otherwise, one line per child either way (services/worker/health.py).",
    )
    worker_max_child_failures: int = Field(
        5,
        ge=1,
        description="A child of `memoryos worker` (a worker process or the embedding engine) that exits this "
        "many times within worker_child_failure_window_s stops every child and the worker exits 1, so that "
        "the container's restart policy acts on a failure restarting cannot cure (no GPU, a broken driver, "
        "a space that does not fit in memory). Every exit in the window counts, however long the child ran "
        "(services/worker/processes.py).",
    )
    worker_child_failure_window_s: float = Field(
        300.0,
        gt=0,
        description="The window in which worker_max_child_failures exits of one child are counted.",
    )
    worker_max_open_spaces: int = Field(10_000, ge=1, description="Open spaces a worker keeps at most.")
    worker_read_threads: int = Field(
        32,
        ge=1,
        description="Owner calls (reads) a worker runs at once. A read mostly waits, for its space's writes "
        "and their vectors, so too few threads queue every other read behind those waits "
        "(docs/reliability.md, 'Reads under load').",
    )
    worker_max_embedding_lag_s: float = Field(
        0.25,
        ge=0,
        description="While a page applied here has waited this long for its vectors, the worker takes no "
        "new writes from its shards (0: it always takes them). Applying is cheaper than embedding, so "
        "without it the backlog grew inside the worker, where the API cannot see it, and reads waited "
        "for it; held in the streams, it is the lag the API's MEMORYOS_API_MAX_WRITE_LAG_S bounds.",
    )
    worker_mmap_threshold_kb: int = Field(
        128,
        ge=0,
        le=32768,
        description="glibc's mmap threshold, fixed at worker start (services/allocator.py): freed "
        "spaces' buffers go back to the system; 0 keeps glibc's rising default. At 64, SQLite's page "
        "cache of each temporary b-tree (~88 KiB) and its statement journals (64 KiB) were mapped and "
        "unmapped per query, each unmap a TLB flush on every core: 16% more worker CPU a turn "
        "(docs/service.md, Where a worker's time per write goes).",
    )
    worker_allocator_trim_interval_s: float = Field(
        30.0,
        ge=0,
        description="Seconds between giving the C heap's free pages back to the system "
        "(services/allocator.py); 0: never.",
    )

    @field_validator("worker_health_port")
    @classmethod
    def _health_port_apart(cls, port: int, info: ValidationInfo) -> int:
        """The health port must not be one of the worker processes' metrics ports (port + i)."""
        first, processes = info.data.get("worker_metrics_port"), info.data.get("worker_processes")
        if port and first and processes and first <= port < first + processes:
            raise ValueError(
                f"worker_health_port: {port} is a metrics port of the worker processes "
                f"(worker_metrics_port {first} + i for i < worker_processes {processes})"
            )
        return port
