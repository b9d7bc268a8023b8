"""The web inspector at a phone's, a small laptop's and a desktop's width (375, 800 and
1,400 px) in Chromium against a live ``perdure dev``, and what a new user met there
(issue 33): every button and input inside the window and inside its box, the top bar in
words (never an API answer's JSON), the events in time order with each abort once, a
manual compaction with nothing to compact shown as ended, the reminder's unit, a
running tool's output as it comes, and a token scoped to one actor opening it directly.

Each width leaves full-page screenshots in a temporary directory (printed; under
``PERDURE_CI_ARTIFACTS`` in CI): look at them.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from runtimes.client import ActorClient
from tests.browser.support import CHROMIUM, TOKEN, DevProcess, Sandbox, through_the_api
from tests.models.fake_openai import FakeOpenAI, Stream, finish, text, tool_call, usage

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

try:
    from playwright.sync_api import Browser, Page, Route, expect, sync_playwright
except ImportError:  # pragma: no cover - the suite needs it; a clear failure, not a skip
    pytest.fail("the browser suite needs playwright (pip install '.[test]')", pytrace=False)

WIDTHS = (375, 800, 1400)
_ARTIFACTS = os.environ.get("PERDURE_CI_ARTIFACTS")
SHOTS = (
    Path(_ARTIFACTS) / "screenshots" / "layout"
    if _ARTIFACTS
    else Path(tempfile.mkdtemp(prefix="perdure-inspector-"))
)

# Every visible button and input: inside the window, inside each box that clips
# (overflow other than visible), and showing all of its own text.
_CLIPPED = """
() => {
  const out = [];
  const width = document.documentElement.clientWidth;
  const name = (el) =>
    el.id || el.getAttribute("aria-label") || el.textContent.trim() || el.tagName;
  for (const el of document.querySelectorAll("button, input, textarea, select")) {
    if (!el.offsetParent) continue;  // hidden
    const r = el.getBoundingClientRect();
    if (r.left < -0.5 || r.right > width + 0.5) {
      out.push(`${name(el)}: outside the window (${r.left}..${r.right} of ${width})`);
    }
    if (el.tagName === "BUTTON" && el.scrollWidth > el.clientWidth + 1) {
      out.push(`${name(el)}: its text is cut`);
    }
    for (let box = el.parentElement; box && box !== document.body; box = box.parentElement) {
      const style = getComputedStyle(box);
      if (style.overflowX === "visible" && style.overflowY === "visible") continue;
      if (style.overflowX === "auto" || style.overflowX === "scroll") continue;  // reachable
      const b = box.getBoundingClientRect();
      if (r.left < b.left - 0.5 || r.right > b.right + 0.5) {
        out.push(`${name(el)}: clipped by ${box.id || box.tagName}`);
      }
    }
  }
  const page = document.documentElement.scrollWidth;
  if (page > width + 1) out.push(`the page scrolls sideways (${page} > ${width})`);
  return out;
}
"""
_RAW_JSON = re.compile(r"[{\[]\s*\"|\"\s*:")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM} (apt-get install chromium)", pytrace=False)
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def model() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    server = Sandbox(tmp_path_factory.mktemp("sandbox"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def dev(
    tmp_path_factory: pytest.TempPathFactory, model: FakeOpenAI, sandbox: Sandbox
) -> Iterator[DevProcess]:
    process = DevProcess(tmp_path_factory.mktemp("dev") / "data", model.base_url, sandbox)
    process.start()
    yield process
    process.stop()


def open_page(browser: Browser, width: int) -> tuple[Page, list[str]]:
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    return page, errors


def shot(page: Page, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path


def assert_nothing_clipped(page: Page, where: str) -> None:
    problems = page.evaluate(_CLIPPED)
    assert problems == [], f"{where}: {problems}"


def assert_top_bar_in_words(page: Page) -> None:
    bar = page.locator("body > header").inner_text()
    assert not _RAW_JSON.search(bar), f"raw JSON in the top bar: {bar!r}"


def event_times(page: Page) -> list[datetime]:
    stamps = page.locator("#events li time").all_inner_texts()
    return [datetime.fromisoformat(s.replace("Z", "+00:00")) for s in stamps]


def sign_in(page: Page, dev: DevProcess, token: str) -> None:
    page.goto(f"{dev.url}/ui")
    expect(page.locator("#login")).to_be_visible()
    page.fill("#token", token)
    page.click("#connect")
    expect(page.locator("#main")).to_be_visible()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_page_at_each_width(
    width: int, browser: Browser, model: FakeOpenAI, dev: DevProcess
) -> None:
    model.reset()
    model.script(
        Stream(
            [
                text("One train leaves at nine, "),
                text("another at ten."),
                usage(50, 9),
                finish("stop"),
            ]
        ),
        Stream([text("Thinking "), text("about it")], delay=0.3, forever=True),
    )
    actor = f"width-{width}"
    page, errors = open_page(browser, width)
    try:
        page.goto(f"{dev.url}/ui")
        expect(page.locator("#login")).to_be_visible()
        assert_nothing_clipped(page, "the token page")
        shot(page, f"{width}-login")

        sign_in(page, dev, TOKEN)
        page.fill("#open-actor", actor)
        page.click("#open-actor-form button")
        page.fill("#input", "find a train to Graz")
        page.click("#submit")
        answer = page.locator("#transcript li[data-kind='assistant']", has_text="another at ten")
        expect(answer).to_be_visible(timeout=20_000)
        expect(page.locator("#notice")).to_have_text(re.compile(r"^message sent: submission \d+"))
        expect(page.locator("#scheduling")).to_have_text("idle")  # not "running" over nothing
        expect(page.locator("#tasks tbody")).to_contain_text("no live tasks")

        # A run aborted from the page: said in words, its abort listed once.
        page.fill("#input", "plan the whole trip")
        page.click("#submit")
        expect(page.locator("#partial")).to_contain_text("Thinking about it", timeout=15_000)
        expect(page.locator("#scheduling")).to_have_text(re.compile(r"^\d+ live"))
        page.click("#abort")
        expect(page.locator("#notice")).to_have_text("aborted 1 task", timeout=15_000)
        expect(page.locator("#transcript li[data-kind='assistant'] .badge")).to_have_text("aborted")
        # A compaction with nothing to compact ends, and says why.
        page.click("#compact")
        expect(page.locator("#notice")).to_have_text(re.compile(r"^compaction started \(task"))
        expect(page.locator("#events [data-event='compaction']").last).to_contain_text(
            "skipped (nothing to compact)", timeout=15_000
        )
        # The reminder's delay says its unit; a pending one can be cancelled.
        expect(page.locator("#reminder-form label.after")).to_have_text(re.compile(r"in\s+seconds"))
        page.fill("#reminder-message", "water the plants")
        page.fill("#reminder-after", "600")
        page.click("#remind")
        expect(page.locator("#notice")).to_have_text(re.compile(r"^reminder set for \d{4}-"))
        expect(page.locator("#timers li[data-kind='perdure.reminder']")).to_be_visible()

        assert_top_bar_in_words(page)
        abort_lines = page.locator("#events li", has_text=re.compile("abort"))
        expect(abort_lines).to_have_count(1)
        times = event_times(page)
        assert len(times) >= 3 and times == sorted(times), times
        page.evaluate("window.scrollTo(0, 0)")
        assert_nothing_clipped(page, f"the inspector at {width} px")
        shot(page, f"{width}-inspector")
        # Readable: the transcript is at least most of a phone's width, or 400 px.
        box = page.locator("#transcript").bounding_box()
        assert box is not None and box["width"] >= min(0.8 * width, 400), box
    finally:
        page.context.close()
    assert errors == [], errors


def test_a_running_tool_s_output_appears_live(
    browser: Browser, model: FakeOpenAI, dev: DevProcess
) -> None:
    model.reset()
    command = "for i in 1 2 3 4 5 6; do echo step $i; sleep 1; done"
    model.script(
        Stream(
            [
                tool_call(
                    0, id="call_steps", name="bash", arguments=json.dumps({"command": command})
                ),
                finish("tool_calls"),
            ]
        ),
        Stream([text("All six steps ran."), finish("stop")]),
    )
    page, errors = open_page(browser, 800)
    try:
        sign_in(page, dev, TOKEN)
        page.fill("#open-actor", "tool-live")
        page.click("#open-actor-form button")
        page.fill("#input", "run the steps")
        page.click("#submit")
        live = page.locator("#transcript li.live-tool")
        expect(live).to_contain_text("step 2", timeout=20_000)
        # Shown while the tool still runs: its result entry is not there yet.
        expect(page.locator("#transcript li[data-kind='tool_result']")).to_have_count(0)
        shot(page, "800-tool-output-live")
        expect(
            page.locator("#transcript li[data-kind='tool_result']", has_text="step 6")
        ).to_be_visible(timeout=30_000)
        expect(live).to_have_count(0)
    finally:
        page.context.close()
    assert errors == [], errors


@pytest.mark.parametrize("rights", ["read", "submit"])
def test_a_token_for_one_actor_opens_it_directly(
    rights: str, browser: Browser, model: FakeOpenAI, dev: DevProcess
) -> None:
    model.reset()
    model.script(Stream([text("hello from the scoped actor"), finish("stop")]))
    actor = f"scoped-{rights}"

    async def answered_then_minted(client: ActorClient) -> str:
        await client.ask(actor, "hi", timeout=20)
        return (await client.mint_token(actor, rights, 600)).token

    token = through_the_api(dev.url, answered_then_minted)
    page, errors = open_page(browser, 375)
    try:
        # A tampered one is refused, with the host's reason.
        forged = token.rsplit(".", 1)[0] + "." + "A" * 43
        page.goto(f"{dev.url}/ui")
        page.fill("#token", forged)
        page.click("#connect")
        expect(page.locator("#login-error")).to_have_text(
            "That token was refused (401): invalid bearer token"
        )
        sign_in(page, dev, token)  # no "list the actors" first: that is the operator's
        expect(page.locator("#conversation-title")).to_contain_text(f"{actor} · conversation 1")
        expect(page.locator("#transcript li[data-kind='assistant']")).to_contain_text(
            "hello from the scoped actor", timeout=15_000
        )
        expect(page.locator("#scope")).to_contain_text(f"actor {actor}")
        expect(page.locator("#open-actor-form")).to_be_hidden()
        expect(page.locator("#login-error")).to_have_text("")
        submit = page.locator("#submit")
        (expect(submit).to_be_disabled if rights == "read" else expect(submit).to_be_enabled)()
        expect(page.locator("#compact")).to_be_disabled()  # admin's
        assert_top_bar_in_words(page)
        assert_nothing_clipped(page, f"a {rights} token at 375 px")
        shot(page, f"375-scoped-{rights}")
    finally:
        page.context.close()
    assert errors == [], errors


def test_a_host_that_cannot_stream_the_watch_is_long_polled(
    browser: Browser, model: FakeOpenAI, dev: DevProcess
) -> None:
    """Lambda answers whole responses only: its watch fails (500) where the local host
    streams. The page then reads the same frames from the long poll (``deltas``)."""
    model.reset()
    words = ["Polled ", "all ", "the ", "way."]
    model.script(Stream([*(text(w) for w in words), finish("stop")], delay=0.3))
    page, errors = open_page(browser, 800)
    refused: list[str] = []

    def no_stream(route: Route) -> None:
        refused.append(route.request.url)
        route.fulfill(status=500, body="Internal Server Error", content_type="text/plain")

    page.route("**/watch", no_stream)
    try:
        sign_in(page, dev, TOKEN)
        page.fill("#open-actor", "long-poll")
        page.click("#open-actor-form button")
        page.fill("#input", "poll me")
        page.click("#submit")
        answer = page.locator("#transcript li[data-kind='assistant']")
        expect(answer).to_contain_text("Polled all the way.", timeout=20_000)
        expect(page.locator("#connection")).to_have_attribute("data-state", "online")
        assert refused, "the page never tried the stream"
    finally:
        page.context.close()
    assert errors == [], errors
