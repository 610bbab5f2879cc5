"""The OpenAPI schema a real server serves says what the API answers (issue 35): every operation under
/v1 lists the error statuses it can answer, each with the `ErrorBody` the handlers send (not FastAPI's
`HTTPValidationError`), and every id parameter or field carries the pattern the engine checks.

Both modes: the job routes exist only with Redis."""

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryos import MemoryConfig
from memoryos.errors import InvalidInputError
from memoryos.validation import MAX_ID_CHARS, validate_id, validate_key
from services.api.models import ID_SCHEMA, WRITE_ID_SCHEMA
from services.api.settings import ApiSettings
from services.queue.settings import QueueSettings
from tests.support.api_server import offline_config, running_api
from tests.support.fakes import HashEmbedder
from tests.support.redis_server import running_redis

pytestmark = pytest.mark.integration

ERROR_REF = "#/components/schemas/ErrorBody"
KEYED = {"401", "422", "429", "500", "503"}
"""Every operation under /v1: the key, its rate, its parameters, a failure, Redis away."""
ON_SPACE = {"403", "409"}
"""And every operation on a space: a key bound to another user, a space embedded with another model."""
SPECIFIC = {
    ("post", "/memories"): {"409", "413"},
    ("post", "/memories/batch"): {"409", "413"},
    ("get", "/writes/{write_id}"): {"404"},
    ("get", "/memories"): {"404"},
    ("post", "/retrieve"): {"404", "413"},
    ("post", "/response"): {"413", "502"},
    ("get", "/profile"): {"404"},
    ("get", "/memories/{page_id}"): {"404"},
    ("patch", "/facts/{entry_id}"): {"404", "413"},
    ("delete", ""): {"404"},
    ("get", "/export"): {"404"},
    ("post", "/import"): {"409", "413"},
    ("post", "/import-jobs"): {"413"},
    ("get", "/v1/jobs/{job_id}"): {"404"},
    ("get", "/v1/jobs/{job_id}/bundle"): {"404", "409"},
}
"""Statuses particular routes answer besides (paths under the space prefix relative to it)."""
SPACE_PREFIX = "/v1/users/{user_id}/assistants/{assistant_id}"


@pytest.fixture(scope="module")
def schemas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[dict[str, Any]]]:
    """/openapi.json from an embedded server and from one with Redis."""
    root = tmp_path_factory.mktemp("openapi")
    settings_ = ApiSettings(port=0, keys={"openapi-key-0123456789": "acme"})
    served: list[dict[str, Any]] = []
    with running_api(settings_, offline_config(root / "data"), embedder=HashEmbedder()) as api:
        served.append(httpx.get(api.url + "/openapi.json", timeout=30).json())
    with running_redis(root / "redis") as redis_server:
        queue = QueueSettings(redis_url=redis_server.url, redis_namespace="openapi", shard_count=2)
        with running_api(settings_, MemoryConfig(data_dir=root / "api-side"), queue=queue) as api:
            served.append(httpx.get(api.url + "/openapi.json", timeout=30).json())
    yield served


def operations(schema: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            if path.startswith("/v1/"):
                yield method, path, operation


def test_every_operation_lists_its_errors_with_the_error_body(schemas: list[dict[str, Any]]) -> None:
    seen = set()
    for schema in schemas:
        assert "HTTPValidationError" not in schema["components"]["schemas"]
        for method, path, operation in operations(schema):
            relative = path.removeprefix(SPACE_PREFIX) if path.startswith(SPACE_PREFIX) else path
            seen.add((method, relative))
            expected = KEYED | (ON_SPACE if path.startswith(SPACE_PREFIX) else set())
            expected |= SPECIFIC.get((method, relative), set())
            if "requestBody" in operation:
                expected.add("413")
            responses = operation["responses"]
            assert expected <= set(responses), (method, path, sorted(expected - set(responses)))
            for status, response in responses.items():
                if int(status) >= 400:
                    body = response["content"]["application/json"]["schema"]
                    assert body == {"$ref": ERROR_REF}, (method, path, status)
                    assert response["description"], (method, path, status)
    assert set(SPECIFIC) <= seen  # the job routes came from the server with Redis


def test_a_retrieves_wait_for_write_ids_is_documented_as_422_at_once_or_503_with_retry_after(
    schemas: list[dict[str, Any]],
) -> None:
    """Issue 57: a write id the space never acknowledged is a client error at once, a real wait that runs
    out a 503 with `Retry-After`; no operation answers 504 any more."""
    for schema in schemas:
        responses = schema["paths"][SPACE_PREFIX + "/retrieve"]["post"]["responses"]
        assert "wait_for_write_ids" in responses["422"]["description"]
        assert "never acknowledged" in responses["422"]["description"]
        assert "wait_timeout_s" in responses["503"]["description"]
        assert responses["503"]["headers"]["Retry-After"]["schema"] == {"type": "integer"}
        waited = schema["components"]["schemas"]["RetrieveRequest"]["properties"]
        assert "422" in waited["wait_for_write_ids"]["description"]
        assert "503 with Retry-After" in waited["wait_timeout_s"]["description"]
        assert not [(path, method) for method, path, op in operations(schema) if "504" in op["responses"]]


def test_every_id_parameter_and_field_carries_the_engine_pattern(schemas: list[dict[str, Any]]) -> None:
    checked = set()
    for schema in schemas:
        for _, path, operation in operations(schema):
            for parameter in operation.get("parameters", []):
                name, declared = parameter["name"], parameter["schema"]
                if name in ("user_id", "assistant_id"):
                    assert declared["pattern"] == ID_SCHEMA["pattern"], (path, name)
                    assert declared["maxLength"] == MAX_ID_CHARS
                elif name == "write_id":
                    assert declared["pattern"] == WRITE_ID_SCHEMA["pattern"], path
                elif name == "job_id":
                    assert "pattern" in declared, path
                else:
                    continue
                checked.add(name)
        models = schema["components"]["schemas"]
        for model in ("AddMemoryRequest", "AddBatchRequest"):
            write_id = models[model]["properties"]["write_id"]["anyOf"][0]
            assert write_id["pattern"] == WRITE_ID_SCHEMA["pattern"], model
        waited = models["RetrieveRequest"]["properties"]["wait_for_write_ids"]["items"]
        assert waited["pattern"] == WRITE_ID_SCHEMA["pattern"]
    assert checked == {"user_id", "assistant_id", "write_id", "job_id"}


def matches(pattern: str, value: str) -> bool:
    """As JSON Schema (ECMA-262) reads `^...$`: the whole string (Python's `$` also matches before a
    final newline)."""
    return re.fullmatch(pattern.removeprefix("^").removesuffix("$"), value) is not None


def _accepted(check: Any, field: str, value: str) -> bool:
    try:
        check(field, value)
    except InvalidInputError:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="aZ09._@+-/\\ \n", max_size=12) | st.sampled_from(["a..b", "a.", ".a", "x" * 129]))
def test_the_declared_patterns_are_the_engine_rules(value: str) -> None:
    """The schema states what the engine checks, neither more nor less (the engine still checks)."""
    as_declared = matches(ID_SCHEMA["pattern"], value) and len(value) <= MAX_ID_CHARS
    assert as_declared == _accepted(validate_id, "user_id", value), value
    as_declared_key = matches(WRITE_ID_SCHEMA["pattern"], value)
    assert as_declared_key == _accepted(validate_key, "write_id", value), value
