"""Typed Python client of the MemoryOS HTTP API, sync (`MemoryClient`) and async (`AsyncMemoryClient`).

    from services.client import MemoryClient

    with MemoryClient("http://127.0.0.1:8765", api_key="...") as memory:
        added = memory.add("maya", "I adopted a dog called Pico.", "Lovely name!")
        context = memory.retrieve("maya", "What is my dog called?", wait_for_write_ids=[added.write_id])
        print(context.retrieved_pages[0].user_input)

Results are the server's own pydantic models (`RetrievedContext`, `PageList`, `WriteStatus`, ...); an error
response raises `ApiError` with the status, the error code, the message and the field at fault.

Every route is written once, as a function building a `Call` (method, path, body, how to read the answer),
in `_calls` below; each client class only sends a `Call` — over `httpx.Client` or `httpx.AsyncClient`. The
`_Endpoint` descriptor turns each builder into a method typed `-> T` on the sync client and
`-> Awaitable[T]` on the async one, so nothing is written twice.
"""

import functools
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, ParamSpec, TypeVar, overload
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter

from memoryos.portability.bundles import ImportReport
from memoryos.types import (
    DeleteResult,
    FactHistory,
    KnowledgeEntry,
    KnowledgeKind,
    MemoryStats,
    Page,
    PageList,
    RetrievedContext,
    WriteStatus,
)
from services.api.models import (
    ErrorBody,
    GeneratedResponse,
    JobAccepted,
    JobView,
    MemoryAdded,
    Profile,
    WriteAccepted,
)

DEFAULT_ASSISTANT = "default_assistant_profile"
API_KEY_ENV = "MEMORYOS_API_KEY"

T = TypeVar("T")
P = ParamSpec("P")
M = TypeVar("M", bound=BaseModel)


class ApiError(Exception):
    """An error answer of the API: `status` (HTTP), `code` (stable, e.g. "invalid_input"), `message`,
    `field` (the input at fault, when one is) and `retry_after_s` (429 and 503)."""

    def __init__(
        self, status: int, code: str, message: str, field: str | None = None, retry_after_s: int | None = None
    ) -> None:
        self.status, self.code, self.field, self.retry_after_s = status, code, field, retry_after_s
        self.message = message
        super().__init__(f"{status} {code}: {message}")


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its answer."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    json: Any = None
    params: Mapping[str, Any] | None = None
    content: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


def _model(cls: type[M]) -> Callable[[httpx.Response], M]:
    return lambda response: cls.model_validate_json(response.content)


def _adapted(adapter: TypeAdapter[T]) -> Callable[[httpx.Response], T]:
    return lambda response: adapter.validate_json(response.content)


def _nothing(response: httpx.Response) -> None:
    return None


def _body(response: httpx.Response) -> bytes:
    return response.content


def _space(user_id: str, assistant_id: str) -> str:
    return f"/v1/users/{quote(user_id, safe='')}/assistants/{quote(assistant_id, safe='')}"


def _drop_none(**values: Any) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


def error_of(response: httpx.Response) -> ApiError:
    """The `ApiError` an error response describes (a body that is not `ErrorBody` gives its text)."""
    retry = response.headers.get("retry-after")
    retry_after_s = int(retry) if retry and retry.isdigit() else None
    try:
        body = ErrorBody.model_validate_json(response.content)
        return ApiError(response.status_code, body.error, body.message, body.field, retry_after_s)
    except ValueError:
        return ApiError(response.status_code, "error", response.text[:500], None, retry_after_s)


