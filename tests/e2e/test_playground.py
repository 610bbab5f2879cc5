"""The playground page in a real headless browser (Debian's chromium driven by Playwright) against the
real API under uvicorn: import a conversation through the page's file input, ask a question and see the
answer with the context it used, consolidate and see a segment's heat bar and the facts, forget the
user and see the space empty. The server has an API key, so the page's key field is exercised too.

Screenshots are taken on every run, into the test's temporary directory; with MEMORYOS_SCREENSHOTS_DIR set
(`MEMORYOS_SCREENSHOTS_DIR=docs/benchmarks`) they go there instead: docs/playground.md shows them, and a
plain test run leaves the committed ones alone."""

import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from services.api.settings import ApiSettings
from tests.support.api_server import RunningApi, offline_config, running_api
from tests.support.fakes import HashEmbedder

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the dev extra")

pytestmark = pytest.mark.e2e

KEY = "mk_test_playground_0123456789"
INJECTED = '<img src=x onerror="window.__pwned=1"><b id="injected">bold</b>'

TURNS = [
    ("I adopted a dog called Pico last spring.", "Pico is a lovely name for a dog!"),
    ("Pico the dog loves chasing the ball in the park.", "Dogs love a good game of fetch."),
    ("I work as a nurse at the hospital in Lyon.", "Nursing in Lyon must keep you busy."),
    ("The night shifts at the hospital are tiring.", "Rest well between your night shifts."),
    ("My sister Maria lives in Porto.", "Porto is a beautiful city by the river."),
    ("Maria visits me in Lyon every summer.", "Summer visits from your sister sound lovely."),
    (f"Can you show this markup: {INJECTED}", "I will show it as plain text."),
    ("I started learning the guitar last month.", "Guitar takes patience; scales help."),
    ("Guitar scales are hard on my fingers.", "Your fingertips will toughen up."),
    ("I am reading a novel about the sea.", "Sea novels can be very calming."),
]


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApi]:
    settings = ApiSettings(port=0, preload_model=False, keys={KEY: "playground-tenant"})
    # A small short-term memory, so ten turns overflow into mid-term segments.
    config = offline_config(tmp_path_factory.mktemp("playground-data"), short_term_capacity=4)
    with running_api(settings, config, embedder=HashEmbedder()) as running:
        yield running


def assert_bars_show_stats(api: RunningApi, bars: "sync_api.Locator") -> None:
    """One bar per segment of /stats, hottest first, each labelled with its heat (rounded down)."""
    stats = httpx.get(api.space_url("maya", "helper") + "/stats", headers={"authorization": f"Bearer {KEY}"})
    segments = sorted(stats.json()["segments"], key=lambda s: (-s["heat"], s["segment_id"]))
    assert segments, "ten turns over a short-term memory of four should have made segments"
    labels = [
        f"segment {s['segment_id']}, heat {math.floor(s['heat'] * 100 + 1e-9) / 100:.2f}" for s in segments
    ]
    sync_api.expect(bars).to_have_count(len(segments))
    assert [bars.nth(i).get_attribute("aria-label") for i in range(len(segments))] == labels


def test_the_static_files_are_served_without_a_key_and_with_a_strict_policy(api: RunningApi) -> None:
    page = httpx.get(f"{api.url}/playground", follow_redirects=True)
    assert page.status_code == 200 and str(page.url).endswith("/playground/")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert '<script src="playground.js"' in page.text
    assert not re.search(r'(src|href)="(https?:)?//', page.text), "everything is served from here (offline)"
    for asset, media in (("playground.js", "text/javascript"), ("playground.css", "text/css")):
        served = httpx.get(f"{api.url}/playground/{asset}")
        assert served.status_code == 200 and served.headers["content-type"].startswith(media)
    script = httpx.get(f"{api.url}/playground/playground.js").text
    assert "innerHTML" not in script and "insertAdjacentHTML" not in script and "eval(" not in script
    for missing in ("index.htm", "..%2Fplayground.py", "routes"):
        assert httpx.get(f"{api.url}/playground/{missing}").status_code == 404
    assert not any(path.startswith("/playground") for path in api.app.openapi()["paths"])


