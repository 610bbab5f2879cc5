"""The Bearer scheme in the OpenAPI schema. Routes authenticate in one plain dependency
(`deps.caller_of`), not through FastAPI's security dependency, so the schema would not say so by itself;
clients and the /docs "Authorize" button read it from here. Every operation under `API_PREFIX`
authenticates (`tests/integration/test_api_auth.py` asks each one without a key); the probes and
`/metrics` outside it do not."""

from typing import Any

from fastapi import FastAPI

from services.api.deps import BEARER_SCHEME
from services.api.routes import API_PREFIX

BEARER_DESCRIPTION = "An API key, as `Authorization: Bearer <key>`."


def declare_bearer_auth(app: FastAPI) -> None:
    """Wrap `app.openapi` so the schema declares the Bearer scheme and each operation under `API_PREFIX`
    requires it (built once and cached by FastAPI, as before)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
        schemes[BEARER_SCHEME] = {"type": "http", "description": BEARER_DESCRIPTION, "scheme": "bearer"}
        for path, operations in schema.get("paths", {}).items():
            if path.startswith(API_PREFIX + "/"):
                for operation in operations.values():
                    operation["security"] = [{BEARER_SCHEME: []}]
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