class _calls:
    """The builders: one per route, the only place a path or a body shape is written."""

    @staticmethod
    def add(
        user_id: str,
        user_input: str,
        agent_response: str,
        *,
        assistant_id: str = DEFAULT_ASSISTANT,
        timestamp: str | None = None,
        meta_data: Mapping[str, Any] | None = None,
        write_id: str | None = None,
        ttl_s: float | None = None,
    ) -> Call[MemoryAdded]:
        """Remember one exchange (201): its page id and write id."""
        body = _drop_none(
            user_input=user_input,
            agent_response=agent_response,
            timestamp=timestamp,
            meta_data=dict(meta_data) if meta_data is not None else None,
            write_id=write_id,
            ttl_s=ttl_s,
        )
        return Call("POST", f"{_space(user_id, assistant_id)}/memories", _model(MemoryAdded), json=body)

    @staticmethod
    def add_batch(
        user_id: str,
        turns: Sequence[Mapping[str, Any]],
        *,
        assistant_id: str = DEFAULT_ASSISTANT,
        write_id: str | None = None,
        ttl_s: float | None = None,
    ) -> Call[WriteAccepted]:
        """Remember many exchanges as one write (202): durable now, searchable once embedded."""
        body = _drop_none(turns=[dict(turn) for turn in turns], write_id=write_id, ttl_s=ttl_s)
        return Call(
            "POST", f"{_space(user_id, assistant_id)}/memories/batch", _model(WriteAccepted), json=body
        )

    @staticmethod
    def write_status(
        user_id: str, write_id: str, *, assistant_id: str = DEFAULT_ASSISTANT
    ) -> Call[WriteStatus]:
        path = f"{_space(user_id, assistant_id)}/writes/{quote(write_id, safe='')}"
        return Call("GET", path, _model(WriteStatus))

    @staticmethod
    def retrieve(
        user_id: str,
        query: str,
        *,
        assistant_id: str = DEFAULT_ASSISTANT,
        top_k: int | None = None,
        knowledge_top_k: int | None = None,
        wait_for_write_ids: list[str] | None = None,
        wait_timeout_s: float | None = None,
        max_vector_wait_s: float | None = None,
    ) -> Call[RetrievedContext]:
        """Context for `query`; naming write ids waits until they are stored (422 at once for one the
        space never acknowledged, 503 after the timeout), then for their vectors up to
        `max_vector_wait_s` (the server's default when None)."""
        body = _drop_none(
            query=query,
            top_k=top_k,
            knowledge_top_k=knowledge_top_k,
            wait_for_write_ids=wait_for_write_ids,
            wait_timeout_s=wait_timeout_s,
            max_vector_wait_s=max_vector_wait_s,
        )
        return Call("POST", f"{_space(user_id, assistant_id)}/retrieve", _model(RetrievedContext), json=body)

    @staticmethod
    def respond(
        user_id: str,
        query: str,
        *,
        assistant_id: str = DEFAULT_ASSISTANT,
        relationship_with_user: str = "friend",
        style_hint: str = "",
        user_conversation_meta_data: Mapping[str, Any] | None = None,
    ) -> Call[str]:
        """The LLM's answer from memory (the exchange is then remembered)."""
        body = _drop_none(
            query=query,
            relationship_with_user=relationship_with_user,
            style_hint=style_hint,
            user_conversation_meta_data=dict(user_conversation_meta_data)
            if user_conversation_meta_data
            else None,
        )

        def parse(response: httpx.Response) -> str:
            return GeneratedResponse.model_validate_json(response.content).response

        return Call("POST", f"{_space(user_id, assistant_id)}/response", parse, json=body)

    @staticmethod
    def profile(user_id: str, *, assistant_id: str = DEFAULT_ASSISTANT) -> Call[str]:
        def parse(response: httpx.Response) -> str:
            return Profile.model_validate_json(response.content).profile

        return Call("GET", f"{_space(user_id, assistant_id)}/profile", parse)

    @staticmethod
    def facts(
        user_id: str, kind: KnowledgeKind = "user", *, assistant_id: str = DEFAULT_ASSISTANT
    ) -> Call[list[KnowledgeEntry]]:
        parse = _adapted(TypeAdapter(list[KnowledgeEntry]))
        return Call("GET", f"{_space(user_id, assistant_id)}/facts", parse, params={"kind": kind})

    @staticmethod
    def stats(user_id: str, *, assistant_id: str = DEFAULT_ASSISTANT) -> Call[MemoryStats]:
        return Call("GET", f"{_space(user_id, assistant_id)}/stats", _model(MemoryStats))

    @staticmethod
    def list_pages(
        user_id: str, offset: int = 0, limit: int = 50, *, assistant_id: str = DEFAULT_ASSISTANT
    ) -> Call[PageList]:
        params = {"offset": offset, "limit": limit}
        return Call("GET", f"{_space(user_id, assistant_id)}/memories", _model(PageList), params=params)

    @staticmethod
    def get_page(user_id: str, page_id: int, *, assistant_id: str = DEFAULT_ASSISTANT) -> Call[Page]:
        return Call("GET", f"{_space(user_id, assistant_id)}/memories/{int(page_id)}", _model(Page))

    @staticmethod
    def update_page(
        user_id: str,
        page_id: int,
        *,
        assistant_id: str = DEFAULT_ASSISTANT,
        user_input: str | None = None,
        agent_response: str | None = None,
        meta_data: Mapping[str, Any] | None = None,
    ) -> Call[Page]:
        body = _drop_none(
            user_input=user_input,
            agent_response=agent_response,
            meta_data=dict(meta_data) if meta_data is not None else None,
        )
        return Call(
            "PATCH", f"{_space(user_id, assistant_id)}/memories/{int(page_id)}", _model(Page), json=body
        )

    @staticmethod
    def delete_page(
        user_id: str, page_id: int, *, assistant_id: str = DEFAULT_ASSISTANT
    ) -> Call[DeleteResult]:
        return Call(
            "DELETE", f"{_space(user_id, assistant_id)}/memories/{int(page_id)}", _model(DeleteResult)
        )

    @staticmethod
    def update_fact(
        user_id: str, entry_id: int, text: str, *, assistant_id: str = DEFAULT_ASSISTANT
    ) -> Call[KnowledgeEntry]:
        path = f"{_space(user_id, assistant_id)}/facts/{int(entry_id)}"
        return Call("PATCH", path, _model(KnowledgeEntry), json={"text": text})

    @staticmethod
    def delete_fact(
        user_id: str, entry_id: int, *, assistant_id: str = DEFAULT_ASSISTANT
    ) -> Call[DeleteResult]:
        return Call("DELETE", f"{_space(user_id, assistant_id)}/facts/{int(entry_id)}", _model(DeleteResult))

    @staticmethod
    def fact_history(
        user_id: str, entry_id: int, *, assistant_id: str = DEFAULT_ASSISTANT
    ) -> Call[FactHistory]:
        path = f"{_space(user_id, assistant_id)}/facts/{int(entry_id)}/history"
        return Call("GET", path, _model(FactHistory))

    @staticmethod
    def consolidate(user_id: str, *, assistant_id: str = DEFAULT_ASSISTANT) -> Call[None]:
        """Consolidate the space now (segments, heat, profile and facts), not at the next overflow."""
        return Call("POST", f"{_space(user_id, assistant_id)}/consolidate", _nothing)

    @staticmethod
    def forget(user_id: str, *, assistant_id: str = DEFAULT_ASSISTANT) -> Call[bool]:
        """Erase the whole space of the user (with this assistant): True once erased (204), False when the
        erase is queued and not yet done (202; `GET .../stats` answers 404 once it is)."""
        return Call("DELETE", _space(user_id, assistant_id), lambda response: response.status_code == 204)

    @staticmethod
    def export_bundle(user_id: str, *, assistant_id: str = DEFAULT_ASSISTANT) -> Call[bytes]:
        return Call("GET", f"{_space(user_id, assistant_id)}/export", _body)

    @staticmethod
    def import_bundle(
        user_id: str, bundle: bytes, *, assistant_id: str = DEFAULT_ASSISTANT
    ) -> Call[ImportReport]:
        headers = {"content-type": "application/octet-stream"}
        return Call(
            "POST",
            f"{_space(user_id, assistant_id)}/import",
            _model(ImportReport),
            content=bundle,
            headers=headers,
        )

    @staticmethod
    def export_job(user_id: str, *, assistant_id: str = DEFAULT_ASSISTANT) -> Call[JobAccepted]:
        """With Redis: queue an export (202); `job(job_id)` follows it, `job_bundle(job_id)` downloads it."""
        return Call("POST", f"{_space(user_id, assistant_id)}/export-jobs", _model(JobAccepted))

    @staticmethod
    def import_job(
        user_id: str, bundle: bytes, *, assistant_id: str = DEFAULT_ASSISTANT
    ) -> Call[JobAccepted]:
        """With Redis: queue the import of `bundle` into the empty space (202)."""
        headers = {"content-type": "application/octet-stream"}
        path = f"{_space(user_id, assistant_id)}/import-jobs"
        return Call("POST", path, _model(JobAccepted), content=bundle, headers=headers)

    @staticmethod
    def reindex_job(user_id: str, model: str, *, assistant_id: str = DEFAULT_ASSISTANT) -> Call[JobAccepted]:
        """With Redis: queue a reindex with `model`, the model the workers serve (202)."""
        path = f"{_space(user_id, assistant_id)}/reindex-jobs"
        return Call("POST", path, _model(JobAccepted), json={"model": model})

    @staticmethod
    def job(job_id: str) -> Call[JobView]:
        """A job's status, and once ended its result or error."""
        return Call("GET", f"/v1/jobs/{quote(job_id, safe='')}", _model(JobView))

    @staticmethod
    def job_bundle(job_id: str) -> Call[bytes]:
        """The bundle of a finished export job."""
        return Call("GET", f"/v1/jobs/{quote(job_id, safe='')}/bundle", _body)