def test_import_ask_consolidate_and_forget_in_the_page(
    api: RunningApi, browser: "sync_api.Browser", tmp_path: Path
) -> None:
    screenshots = Path(os.environ.get("MEMORYOS_SCREENSHOTS_DIR") or tmp_path)
    conversation = tmp_path / "turns.json"
    conversation.write_text(
        json.dumps(
            [
                {"user_input": user, "agent_response": agent, "timestamp": f"2024-05-01 10:{i:02d}:00"}
                for i, (user, agent) in enumerate(TURNS)
            ]
        ),
        encoding="utf-8",
    )
    context = browser.new_context(viewport={"width": 1440, "height": 1000}, device_scale_factor=1)
    page = context.new_page()
    page.set_default_timeout(30_000)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    expect = sync_api.expect

    # No key yet: the page says so instead of showing anything.
    page.goto(f"{api.url}/playground")
    expect(page.locator("#status")).to_contain_text("needs an API key")
    page.fill("#user-id", "maya")
    page.fill("#assistant-id", "helper")
    page.fill("#api-key", KEY)
    page.click("#open-space")
    expect(page.locator("#space-empty")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('memoryos.playground.key')") == KEY

    # Import through the file input, in batches, with the progress bar filling up.
    page.set_input_files("#import-file", str(conversation))
    expect(page.locator("#import-conversation")).to_contain_text("10 turns")
    page.click("#import-start")
    expect(page.locator("#import-status")).to_have_text("Imported 10 turns from turns.json", timeout=60_000)
    assert page.eval_on_selector("#import-progress", "p => [p.value, p.max]") == [10, 10]
    expect(page.locator("#count-stm b")).to_have_text("4")
    expect(page.locator("#short-term li.page")).to_have_count(4)
    stm = int(page.inner_text("#count-stm b"))
    mtm = int(page.inner_text("#count-mtm b"))
    assert stm + mtm == len(TURNS)
    expect(page.locator("#count-storage b")).to_have_text(re.compile(r"^\d+(\.\d)? (kB|MB)$"))

    # Memory text is shown as text: the markup in a turn is neither parsed nor run.
    expect(page.get_by_text(INJECTED, exact=False).first).to_be_attached()
    assert page.locator("#injected").count() == 0
    assert page.evaluate("window.__pwned") is None

    # Ask: the answer, and the context it was built from.
    page.fill("#chat-input", "What is my dog called?")
    page.press("#chat-input", "Enter")
    answer = page.locator(".message.assistant:not(.pending)").last
    expect(answer.locator(".answer")).not_to_be_empty()
    retrieved = answer.locator(".ctx-retrieved li.page")
    expect(retrieved.first).to_be_visible()
    expect(answer.locator(".ctx-retrieved")).to_contain_text("Pico")
    expect(retrieved.first.locator(".badge.score")).to_have_text(re.compile(r"score -?\d+\.\d{3}"))
    expect(answer.locator(".ctx-short-term li.page")).to_have_count(4)
    expect(answer.locator(".ctx-profile h5")).to_contain_text("Profile")

    # The segments' heat, stacked by part: pages not yet analyzed (length), the question's visits,
    # recency; against the promotion threshold's line. The bars are /stats' numbers.
    chart = page.locator("#heat-chart")
    bars = chart.locator(".segment-bar")
    expect(chart.locator("rect.part-visits").first).to_be_attached()
    expect(chart.locator("rect.part-length").first).to_be_attached()
    expect(chart.locator("rect.part-recency").first).to_be_attached()
    expect(chart.locator("line.threshold")).to_have_count(1)
    expect(chart.locator(".threshold-label")).to_have_text("promotion threshold 5.0")
    assert_bars_show_stats(api, bars)
    screenshots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(screenshots / "playground.png"), full_page=True)
    page.locator(".panel.space").screenshot(path=str(screenshots / "playground-heat.png"))

    # Without the context: /response alone, and no context under the answer.
    page.uncheck("#show-context")
    page.fill("#chat-input", "Where does my sister live?")
    page.click("#chat-send")
    bare = page.locator(".message.assistant").nth(1)
    expect(bare.locator(".answer")).not_to_be_empty()
    assert bare.locator(".context").count() == 0

    # Consolidate: the segments are analyzed into profile and facts, and promotion resets their visits
    # and length, so only recency is left of their heat.
    page.click("#consolidate")
    expect(page.locator("#status")).to_contain_text("Consolidated")
    expect(page.locator("#user-facts li.fact").first).to_be_visible()
    expect(page.locator("#profile")).not_to_have_class(re.compile(r"empty"))
    expect(chart.locator("rect.part-length")).to_have_count(0)
    expect(chart.locator("rect.part-visits")).to_have_count(0)
    expect(bars.first.locator("rect.part-recency")).to_be_attached()
    assert_bars_show_stats(api, bars)

    # A segment's pages, grouped by dialogue chain.
    bars.first.click()
    detail = page.locator("#segment-detail")
    expect(detail).to_be_visible()
    expect(detail.locator("h4")).to_have_text(re.compile(r"Segment #\d+"))
    expect(detail.locator("li.page").first).to_be_visible()

    # A fact's history.
    fact = page.locator("#user-facts li.fact").first
    fact.locator("button.link").click()
    expect(fact.locator(".history li").first).to_contain_text("v1:")

    page.locator(".panel.space").screenshot(path=str(screenshots / "playground-consolidated.png"))
    assert all(
        (screenshots / f"playground{n}.png").stat().st_size > 10_000 for n in ("", "-heat", "-consolidated")
    )

    # Export downloads the space's bundle.
    with page.expect_download() as download:
        page.click("#export")
    saved = tmp_path / "export.zip"
    download.value.save_as(saved)
    assert saved.read_bytes()[:2] == b"PK"

    # Forget, after a confirmation: the space is empty, in the page and in the service.
    page.click("#forget")
    expect(page.locator("#forget-dialog")).to_be_visible()
    expect(page.locator("#forget-name")).to_have_text("maya / helper")
    page.click("#forget-cancel")
    expect(page.locator("#forget-dialog")).to_be_hidden()
    expect(page.locator("#count-stm")).to_be_visible()  # cancelled: nothing forgotten
    page.click("#forget")
    page.click("#forget-confirm")
    expect(page.locator("#space-empty")).to_be_visible()
    expect(page.locator("#heat-chart .segment-bar")).to_have_count(0)
    expect(page.locator("#short-term li.page")).to_have_count(0)
    expect(page.locator("#user-facts li.fact")).to_have_count(0)
    gone = httpx.get(api.space_url("maya", "helper") + "/stats", headers={"authorization": f"Bearer {KEY}"})
    assert gone.status_code == 404 and gone.json()["error"] == "space_not_found"

    assert errors == []
    context.close()


