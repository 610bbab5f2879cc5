"""Jobs off the request path (rq, `services/jobs/`): export, import and reindex of a space, queued with
202 and a job id, followed at `GET /v1/jobs/{job_id}`; a finished export's bundle is downloaded from
`GET /v1/jobs/{job_id}/bundle`. Each job asks the space's owner and never opens the space.

Only with Redis (`memoryos serve --redis-url`): embedded, the app has no such routes. A job is its tenant's:
another tenant's key (or a key bound to another user) gets 404 for its status and its bundle.
"""

from typing import Annotated

from anyio import to_thread
from fastapi import APIRouter, Path, Request
from fastapi.responses import StreamingResponse
from rq.job import Job, JobStatus

from memoryos.errors import InvalidInputError
from services.api.deps import CallerDep, QueuedDep, SpaceDep
from services.api.models import JobAccepted, JobError, JobView, ReindexRequest
from services.api.openapi import KEYED_ERRORS, SPACE_ERRORS, error_responses
from services.api.routes import SPACE_PREFIX
from services.api.routes.bundles import BUNDLE_BODY, BUNDLE_MEDIA_TYPE, received_bundle
from services.jobs.bundles import enqueue_export, enqueue_import
from services.jobs.status import JOB_ID, JobNotFoundError, export_transfer_id, tenant_job
from services.jobs.tasks import enqueue_reindex

router = APIRouter(tags=["jobs"], responses=KEYED_ERRORS)

JobId = Annotated[
    str,
    Path(
        description="As the job's 202 answer gave it.", json_schema_extra={"pattern": f"^{JOB_ID.pattern}$"}
    ),
]


def _accepted(job: Job) -> JobAccepted:
    return JobAccepted(job_id=job.id, kind=job.meta["kind"], status_url=f"/v1/jobs/{job.id}")


def job_view(job: Job) -> JobView:
    status = job.get_status(refresh=False)
    kind = job.meta["kind"]
    view = JobView(
        job_id=job.id,
        kind=kind,
        user_id=job.meta["user_id"],
        assistant_id=job.meta["assistant_id"],
        status=JobStatus(status).value if status is not None else "expired",
        enqueued_at=job.enqueued_at,
        ended_at=job.ended_at,
        retries_left=None if status in (JobStatus.FINISHED, JobStatus.FAILED) else job.retries_left,
    )
    if status == JobStatus.FINISHED:
        result = dict(job.return_value() or {})
        if kind == "export":
            result = {"size_bytes": result["size_bytes"], "download": f"/v1/jobs/{job.id}/bundle"}
        view.result = result
    elif status == JobStatus.FAILED:
        recorded = job.meta.get("error")
        view.error = (
            JobError.model_validate(recorded)
            if recorded
            else JobError(status=500, code="internal", message=f"the job failed ({_last_exception(job)})")
        )
    return view


def _last_exception(job: Job) -> str:
    """The class of the job's last exception (its message may name the rq worker's paths)."""
    result = job.latest_result()
    last = (result.exc_string or "").strip().splitlines()[-1:] if result is not None else []
    return last[0].split(":", 1)[0].rsplit(".", 1)[-1] if last else "no reason recorded"


@router.post(
    f"{SPACE_PREFIX}/export-jobs",
    status_code=202,
    summary="Queue an export of the space",
    responses=SPACE_ERRORS,
)
async def export_job(key: SpaceDep, queued: QueuedDep) -> JobAccepted:
    """The owner writes the bundle; once the job has finished, download it from its `result.download`
    (kept `MEMORYOS_JOB_RESULT_TTL_S`, 1 h). 503 when Redis holds too many bundles already."""
    job = await to_thread.run_sync(enqueue_export, queued.client, queued.settings, key)
    return _accepted(job)


@router.post(
    f"{SPACE_PREFIX}/import-jobs",
    status_code=202,
    summary="Queue an import of a bundle into the empty space",
    openapi_extra=BUNDLE_BODY,
    responses={**SPACE_ERRORS, **error_responses(413)},
)
async def import_job(request: Request, key: SpaceDep, queued: QueuedDep) -> JobAccepted:
    """The body is a bundle file as an export gives it. The job fails, with nothing written, for an invalid
    bundle (its error 422) or a space that already holds memory (409)."""
    async with received_bundle(request) as path:
        job = await to_thread.run_sync(enqueue_import, queued.client, queued.settings, key, path)
    return _accepted(job)


@router.post(
    f"{SPACE_PREFIX}/reindex-jobs",
    status_code=202,
    summary="Queue a reindex of the space",
    responses={**SPACE_ERRORS, **error_responses(413)},
)
async def reindex_job(body: ReindexRequest, key: SpaceDep, queued: QueuedDep) -> JobAccepted:
    """Re-embed the space with the model the workers serve; another model fails the job (422)."""
    job = await to_thread.run_sync(enqueue_reindex, queued.client, queued.settings, key, body.model)
    return _accepted(job)


async def _job(job_id: str, caller: CallerDep, queued: QueuedDep) -> Job:
    return await to_thread.run_sync(tenant_job, queued.client, job_id, caller.tenant, caller.user_id)


@router.get("/v1/jobs/{job_id}", summary="A job's status, result or error", responses=error_responses(404))
async def get_job(job_id: JobId, caller: CallerDep, queued: QueuedDep) -> JobView:
    job = await _job(job_id, caller, queued)
    return await to_thread.run_sync(job_view, job)


@router.get(
    "/v1/jobs/{job_id}/bundle",
    summary="The bundle a finished export job made",
    response_class=StreamingResponse,
    responses={200: {"content": {BUNDLE_MEDIA_TYPE: {}}}, **error_responses(404, 409)},
)
async def job_bundle(job_id: JobId, caller: CallerDep, queued: QueuedDep) -> StreamingResponse:
    """Streamed from Redis in chunks; 409 before the job has finished, 404 once the bundle expired."""
    job = await _job(job_id, caller, queued)
    transfer_id = export_transfer_id(job)
    try:
        size, pieces = await to_thread.run_sync(queued.stored_bundle, transfer_id)
    except InvalidInputError:
        raise JobNotFoundError(f"the bundle of job {job_id} expired; queue another export") from None
    return StreamingResponse(
        pieces,
        media_type=BUNDLE_MEDIA_TYPE,
        headers={
            "Content-Length": str(size),
            "Content-Disposition": f'attachment; filename="{job.meta["user_id"]}.bundle"',
        },
    )
