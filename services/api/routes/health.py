"""Liveness, readiness and Prometheus metrics; no key needed (they show no memory and no tenant)."""

from fastapi import APIRouter, Response

from services.api.deps import StateDep

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="The process answers")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="The model is loaded and calls will be served", responses={503: {}})
async def readyz(state: StateDep, response: Response) -> dict[str, str]:
    """503 while starting, and in Redis mode while Redis does not answer (asked on every probe)."""
    if not state.ready:
        response.status_code = 503
        return {"status": "starting"}
    if not await state.spaces.ready():
        response.status_code = 503
        return {"status": "redis unavailable"}
    return {"status": "ready"}


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(state: StateDep) -> Response:
    return Response(state.metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")
