"""The web inspector (``/ui``) in a real browser against a live ``perdure dev``.

Chromium (Debian's package) driven by Playwright: the token page, a live streaming run
(then one steered, aborted and compacted from the buttons), a
crash mid-tool (``perdure dev`` SIGKILLed while the sandbox runs the command, then
restarted: the page reconnects and shows the recovered tool and the answer), and a
reminder (pending with its message and due time, then fired and answered; another one
cancelled from the page). Each scenario leaves screenshots under the CI output.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.browser.support import (
    CHROMIUM,
    SCREENSHOTS,
    TOKEN,
    DevProcess,
    Sandbox,
)
from tests.models.fake_openai import FakeOpenAI, Stream, finish, text, tool_call, usage

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

try:
    from playwright.sync_api import Browser, Page, expect, sync_playwright
except ImportError:  # pragma: no cover - the suite needs it; a clear failure, not a skip
    pytest.fail("the browser suite needs playwright (pip install '.[test]')", pytrace=False)


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


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1500, "height": 950})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda e: errors.append(str(e)))
    yield opened
    context.close()
    assert errors == [], errors  # no script error in any scenario


def shot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def sign_in(page: Page, dev: DevProcess, actor: str) -> None:
    page.goto(f"{dev.url}/ui")
    expect(page.locator("#login")).to_be_visible()
    page.fill("#token", "not-the-token-at-all")
    page.click("#connect")
    expect(page.locator("#login-error")).to_contain_text("refused (401)")
    page.fill("#token", TOKEN)
    page.click("#connect")
    expect(page.locator("#main")).to_be_visible()
    # The token lives in this tab's session storage, never in the URL.
    assert TOKEN not in page.url
    assert page.evaluate("sessionStorage.getItem('perdure.token')") == TOKEN
    page.fill("#open-actor", actor)
    page.click("#open-actor-form button")
    expect(page.locator("#conversation-title")).to_contain_text(f"{actor} · conversation 1")


def send(page: Page, message: str) -> None:
    page.fill("#input", message)
    page.click("#submit")


def entry(page: Page, kind: str, containing: str) -> object:
    return page.locator(f"#transcript li[data-kind='{kind}']", has_text=containing)


def test_a_live_run_streams_into_the_transcript_with_usage(
    tmp_path: Path, browser: Browser, page: Page, model: FakeOpenAI
) -> None:
    model.reset()
    words = ["Looking ", "for ", "trains ", "to ", "Graz... ", "one ", "leaves ", "at ", "nine."]
    model.script(Stream([*(text(w) for w in words), usage(120, 30), finish("stop")], delay=0.35))
    dev = DevProcess(tmp_path / "data", model.base_url)
    dev.start()
    try:
        sign_in(page, dev, "live")
        send(page, "find a train to Graz")
        expect(entry(page, "user", "find a train to Graz")).to_be_visible()
        # The answer grows in place while the model streams (the watch's appended text).
        partial = page.locator("#partial")
        expect(partial).to_contain_text("Looking for", timeout=15_000)
        shot(page, "live-run-streaming")
        expect(entry(page, "assistant", "one leaves at nine.")).to_be_visible(timeout=20_000)
        expect(partial).to_have_count(0)
        expect(page.locator("#usage-total")).to_contain_text("120 in · 30 out")
        expect(page.locator("#usage-runs tbody tr")).to_have_count(1)
        expect(page.locator("#actors [data-actor='live']")).to_be_visible()
        expect(page.locator("#tasks tbody")).to_contain_text("no live tasks")
        shot(page, "live-run-answered")

        # A run that streams until it is stopped: steer it, then abort it from the page.
        model.script(
            Stream([text("Thinking "), text("about it")], delay=0.3, forever=True),
            Stream([text("A short summary."), finish("stop")]),  # if compaction asks
        )
        send(page, "plan the whole trip")
        expect(partial).to_contain_text("Thinking about it", timeout=15_000)
        page.fill("#input", "prefer the morning")
        page.click("#steer")
        expect(page.locator("#notice")).to_have_text(
            re.compile(r"^steer sent: submission \d+, queued$")
        )
        page.click("#abort")
        expect(page.locator("#notice")).to_have_text("aborted 1 task", timeout=15_000)
        expect(page.locator("#transcript li[data-kind='assistant'] .badge")).to_have_text("aborted")
        # The harness's abort event, by its path: the abort is listed once.
        expect(page.locator("#events [data-event='abort']")).to_contain_text(
            "conversation aborted: 1 task(s) marked"
        )
        expect(page.locator("#events li", has_text="abort")).to_have_count(1)
        expect(partial).to_have_count(0)
        page.click("#compact")
        expect(page.locator("#notice")).to_have_text(
            re.compile(r"^compaction started \(task \d+\)$")
        )
        shot(page, "live-run-steered-aborted-compacted")
    finally:
        dev.stop()


def test_a_crash_mid_tool_is_recovered_and_shown(
    tmp_path: Path, browser: Browser, page: Page, model: FakeOpenAI
) -> None:
    model.reset()
    command = "echo started >> runs.txt; sleep 40; echo seat 12A booked"
    model.script(
        Stream(
            [
                tool_call(
                    0, id="call_book", name="bash", arguments=json.dumps({"command": command})
                ),
                usage(200, 20),
                finish("tool_calls"),
            ]
        ),
        Stream([text("Your seat 12A is booked."), finish("stop")]),
    )
    sandbox = Sandbox(tmp_path / "sandbox")
    sandbox.start()
    dev = DevProcess(tmp_path / "data", model.base_url, sandbox=sandbox)
    dev.start()
    try:
        sign_in(page, dev, "crash")
        send(page, "book me a seat")
        tool_row = page.locator("#tasks tr[data-kind='perdure.tool'][data-state='running']")
        expect(tool_row).to_be_visible(timeout=15_000)
        expect(tool_row.locator("td.tool")).to_have_text("bash")
        expect(tool_row.locator("td.args")).to_contain_text("sleep 40")
        expect(page.locator("#tasks tr[data-kind='perdure.generation']")).to_contain_text("tools")
        # The running run's usage is counted (it joins the ledger when the run ends).
        expect(page.locator("#usage-total")).to_contain_text("200 in · 20 out")
        shot(page, "crash-mid-tool")

        dev.kill()
        expect(page.locator("#connection")).to_have_attribute(
            "data-state", "reconnecting", timeout=15_000
        )
        shot(page, "crash-host-down")

        dev.start()  # same data, port and token: the open page reconnects by itself
        expect(page.locator("#connection")).to_have_attribute(
            "data-state", "online", timeout=20_000
        )
        # The tool task resumed (attempt 2: dev takes ~15 s to restart under load, so the
        # command sleeps long enough to be seen running again) and got the op's result.
        expect(page.locator("#events [data-event='tool resumed']")).to_contain_text(
            "bash (recoverable) resumed after a restart", timeout=20_000
        )
        # The harness's durable events say what the restart recovered, and how.
        expect(page.locator("#events [data-event='restart']")).to_contain_text("bash")
        expect(page.locator("#events [data-event='tool_recovery']")).to_contain_text(
            "bash: recovered"
        )
        expect(entry(page, "tool_result", "seat 12A booked")).to_be_visible(timeout=60_000)
        expect(entry(page, "assistant", "Your seat 12A is booked.")).to_be_visible(timeout=20_000)
        shot(page, "crash-recovered")
    finally:
        dev.stop()
        sandbox.stop()
    # The command ran once: the restart recovered its result, it did not rerun it.
    assert (sandbox.workspace("crash") / "runs.txt").read_text() == "started\n"


def test_a_reminder_is_shown_pending_then_fires_and_one_is_cancelled(
    tmp_path: Path, browser: Browser, page: Page, model: FakeOpenAI
) -> None:
    model.reset()
    model.script(
        Stream(
            [
                tool_call(
                    0,
                    id="call_remind",
                    name="remind",
                    arguments=json.dumps({"after": 4, "message": "stretch your legs"}),
                ),
                finish("tool_calls"),
            ]
        ),
        Stream([text("I will remind you in 4 seconds."), finish("stop")]),
        Stream([text("Time to stretch your legs!"), finish("stop")]),
    )
    dev = DevProcess(tmp_path / "data", model.base_url)
    dev.start()
    try:
        sign_in(page, dev, "remind")
        send(page, "remind me to stretch in 4 seconds")
        timer = page.locator(
            "#timers li[data-kind='perdure.reminder']", has_text="stretch your legs"
        )
        expect(timer).to_be_visible(timeout=15_000)
        expect(timer).to_contain_text(re.compile(r"due \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"))
        expect(entry(page, "assistant", "I will remind you")).to_be_visible(timeout=15_000)
        shot(page, "reminder-pending")
        # The reminder's message arrives as the conversation's next input and is answered.
        expect(entry(page, "user", "stretch your legs")).to_be_visible(timeout=20_000)
        expect(entry(page, "assistant", "Time to stretch your legs!")).to_be_visible(timeout=20_000)
        expect(timer).to_have_count(0)
        shot(page, "reminder-fired")

        # One set from the page, then cancelled from it.
        page.fill("#reminder-message", "water the plants")
        page.fill("#reminder-after", "600")
        page.click("#reminder-form button")
        later = page.locator(
            "#timers li[data-kind='perdure.reminder']", has_text="water the plants"
        )
        expect(later).to_be_visible(timeout=10_000)
        later.locator("button.cancel-timer").click()
        expect(later).to_have_count(0, timeout=10_000)
        expect(page.locator("#notice")).to_have_text(re.compile(r"^reminder \d+ cancelled$"))
        # The cancel is an abort event in the history, naming the reminder's task.
        expect(page.locator("#events [data-event='abort']")).to_contain_text(
            re.compile(r"reminder \d+ cancelled")
        )
        shot(page, "reminder-cancelled")
    finally:
        dev.stop()


def test_a_schedule_is_listed_with_its_message_and_next_occurrence(
    tmp_path: Path, browser: Browser, page: Page, model: FakeOpenAI
) -> None:
    model.reset()
    model.script(Stream([text("Hello."), finish("stop")]))
    dev = DevProcess(tmp_path / "data", model.base_url)
    dev.start()
    try:
        with httpx.Client(base_url=dev.url, headers={"authorization": f"Bearer {TOKEN}"}) as c:
            r = c.post("/v1/actors/cal/submissions", json={"type": "input", "content": "hi"})
            assert r.status_code == 202, r.text
            body = {"message": "Daily report", "cron": "0 9 * * *", "timezone": "Europe/Vienna"}
            made = c.post("/v1/actors/cal/conversations/1/schedules", json=body).json()
        sign_in(page, dev, "cal")
        timer = page.locator("#timers li[data-kind='perdure.schedule']", has_text="Daily report")
        expect(timer).to_be_visible(timeout=15_000)
        expect(timer).to_have_attribute("data-timer", str(made["id"]))
        shot(page, "schedule-listed")
        timer.locator("button.cancel-timer").click()
        expect(timer).to_have_count(0, timeout=10_000)
        expect(page.locator("#notice")).to_contain_text(f"schedule {made['id']} cancelled")
    finally:
        dev.stop()
