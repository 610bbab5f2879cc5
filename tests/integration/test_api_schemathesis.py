"""Generated requests against the API's own OpenAPI schema (schemathesis): whatever a client sends that
the schema allows — or, in negative mode, does not — the server never answers 5xx."""

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.schemas import OpenApiSchema

from services.api.settings import ApiSettings
from tests.support.api_server import RunningApi, offline_config, running_api
from tests.support.fakes import HashEmbedder

pytestmark = pytest.mark.integration

KEY = "schemathesis-key-0123456789"
MIN_CASES = 200
cases_run: list[str] = []


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApi]:
    settings_ = ApiSettings(port=0, keys={KEY: "fuzz"}, rate_limit_per_s=0, max_turns_per_batch=8)
    config = offline_config(tmp_path_factory.mktemp("fuzz-data"), max_text_chars=2000)
    with running_api(settings_, config, embedder=HashEmbedder()) as running:
        yield running


@pytest.fixture(scope="module")
def api_schema(api: RunningApi) -> OpenApiSchema:
    return schemathesis.openapi.from_dict(api.app.openapi())


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_generated_request_gets_a_5xx(case: schemathesis.Case, api: RunningApi) -> None:
    response = case.call(base_url=api.url, headers={"authorization": f"Bearer {KEY}"}, timeout=30)
    cases_run.append(case.operation.label)
    assert response.status_code < 500, (case.operation.label, response.status_code, response.text[:500])


def test_enough_cases_were_generated() -> None:
    if not cases_run:
        pytest.skip("the generated cases were deselected")
    assert len(cases_run) >= MIN_CASES, len(cases_run)
