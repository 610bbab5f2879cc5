"""`MemoryConfig`: every tunable of the engine in one place, each default with its reason.

Read from keyword arguments first, then `MEMORYOS_*` environment variables, then the defaults below.
Capacities and thresholds are validated here, so a bad value fails with the field's name before any
memory is opened.
"""

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, JsonValue, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from memoryos.errors import InvalidInputError
from memoryos.validation import validate_id

_NUMBER_ANNOTATIONS: tuple[object, ...] = (int, float, int | None, float | None)
"""Field types whose values must not be bools (`_numbers_are_not_bools`)."""

EMBEDDING_KWARGS_SET_BY_MEMORYOS = frozenset({"model_name_or_path", "local_files_only"})
"""`SentenceTransformer` arguments the engine sets itself: the model comes from `embedding_model_name`, and
weights are never downloaded at runtime."""


class MemoryConfig(BaseSettings):
    """Configuration of one engine process (embedded mode or a service worker)."""

    model_config = SettingsConfigDict(env_prefix="MEMORYOS_", extra="forbid", validate_assignment=True)

    # Where and whose memory.
    data_dir: Path = Field(Path("./memoryos_data"), description="Root of all spaces on disk.")
    tenant: str = Field("default", description="First path level; services map API keys to tenants.")

    # Tier sizes: the reference package's defaults, so its users see the same behaviour.
    short_term_capacity: int = Field(10, gt=0, description="STM pages before the oldest moves to MTM.")
    mid_term_capacity: int = Field(2000, gt=0, description="Segments before the coldest is archived.")
    long_term_knowledge_capacity: int = Field(100, gt=0, description="Facts kept per kind (user/assistant).")
    retrieval_queue_capacity: int = Field(7, gt=0, description="Pages returned by retrieval by default.")
    mid_term_heat_threshold: float = Field(5.0, gt=0, description="Heat at which a segment is analyzed.")
    mid_term_similarity_threshold: float = Field(
        0.6, gt=0, description="F = cos + Jaccard at which a topic joins a segment (paper: 0.6)."
    )

    # Heat = alpha*visits + beta*interactions + gamma*exp(-hours_since_visit/tau): the paper's formula with the
    # reference's unit weights and 24 h recency constant.
    heat_alpha: float = Field(1.0, ge=0)
    heat_beta: float = Field(1.0, ge=0)
    heat_gamma: float = Field(1.0, ge=0)
    heat_tau_hours: float = Field(24.0, gt=0)

    # Dialogue chains: a page continues the previous one when they are this close in time and the LLM says it
    # continues the conversation (the offline backend: it shares a content word, or is phatic).
    chain_max_gap_hours: float = Field(6.0, gt=0, description="A longer pause starts a new chain.")

    # Long-term facts.
    knowledge_dedup_similarity: float = Field(
        0.9, gt=0, le=1, description="Cosine at which a new fact restates (and replaces) an old one."
    )
    knowledge_top_k: int = Field(10, gt=0, description="Facts of each kind returned by retrieval.")
    knowledge_min_score: float = Field(0.1, ge=-1, le=1, description="Facts below this cosine are omitted.")

    # Retrieval fusion: z-scored dense + lexical scores, lifted by the best neighbouring turn. The weights
    # are the fusion measured on LoCoMo dev conversations (docs/retrieval.md).
    dense_weight: float = Field(1.0, ge=0)
    lexical_weight: float = Field(0.5, ge=0)
    neighbour_weight: float = Field(0.25, ge=0)
    candidate_pool: int = Field(200, gt=0, description="Candidates per signal before fusion.")
    lexical_postings_budget: int = Field(
        3000,
        gt=0,
        description="Pages BM25 may score per query. Words are taken rarest first; the most common ones, "
        "whose IDF is smallest, are left out once their pages would exceed this. FTS5 scores every page a "
        "word matches (about 2 µs each), so this bounds a query's BM25 cost at any space size: at 100k "
        "pages 20 ms with every word, 6 ms within the budget. Small spaces stay within it.",
    )
    date_weight: float = Field(
        1.5,
        ge=0,
        description="Added to the fused score (z units) of a page stored on a day or in a month the query "
        "names, less a few days around it (memoryos/planning/temporal.py). Recall@7 gains stop growing above 1.5.",
    )
    dense_name_max_df_fraction: float = Field(
        0.2,
        gt=0,
        le=1,
        description="Capitalized query words (names) found in more than this share of pages are left out of "
        "the text embedded for the query: the speakers' names, said in most turns, pull a MiniLM query "
        "toward turns that address the person rather than turns about what the question asks.",
    )
    dense_name_min_pages: int = Field(
        100,
        gt=0,
        description="Smaller spaces embed the query as written: there a name's share of pages says little.",
    )
    lexical_other_side_weight: float = Field(
        0.25,
        ge=0,
        le=1,
        description="BM25 weight of the side of a page that the speaker a query names did not say (the "
        "speaker's side counts 1; 1 here weighs both alike). A name one side says in more than "
        "dense_name_max_df_fraction of the pages, and the other side less, is the other side's name "
        "(memoryos/planning/speaker.py). 0.25 was chosen leave-one-conversation-out on LoCoMo dev; 0 loses "
        "adversarial questions, which name the wrong speaker on purpose.",
    )

    # Ingest.
    ingest_mode: Literal["background", "inline"] = Field(
        "background",
        description="background: add_memory stores the page durably and returns; the process's scheduler "
        "embeds and consolidates (a read waits for the vectors of earlier writes, not for consolidation). "
        "inline: add_memory returns once its pages are embedded and consolidated, like the reference.",
    )

    # Input limits.
    max_text_chars: int = Field(20000, gt=0, description="Longer user_input/agent_response is rejected.")

    # Embeddings.
    embedding_model_name: str = Field(
        "all-MiniLM-L6-v2",
        description="A model name (the bundled MiniLM, or a Hugging Face id in the local cache) or a local "
        "model directory, given as a str or a Path.",
    )
    embedding_model_kwargs: dict[str, JsonValue] = Field(
        default_factory=dict,
        description="Keyword arguments for `SentenceTransformer(...)`, as the reference passes them (e.g. "
        "truncate_dim, model_kwargs, prompts). JSON values only, so they can come from the environment and "
        "key the shared model. A `device` here wins over embedding_device.",
    )
    embedding_device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="auto: CUDA when torch sees a GPU, else CPU."
    )
    embedding_batch_size: int = Field(
        64, gt=0, description="Texts per embedding batch, pooled across every open space of the process."
    )
    embedding_cpu_run_size: int = Field(
        8,
        gt=0,
        description="On CPU, texts per model run: a batch is cut into runs of this many, longest first, each "
        "padded to its own longest. A run of 64 pads every text to the longest of 64 and encoded half as "
        "fast on 2 cores (docs/engine.md). On a GPU a run is the whole batch.",
    )
    embedding_max_batch_tokens: int = Field(
        16384,
        gt=0,
        description="Estimated tokens (characters / 4) per embedding batch: bounds a batch of long texts "
        "(64 of 256 tokens by default).",
    )
    embedding_max_wait_ms: float = Field(
        5.0,
        ge=0,
        description="How long the batcher waits for more pages before encoding a batch that is not full: "
        "a little latency for fuller batches when many spaces write at once.",
    )
    embedding_yield_ms: float = Field(
        50.0,
        ge=0,
        description="While writes are being acknowledged less than this far apart, no page batch starts "
        "(the pages are durable; a read or a flush waiting for vectors ends it at once): on few CPU cores "
        "the model otherwise slows every acknowledgement. 0 never yields (a service worker: Redis "
        "acknowledged its writes). memoryos/scheduler/batcher.py.",
    )
    embedding_yield_max_s: float = Field(
        0.25,
        ge=0,
        description="The longest a page waits for its batch while writes keep coming (embedding_yield_ms); "
        "after it, pages are embedded as they arrive. Below the API's MEMORYOS_API_MAX_WRITE_LAG_S (0.5 s), "
        "or steady writes run into the lag bound: the API refuses that configuration at start.",
    )
    embedding_cache_size: int = Field(10000, ge=0, description="Text->vector LRU entries (0 disables).")
    embedding_runtime: Literal["auto", "torch", "onnx"] = Field(
        "auto",
        description="On CPU. auto: ONNX Runtime when installed and its export matches PyTorch (3x faster per "
        "query); once the export is verified, queries and pages run on it without importing PyTorch. "
        "onnx: the same, but an error if queries cannot run on ONNX Runtime. torch: PyTorch only.",
    )
    embedding_speed_only: bool = Field(
        False,
        description="Accept a model directory marked as random weights (`python -m bench.gpu.models save` "
        "builds bge-m3- and Qwen3-Embedding-sized ones to measure speed where their weights cannot be had). "
        "Their vectors mean nothing, so without this a space refuses to load them. For benchmarks only.",
    )
    embedding_engine_socket: Path | None = Field(
        None,
        description="The Unix socket of the host's embedding engine (`memoryos embedding-engine`): when set, "
        "this process loads no model and sends its texts there (memoryos/embedding/engine/). `memoryos "
        "worker --processes N` starts one and sets it for its children.",
    )
    embedding_engine_timeout_s: float = Field(
        300.0,
        gt=0,
        description="How long a page batch's call to the embedding engine keeps trying while the engine is "
        "down or restarting before it fails (the batcher retries it later; its pages stay pending). Longer "
        "than a restart: a stall noticed (embedding_engine_stall_s), the supervisor's delay and a model load.",
    )
    embedding_engine_query_timeout_s: float = Field(
        8.0,
        gt=0,
        description="How long a query's call to the embedding engine waits before it fails. Below the API's "
        "read timeout (MEMORYOS_READ_TIMEOUT_S, 10 s), so a dead engine answers the reader with an error "
        "instead of holding one of the worker's read threads past the moment nobody waits for it.",
    )
    embedding_engine_max_batch_tokens: int = Field(
        16384,
        gt=0,
        description="Tokens in one model batch of the embedding engine, counted as padded (texts x the "
        "longest, lengths from the model's tokenizer, each at most the model's window). The engine's own "
        "limit, apart from embedding_batch_size (the applying processes' batchers): on CPU 16,384 ran as fast "
        "as any larger budget in `python -m bench.engine.embedding_engine` (docs/service.md).",
    )
    embedding_engine_max_batch_texts: int = Field(
        1024,
        gt=0,
        description="Texts in one model batch of the embedding engine at most, whatever their tokens: bounds "
        "the per-text work of a batch of very short texts.",
    )
    embedding_engine_max_queued_texts: int = Field(
        4096,
        gt=0,
        description="Page texts waiting in the embedding engine before it stops reading page requests (the "
        "applying processes' batchers keep their pages pending meanwhile).",
    )
    embedding_engine_max_queued_queries: int = Field(
        1024,
        gt=0,
        description="Query texts waiting in the embedding engine at most: a query past it is refused at once "
        "(EmbeddingEngineUnavailableError) rather than waiting behind more than its deadline's worth.",
    )
    embedding_engine_page_aging_s: float = Field(
        0.25,
        ge=0,
        description="A page batch whose oldest text has waited this long runs after the next query batch "
        "instead of after every query: queries go first, and pages still progress under a flood of them.",
    )
    embedding_engine_stall_s: float = Field(
        30.0,
        gt=0,
        description="The embedding engine reports itself 'stalled' (its health) when texts have waited this "
        "long and no batch has succeeded meanwhile (a model failing every batch); its supervisor restarts it.",
    )
    embedding_engine_send_timeout_s: float = Field(
        5.0,
        gt=0,
        description="How long the embedding engine waits for a client to take a reply before it closes that "
        "client's connection: a client that stops reading loses only its own connection.",
    )
    model_cache_dir: Path | None = Field(
        None,
        description="Where exported ONNX models are kept. None: $XDG_CACHE_HOME/memoryos or ~/.cache/memoryos.",
    )
    # Threads of the model's forward pass (torch's intra-op pool, ONNX Runtime's session). Unset, one per
    # core up to 4 (`embedding.device.MAX_AUTO_TORCH_THREADS`): a host running several processes that each
    # load a model, each taking every core, had N × cores threads on its cores; they preempted each other
    # inside every matrix product and a batch's encode took 15× as long as on its share of the cores. The
    # worker sets it: each applying process its share of the cores, the host's embedding engine the cores
    # the applying processes leave free (services/worker/process.py, `engine_threads`).
    torch_threads: int | None = Field(
        None, gt=0, description="None: one per core, at most 4 (oversubscription made encodes 15x slower)."
    )
    show_progress: bool = Field(
        False,
        description="Show the libraries' progress bars while a model loads (transformers' 'Loading weights' "
        "bar); off by default, so a command's output is only its own. The CLI's --verbose turns it on.",
    )

    # Embeddings from a server (memoryos/embedding/openai_api.py) instead of a local model.
    embedding_api_base_url: str | None = Field(
        None,
        description="An OpenAI-compatible embeddings server (TEI, vLLM, Ollama, OpenAI), e.g. "
        "http://tei:80/v1: when set, texts are embedded by POST <url>/embeddings with embedding_model_name "
        "as the model, and no local model loads. A space records the model as 'openai-api:<model>', so it "
        "never mixes with a local model's vectors. Empty: a local model.",
    )
    embedding_api_key: SecretStr | None = Field(
        None,
        description="Bearer token for embedding_api_base_url; never logged. None: a placeholder, which "
        "local servers accept.",
    )
    embedding_api_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Per request to the embeddings server; a timed-out request is retried like a 5xx.",
    )
    embedding_api_max_retries: int = Field(
        3,
        ge=0,
        description="Retries of a request that timed out, could not connect or got 408/409/429/5xx, with the "
        "openai client's schedule (0.5 s doubling up to 8 s, or the server's retry-after), within "
        "embedding_api_deadline_s.",
    )
    embedding_api_deadline_s: float = Field(
        60.0,
        gt=0,
        description="One encode call to the embeddings server, all its requests and retries together: a "
        "reader waiting on a query's vector, or the batcher on a batch, gets an answer or an "
        "EmbeddingServerError within it, whatever the retries and timeouts add up to.",
    )
    embedding_api_max_concurrency: int = Field(
        4,
        gt=0,
        description="Requests of one embedder in flight at once (an encode of more than "
        "embedding_api_batch_size texts sends several): a GPU server batches them together, and a few "
        "are enough to keep it busy without queueing behind other clients.",
    )
    embedding_api_max_input_tokens: int | None = Field(
        None,
        gt=0,
        description="The served model's input window in tokens (special tokens included): texts are cut "
        "to it on the client, exactly with the model's tokenizer.json when found locally (a model directory "
        "or the Hugging Face cache, never downloaded), else at 3 characters per token. None: the server "
        "truncates (TEI --auto-truncate), and a server that refuses a text as too long gets it cut and "
        "sent again (docs/engine.md, 'Embeddings from a server').",
    )
    embedding_api_batch_size: int = Field(
        32,
        gt=0,
        description="Texts per request to the embeddings server; larger encodes are split. 32 is TEI's "
        "default --max-client-batch-size, above which it refuses a request.",
    )
    embedding_api_dim: int | None = Field(
        None,
        gt=0,
        description="The dimension the server's model must answer; checked on every reply (not requested), "
        "and known without asking the server. None: learned from the server's first reply.",
    )
    embedding_api_query_prefix: str = Field(
        "",
        description="Put before each query (not documents) sent to the embeddings server, for models that "
        "instruct queries: Qwen3-Embedding's 'Instruct: <task>\\nQuery: '.",
    )

    # LLM. No API key selects the offline extractive backend.
    openai_api_key: SecretStr | None = None
    openai_base_url: str | None = None
    llm_model: str = "gpt-4o-mini"
    llm_timeout_s: float = Field(60.0, gt=0)
    llm_max_retries: int = Field(3, ge=0)
    llm_max_concurrency: int = Field(
        16,
        gt=0,
        description="LLM calls in flight at once, across every space of the process (an endpoint such as "
        "vLLM batches them server-side).",
    )
    llm_backoff_max_s: float = Field(
        300.0,
        gt=0,
        description="Longest pause before a space's consolidation is retried after LLM failures (the pause "
        "doubles from 1 s with each failure in a row); writes and reads go on meanwhile.",
    )
    # Bounds sent with every LLM request (docs/reliability.md, "Bounded LLM calls"). Without them a server's
    # defaults apply: a real model repeated one line until its cap of thousands of tokens.
    llm_max_tokens_continuity: int = Field(
        16, gt=0, description="Yes or no is a token or two; 16 leaves room for 'Yes, it does.'."
    )
    llm_max_tokens_chain_summary: int = Field(
        256,
        gt=0,
        description="One or two sentences, in any language (CJK text takes about a token a character). A "
        "summary cut at the cap is refused, never stored.",
    )
    llm_max_tokens_topic: int = Field(
        256, gt=0, description="One JSON object: a sentence and up to 5 keywords (about 60 tokens)."
    )
    llm_max_tokens_profile: int = Field(
        2048,
        gt=0,
        description="The whole profile is rewritten on each update, one short line per trait: about 150 "
        "lines. A profile cut at the cap is refused and the old one kept: raise it for very long profiles.",
    )
    llm_max_tokens_knowledge: int = Field(
        2048,
        gt=0,
        description="One JSON object with the facts of up to 32 pages (ANALYSIS_MAX_PAGES): 2048 holds about "
        "80 one-sentence facts; a reply cut short is not valid JSON and is asked for again.",
    )
    llm_max_tokens_answer: int = Field(
        1024,
        gt=0,
        description="A conversational reply (about 750 English words); an answer cut at the cap is returned "
        "as it is.",
    )
    llm_temperature_memory: float = Field(
        0.0,
        ge=0,
        le=2,
        description="Continuity, chain summary, topic, profile and facts: decisions and extraction stored "
        "in memory, so the most likely reply (same input, same memory; no invented details). A reply that "
        "does not parse is asked for once more at a higher temperature, so the second sample differs.",
    )
    llm_temperature_answer: float = Field(
        0.3,
        ge=0,
        le=2,
        description="Answers are generated conversation, not data: a little variety keeps a repeated "
        "question from getting a word-for-word repeated reply, while staying close to the memory given.",
    )
    # Guards on what the model proposes for long-term memory (memoryos/planning/guards.py; thresholds
    # measured on tests/data/llm_proposals.json, docs/evaluation.md "Real-model tier").
    llm_guards: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Check facts and profile updates against their source turns before storing them. auto: "
        "when an LLM endpoint is configured; the offline backend stores the turns' own sentences.",
    )
    guard_fact_min_words: int = Field(
        3,
        ge=1,
        description="Fewer words is a name or a fragment ('Maya'), not a fact that stands alone.",
    )
    guard_fact_min_grounding: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Share of a fact's content words its source turns must hold: a paraphrase keeps about "
        "half of them, an invented fact ('a puppy who likes shoes') almost none.",
    )
    guard_profile_min_kept: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Share of the previous profile's content words an update must keep: an update is asked "
        "to keep every line the turns do not contradict, so losing most of them is a rewrite from the last "
        "turns alone.",
    )
    guard_profile_min_grounding: float = Field(
        0.34,
        ge=0,
        le=1,
        description="Share of a new profile attribute's new words the turns must hold; profile lines "
        "generalise ('enjoys outdoor activities' from a hike), so less is asked of them than of facts.",
    )
    guard_profile_max_unsupported: int = Field(
        1,
        ge=0,
        description="New profile attributes no turn supports that an update may carry: one inferred trait "
        "is tolerated, a list of invented ones ('Age: 25, has a partner, two children') is not.",
    )
    guard_analysis_attempts: int = Field(
        3,
        ge=1,
        description="Analyses of a slice of pages whose proposals the guards refused before the slice is "
        "marked analyzed with what passed: a later pass sees the pages that joined the segment since and "
        "the profile of the time, and a server that does not decode deterministically samples anew. Each "
        "costs a profile and a facts call; 1 marks a refused slice analyzed at once.",
    )
    scheduler_store_threads: int = Field(
        4,
        gt=0,
        description="Threads that apply the consolidation ops the scheduler's loop does not wait on: those "
        "of a space another process is writing, and those after which a space's files are scrubbed.",
    )
    background_nice: int = Field(
        10,
        ge=0,
        le=19,
        description="How much lower the scheduler's threads (embedding batcher, consolidation, store) run "
        "than the threads answering callers, as a Linux nice increment: on few cores, writes and reads are "
        "answered first while a backlog embeds. 0 keeps one priority for all (memoryos/scheduler/priority.py).",
    )
    query_rewrite: bool = Field(
        False,
        description="With an LLM endpoint configured, each distinct query is first sent to llm_model, which "
        "lists words an answer would mention; retrieval searches the question followed by them. One call "
        "per distinct query (cached), off by default: not measured on LoCoMo offline "
        "(memoryos/planning/query_rewrite.py).",
    )
    query_rewrite_timeout_s: float = Field(
        2.0,
        gt=0,
        description="Longest wait for a query rewrite, with no retry; past it the question is searched as "
        "written. It bounds what a rewrite adds to a retrieve's latency.",
    )

    # Vector index.
    vector_backend: Literal["faiss", "chroma"] = Field(
        "faiss",
        description="Page index backend. faiss: opens fastest, no per-space threads; chroma: for deployments "
        "that already run ChromaDB (extra `chroma`; it persists every write itself).",
    )
    index_ann_threshold: int = Field(
        50000, gt=0, description="Vectors at which a space switches from exact to approximate search."
    )
    index_snapshot_every_ops: int = Field(1000, gt=0, description="Index snapshot after this many adds...")
    index_snapshot_every_s: float = Field(60.0, gt=0, description="...or after this many seconds.")

    # The service's PostgreSQL store (memoryos/storage/records/postgres/): set, every space's records live
    # in that database and `data_dir` holds only index snapshots, a cache any worker can rebuild.
    database_url: SecretStr | None = Field(
        None,
        description="libpq URL of the PostgreSQL database holding every space (postgresql://user:password@"
        "host:5432/memoryos). Unset: one SQLite file per space under data_dir (embedded mode, one host).",
    )
    database_pool_size: int = Field(
        4,
        gt=0,
        description="Connections one process may hold at most; a space holds none between calls. Size it as "
        "pods x processes x this against the server's max_connections (docs/service.md).",
    )
    database_idle_in_transaction_timeout_s: float = Field(
        5.0,
        gt=0,
        description="The server ends a transaction left idle this long (a frozen worker), releasing the shard's "
        "fence row: keep it below the shard lease's TTL (lease_ttl_s, 10 s by default).",
    )

    # Several local processes on one space (storage/space_lock.py).
    space_lock_timeout_s: float = Field(
        30.0,
        ge=0,
        description="How long opening a space waits while another process has it to itself (a forget or "
        "a reindex) before failing with that process's pid.",
    )
    store_busy_timeout_s: float = Field(
        30.0,
        gt=0,
        description="How long a write waits for another process's write transaction on the same space "
        "(SQLite's busy timeout); each transaction lasts milliseconds.",
    )
    faiss_use_gpu: Literal["auto", "never"] = Field("auto", description="auto: GPU when faiss reports one.")
    faiss_omp_threads: int = Field(
        1,
        gt=0,
        description="faiss OpenMP threads. 1: on 2 cores a second thread made one-query searches 3-6x slower "
        "and, spinning beside torch, one MiniLM encode 6x slower. Raise it for large batch searches.",
    )

    @field_validator("tenant")
    @classmethod
    def _tenant_is_one_path_component(cls, value: str) -> str:
        """The tenant is a directory name under `data_dir`: "../x" would put spaces outside it."""
        return validate_id("tenant", value)

    @field_validator("*", mode="before")
    @classmethod
    def _numbers_are_not_bools(cls, value: Any, info: ValidationInfo) -> Any:
        """pydantic reads True as 1; a capacity of True is a caller's mistake, not a request for one page."""
        field = info.field_name
        if isinstance(value, bool) and field and cls.model_fields[field].annotation in _NUMBER_ANNOTATIONS:
            raise InvalidInputError(field, f"must be a number, not a bool ({value!r})")
        return value

    @field_validator("embedding_model_name", mode="before")
    @classmethod
    def _model_path_as_name(cls, value: Any) -> Any:
        """A local model directory is naturally a `Path`; it is kept as its `str`, the model's name: the
        store records the name, and the process's shared embedder is keyed by the config's JSON."""
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @field_validator("embedding_api_base_url", mode="before")
    @classmethod
    def _embedding_server_url(cls, value: Any) -> Any:
        """An http(s) URL, checked at start rather than at the first encode; empty (a compose file's
        unset variable) means none."""
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        if not isinstance(value, str) or not value.startswith(("http://", "https://")):
            raise InvalidInputError("embedding_api_base_url", f"must be an http(s) URL, got {value!r}")
        return value

    @field_validator("embedding_model_kwargs")
    @classmethod
    def _kwargs_leave_the_engine_its_own(cls, value: dict[str, JsonValue]) -> dict[str, JsonValue]:
        """Checked here rather than at model load (the first encode), so a bad value fails at start-up."""
        reserved = sorted(EMBEDDING_KWARGS_SET_BY_MEMORYOS & value.keys())
        if reserved:
            raise InvalidInputError("embedding_model_kwargs", f"{reserved} are set by MemoryOS itself")
        if "device" in value and not isinstance(value["device"], str):
            raise InvalidInputError("embedding_model_kwargs", "device must be a string such as 'cuda:1'")
        return value

    def space_dir(self, user_id: str, assistant_id: str) -> Path:
        """Directory of one memory space. Every component is checked here again, so no caller (nor a
        config made with `model_construct`, which skips validation) can build a path outside `data_dir`."""
        components = (("tenant", self.tenant), ("user_id", user_id), ("assistant_id", assistant_id))
        return self.data_dir.joinpath(*(validate_id(field, value) for field, value in components))
