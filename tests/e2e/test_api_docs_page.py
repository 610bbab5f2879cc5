"""/docs and /redoc in a real headless browser against the real API under uvicorn, with every request
that leaves the machine refused: both pages render from scripts and styles the API serves itself (a
self-hosted deployment behind a firewall gets the docs, not a blank page). ReDoc's footer logo still
points at its CDN; that image is the one thing missing offline."""

import os
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest

from services.api.settings import ApiSettings
from tests.support.api_server import offline_config, running_api
from tests.support.fakes import HashEmbedder

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the dev extra")

pytestmark = pytest.mark.e2e


def test_docs_and_redoc_render_with_no_way_out(browser: "sync_api.Browser", tmp_path: Path) -> None:
    screenshots = Path(os.environ.get("MEMORYOS_SCREENSHOTS_DIR") or tmp_path)
    settings = ApiSettings(port=0, preload_model=False, keys={"mk_test_docs_0123456789": "docs"})
    with running_api(settings, offline_config(tmp_path / "data"), embedder=HashEmbedder()) as api:
        here = urlparse(api.url).netloc
        outside: list[str] = []
        context = browser.new_context(viewport={"width": 1280, "height": 900})

        def only_here(route: "sync_api.Route") -> None:
            if urlparse(route.request.url).netloc == here:
                route.continue_()
            else:  # ReDoc's "by Redocly" logo is an image from its CDN: missing, nothing else is
                if route.request.resource_type != "image":
                    outside.append(route.request.url)
                route.abort()

        context.route("**/*", only_here)
        page = context.new_page()
        page.set_default_timeout(30_000)
        page.goto(f"{api.url}/docs")
        sync_api.expect(page.locator(".opblock").first).to_be_visible()  # Swagger UI drew the operations
        sync_api.expect(page.locator(".info .title")).to_contain_text("MemoryOS")
        page.screenshot(path=str(screenshots / "api-docs.png"))
        page.goto(f"{api.url}/redoc")
        sync_api.expect(page.locator(".api-content").first).to_be_visible()  # ReDoc drew the reference
        context.close()
        assert outside == [], "the pages needed scripts, styles or data from beyond the API"
        assert "cdn" not in httpx.get(f"{api.url}/docs").text.lower()
