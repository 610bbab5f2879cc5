"""Export a space as a bundle file, and import one into an empty space (`memoryos/portability/bundles/`).

The import route's body limit is `max_bundle_bytes` (`body_limit.py`), larger than every other route's. An
upload is streamed to a temporary file, never held in memory whole.
"""

import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse
from starlette.background import BackgroundTask

from memoryos.errors import InvalidInputError
from memoryos.portability.bundles import ImportReport
from services.api.deps import SpaceDep, StateDep
from services.api.openapi import SPACE_ERRORS, error_responses
from services.api.routes import SPACE_PREFIX

BUNDLE_MEDIA_TYPE = "application/zip"
BUNDLE_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}
"""The OpenAPI of a route whose body is a bundle file, read from the raw stream (`received_bundle`)."""


router = APIRouter(prefix=SPACE_PREFIX, tags=["bundles"], responses=SPACE_ERRORS)


@router.get(
    "/export",
    summary="The space as a bundle (zip: manifest + JSON lines)",
    response_class=FileResponse,
    responses={200: {"content": {BUNDLE_MEDIA_TYPE: {}}}, **error_responses(404)},
)
async def export(key: SpaceDep, state: StateDep) -> FileResponse:
    """A versioned, checksummed snapshot of the space as it was when the export began."""
    staging = Path(tempfile.mkdtemp(prefix="memoryos-export-"))
    out = staging / f"{key.user_id}.bundle"
    try:
        await state.spaces.export_bundle(key, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return FileResponse(
        out,
        media_type=BUNDLE_MEDIA_TYPE,
        filename=out.name,
        background=BackgroundTask(shutil.rmtree, staging, ignore_errors=True),
    )


@router.post(
    "/import",
    status_code=201,
    summary="Import a bundle into an empty space",
    openapi_extra=BUNDLE_BODY,
    responses=error_responses(413),
)
async def import_bundle(request: Request, key: SpaceDep, state: StateDep) -> ImportReport:
    """The body is a bundle file as `export` returns it. Refused with nothing written: an invalid
    bundle (422), a space that already holds memory (409), a space another process holds (503)."""
    async with received_bundle(request) as path:
        report = await state.spaces.import_bundle(key, path)
    return report.model_copy(update={"space": f"{key.user_id}/{key.assistant_id}", "source": "upload"})


@asynccontextmanager
async def received_bundle(request: Request) -> AsyncIterator[Path]:
    """The request's body in a temporary file, deleted when the block exits; an empty body is refused
    here (422), before a job is queued that could only fail."""
    with tempfile.TemporaryDirectory(prefix="memoryos-import-") as staging:
        path = Path(staging) / "upload.bundle"
        with path.open("wb") as file:
            async for chunk in request.stream():
                file.write(chunk)
        if not path.stat().st_size:
            raise InvalidInputError("body", "must be a bundle file (what an export gives); it is empty")
        yield path
