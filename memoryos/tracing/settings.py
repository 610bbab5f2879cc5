"""`TracingSettings`: what a span may say about the people and the memory it serves (`MEMORYOS_TRACE_*`).

Where spans go, how many are sampled and how they are batched are OpenTelemetry's own variables
(`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_TRACES_SAMPLER`, `OTEL_BSP_*`: `setup.py`). These are the privacy
rules on top, off by default: ids are pseudonymised (user ids are often e-mail addresses) and memory text
never reaches a span, just as the INFO logs never carry it. Read once, when a process turns tracing on.
"""

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class TracingSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MEMORYOS_TRACE_", extra="forbid")

    raw_ids: bool = Field(
        False,
        description="Put tenant, user and assistant ids in spans as they are; off: a keyed hash of each "
        "(`attributes.pseudonym`), the same in every process given the same `id_hash_key`.",
    )
    id_hash_key: SecretStr | None = Field(
        None,
        description="Key of the ids' hash (HMAC-SHA256). Without one the hash is unkeyed, and an id that "
        "can be guessed (an e-mail address) can be found from its hash by trying candidates; give every "
        "process of a deployment the same key so the API's and the workers' spans name a user alike.",
    )
    memory_text: bool = Field(
        False,
        description="Allow memory text in spans: turns, queries, prompts and LLM replies "
        "(`gen_ai.input.messages`, `gen_ai.output.messages`, `gen_ai.memory.query.text`). Off: no span "
        "carries any, whatever the sampling.",
    )