def test_a_locomo_file_offers_each_conversation_in_the_page(
    api: RunningApi, browser: "sync_api.Browser", tmp_path: Path
) -> None:
    """LoCoMo's upstream layout is turned into turns in the page by the rules of memoryos/eval/locomo.py:
    the same count of pairs, with the session date as timestamp."""
    sample = {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ben", "dia_id": "D1:1", "text": "Hi Ana!"},
                {"speaker": "Ana", "dia_id": "D1:2", "text": "Hi! Look.", "blip_caption": "a photo of a cat"},
                {"speaker": "Ben", "dia_id": "D1:3", "text": "Cute cat."},
                {"speaker": "Ana", "dia_id": "D1:4", "text": "Bye."},
            ],
            "session_2_date_time": "9:05 am on 10 May, 2023",
            "session_2": [],
        },
        "qa": [],
    }
    locomo = tmp_path / "locomo.json"
    locomo.write_text(json.dumps([sample, {**sample, "sample_id": "conv-y"}]), encoding="utf-8")
    page = browser.new_page()
    page.goto(f"{api.url}/playground/")
    page.fill("#api-key", KEY)
    page.fill("#user-id", "ana")
    page.click("#open-space")
    page.set_input_files("#import-file", str(locomo))
    options = page.locator("#import-conversation option")
    sync_api.expect(options).to_have_text(["conv-x: 3 turns", "conv-y: 3 turns"])
    page.select_option("#import-conversation", index=1)
    page.click("#import-start")
    sync_api.expect(page.locator("#import-status")).to_have_text(
        "Imported 3 turns from conv-y", timeout=60_000
    )
    listed = httpx.get(
        api.space_url("ana", "default_assistant_profile") + "/memories",
        headers={"authorization": f"Bearer {KEY}"},
    ).json()
    turns = [(p["user_input"], p["agent_response"], p["timestamp"]) for p in listed["pages"]]
    assert turns == [
        ("(no message)", "Hi Ana!", "2023-05-08 13:56:00"),
        ("Hi! Look. (image description: a photo of a cat)", "Cute cat.", "2023-05-08 13:56:00"),
        ("Bye.", "(no reply)", "2023-05-08 13:56:00"),
    ]
    page.close()