class _Endpoint(Generic[P, T]):
    """A route as a method: `T` on `MemoryClient`, `Awaitable[T]` on `AsyncMemoryClient`."""

    def __init__(self, build: Callable[P, Call[T]]) -> None:
        self._build = build

    @overload
    def __get__(self, client: None, owner: type) -> "_Endpoint[P, T]": ...
    @overload
    def __get__(self, client: "MemoryClient", owner: type) -> Callable[P, T]: ...
    @overload
    def __get__(self, client: "AsyncMemoryClient", owner: type) -> Callable[P, Awaitable[T]]: ...
    def __get__(self, client: Any, owner: type) -> Any:
        if client is None:
            return self
        build = self._build

        @functools.wraps(build)
        def send(*args: P.args, **kwargs: P.kwargs) -> Any:
            return client._send(build(*args, **kwargs))

        return send


class _Routes:
    """Every route, once; the client classes below add only how a `Call` is sent."""

    add = _Endpoint(_calls.add)
    add_batch = _Endpoint(_calls.add_batch)
    write_status = _Endpoint(_calls.write_status)
    retrieve = _Endpoint(_calls.retrieve)
    respond = _Endpoint(_calls.respond)
    profile = _Endpoint(_calls.profile)
    facts = _Endpoint(_calls.facts)
    stats = _Endpoint(_calls.stats)
    list_pages = _Endpoint(_calls.list_pages)
    get_page = _Endpoint(_calls.get_page)
    update_page = _Endpoint(_calls.update_page)
    delete_page = _Endpoint(_calls.delete_page)
    update_fact = _Endpoint(_calls.update_fact)
    delete_fact = _Endpoint(_calls.delete_fact)
    fact_history = _Endpoint(_calls.fact_history)
    consolidate = _Endpoint(_calls.consolidate)
    forget = _Endpoint(_calls.forget)
    export_bundle = _Endpoint(_calls.export_bundle)
    import_bundle = _Endpoint(_calls.import_bundle)
    export_job = _Endpoint(_calls.export_job)
    import_job = _Endpoint(_calls.import_job)
    reindex_job = _Endpoint(_calls.reindex_job)
    job = _Endpoint(_calls.job)
    job_bundle = _Endpoint(_calls.job_bundle)


