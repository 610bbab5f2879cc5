"""Request bodies over the limit are refused with 413 before they are read whole.

A declared `Content-Length` over the limit is answered at once with an `ErrorBody`, without reading a
byte of the body. A body sent without one (chunked) is counted as it arrives, and reading stops with a
413 `HTTPException` at the first chunk past the limit (FastAPI re-raises it from its body parsing, and the
app's handlers answer it). The import routes (`/import`, `/import-jobs`) take bundles, which are larger:
their limit is separate.
(FastAPI's own `max_body_size` answers a declared length in plain text, outside the app's handlers.)
"""

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.api.errors import error_response


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_body_bytes: int, max_bundle_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_bundle_bytes = max_bundle_bytes

    def limit_for(self, scope: Scope) -> int:
        path = str(scope.get("path", ""))
        is_import = scope.get("method") == "POST" and path.endswith(("/import", "/import-jobs"))
        return self.max_bundle_bytes if is_import else self.max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            declared = dict(scope.get("headers") or []).get(b"content-length")
            limit = self.limit_for(scope)
            if declared is not None and declared.isdigit() and int(declared) > limit:
                response = error_response(413, f"request body is {int(declared)} bytes; the limit is {limit}")
                await response(scope, receive, send)
                return
            received = 0

            async def counting_receive() -> Message:
                nonlocal received
                message = await receive()
                if message["type"] == "http.request":
                    received += len(message.get("body", b""))
                    if received > limit:
                        raise HTTPException(413, f"request body over the limit of {limit} bytes")
                return message

            await self.app(scope, counting_receive, send)
            return
        await self.app(scope, receive, send)
