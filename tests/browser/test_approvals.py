"""Tool approvals in the web inspector (issue 34), in Chromium: a call pending approval
is listed with its tool, arguments and conversation; Approve runs the tool once and the
run answers; Deny with a note gives the agent the note; both leave the list empty.
Against a local host process with the approval tools (``tests/local/host_proc.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.browser.support import CHROMIUM, SCREENSHOTS
from tests.local.support import TOKEN, start_host_process, stop, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

try:
    from playwright.sync_api import Page, expect, sync_playwright
except ImportError:  # pragma: no cover - the suite needs it; a clear failure, not a skip
    pytest.fail("the browser suite needs playwright (pip install '.[test]')", pytrace=False)

ACTOR = "ida"


@pytest.fixture
def host(tmp_path: Path) -> Iterator[str]:
    proc, url = start_host_process(tmp_path / "data", "--approvals", "3600")
    try:
        yield url
    finally:
        stop(proc)


@pytest.fixture
def page() -> Iterator[Page]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM} (apt-get install chromium)", pytrace=False)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        opened = browser.new_page(viewport={"width": 1500, "height": 950})
        errors: list[str] = []
        opened.on("pageerror", lambda e: errors.append(str(e)))
        yield opened
        browser.close()
        assert errors == [], errors


def ask(api: httpx.Client, path: Path) -> int:
    r = api.post(
        f"/v1/actors/{ACTOR}/submissions", json={"type": "input", "content": f"guard:{path}"}
    )
    assert r.status_code == 202, r.text
    wait_until(lambda: bool(api.get(f"/v1/actors/{ACTOR}/approvals").json()["approvals"]))
    return int(r.json()["id"])


def answer(api: httpx.Client, sid: int) -> str:
    state = api.get(f"/v1/actors/{ACTOR}/submissions/{sid}", params={"wait": 20}).json()
    assert state["status"] == "done", state
    return str(state["answer"]["text"])


def test_the_inspector_lists_pending_approvals_with_approve_and_deny(
    host: str, page: Page, tmp_path: Path
) -> None:
    approved, denied = tmp_path / "approved.txt", tmp_path / "denied.txt"
    with httpx.Client(
        base_url=host, headers={"authorization": f"Bearer {TOKEN}"}, timeout=30
    ) as api:
        first = ask(api, approved)
        page.goto(f"{host}/ui#actor={ACTOR}")
        page.fill("#token", TOKEN)
        page.click("#connect")
        item = page.locator("#approvals li[data-approval]")
        expect(item).to_have_count(1)
        expect(item).to_contain_text("guarded")
        expect(item).to_contain_text(str(approved))
        expect(item).to_contain_text("conversation 1")
        expect(page.locator("#events")).to_contain_text("guarded waits for approval")
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "approval-pending.png"), full_page=True)
        item.locator("button.approve").click()
        expect(page.locator("#approvals")).to_contain_text("no pending approvals")
        assert answer(api, first).startswith("guarded finished: guarded wrote")
        assert approved.read_text() == "ran\n"

        second = ask(api, denied)
        expect(item).to_have_count(1)
        item.locator("input.approval-note").fill("use the other account")
        item.locator("button.deny").click()
        expect(page.locator("#approvals")).to_contain_text("no pending approvals")
        assert "use the other account" in answer(api, second)
        expect(page.locator("#events")).to_contain_text("guarded: denied — use the other account")
        assert not denied.exists()
    assert approved.read_text() == "ran\n"