def _client_options(base_url: str, api_key: str | None, timeout_s: float) -> dict[str, Any]:
    key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return {"base_url": base_url.rstrip("/"), "headers": headers, "timeout": timeout_s}


def _request_options(call: Call[Any]) -> dict[str, Any]:
    return {"json": call.json, "params": call.params, "content": call.content, "headers": dict(call.headers)}


def _result(call: Call[T], response: httpx.Response) -> T:
    if response.status_code >= 400:
        raise error_of(response)
    return call.parse(response)


class MemoryClient(_Routes):
    """Blocking client. `api_key` defaults to `$MEMORYOS_API_KEY`; without one, no header is sent (a
    server with no keys configured). Reuse one instance: it keeps connections open."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(transport=transport, **_client_options(base_url, api_key, timeout_s))

    def _send(self, call: Call[T]) -> T:
        return _result(call, self._http.request(call.method, call.path, **_request_options(call)))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "MemoryClient":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncMemoryClient(_Routes):
    """The same routes, awaited: `await client.retrieve(...)`."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._http = httpx.AsyncClient(transport=transport, **_client_options(base_url, api_key, timeout_s))

    async def _send(self, call: Call[T]) -> T:
        return _result(call, await self._http.request(call.method, call.path, **_request_options(call)))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncMemoryClient":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
