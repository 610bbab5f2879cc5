"""Liveness, readiness and Prometheus metrics; no key needed (they show no memory and no tenant)."""

from anyio import to_thread
from fastapi import APIRouter, Response

from services.api.deps import StateDep

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="The process answers")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="The model is loaded and calls will be served", responses={503: {}})
async def readyz(state: StateDep, response: Response) -> dict[str, str | int]:
    """503 while starting, and in Redis mode while Redis does not answer (asked on every probe). Ready,
    it names the forgets that failed and are being retried (`forgets_failing`), when there are any: the
    service still serves, but an operator has a user not yet erased to look at (docs/service.md)."""
    if not state.ready:
        response.status_code = 503
        return {"status": "starting"}
    if not await state.spaces.ready():
        response.status_code = 503
        return {"status": "redis unavailable"}
    failing = (await to_thread.run_sync(state.spaces.figures)).forgets_failing
    return {"status": "ready", "forgets_failing": failing} if failing else {"status": "ready"}


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(state: StateDep) -> Response:
    return Response(state.metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")
