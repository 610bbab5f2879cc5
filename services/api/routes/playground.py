"""The playground: a web page, shipped in the package (`services/api/playground/`), for chatting with a
memory space and watching its tiers work (docs/playground.md).

Only static files are served here, with no key: the page holds no memory. It speaks to the same public
`/v1` routes as any client, with the key the person types in, so the state lives in the service and many
people can use the page at once. The files are a closed list (no path from the request reaches the disk)
and are sent with a Content-Security-Policy that allows scripts, styles and requests from this origin
only: memory text is rendered as text by the page, and the policy is a second wall should that ever slip.
The routes are left out of the OpenAPI schema, which describes the API, not this page.
"""

from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse, RedirectResponse

router = APIRouter(tags=["playground"], include_in_schema=False)

PLAYGROUND_DIR = Path(__file__).resolve().parent.parent / "playground"

ASSETS = {
    "playground.js": "text/javascript; charset=utf-8",
    "playground.css": "text/css; charset=utf-8",
}
"""Every file the page loads, with its media type; any other name is a 404."""

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
        "form-action 'none'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
"""`no-cache` revalidates (ETag) rather than never storing: an upgraded server's page is seen at once."""


@router.get("/playground")
async def playground_redirect() -> RedirectResponse:
    """To `/playground/`, so the page's relative links (assets, and `../v1` for the API) resolve under
    whatever path prefix a proxy serves the API at. The target is relative for the same reason."""
    return RedirectResponse("playground/", status_code=307)


@router.get("/playground/")
async def playground_page() -> FileResponse:
    return FileResponse(
        PLAYGROUND_DIR / "index.html", media_type="text/html; charset=utf-8", headers=SECURITY_HEADERS
    )


@router.get("/playground/{asset}")
async def playground_asset(asset: str) -> FileResponse:
    media_type = ASSETS.get(asset)
    if media_type is None:
        raise HTTPException(404, f"no playground file {asset!r}")
    return FileResponse(PLAYGROUND_DIR / asset, media_type=media_type, headers=SECURITY_HEADERS)
