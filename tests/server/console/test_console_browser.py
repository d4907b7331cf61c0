"""The console end to end in headless Chromium (Playwright driving Debian's ``chromium``) against
``flowctl serve``'s app on uvicorn (127.0.0.1, a free port, in a thread): sign in, approve a paused
run from the inbox, cancel with compensation, redrive after fixing a tool, edit context and
continue, and an action without the CSRF token refused. The same tests take the screenshots of
docs/console.md: into docs/console/*.png with FLOWCTL_UPDATE_SCREENSHOTS=1, else into a folder
outside the checkout.

Skipped, saying why, where Playwright's Python package or /usr/bin/chromium is missing (``make
test`` installs Debian's chromium when it runs as root with apt-get; ``playwright install`` is never
used: it downloads a browser build).
"""
from __future__ import annotations

import json
import os
import re
import tempfile
import threading
from pathlib import Path

import pytest

from support.consolekit import Console

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
#: where the screenshots go: docs/console/ (docs/console.md shows them) only when
#: FLOWCTL_UPDATE_SCREENSHOTS=1 asks for it, else a folder outside the checkout, so `make test`
#: leaves the working tree as it was (new-user finding: it showed four modified files after)
SHOTS = (Path(__file__).resolve().parents[3] / "docs" / "console" if os.environ.get("FLOWCTL_UPDATE_SCREENSHOTS") == "1"
         else Path(tempfile.gettempdir()) / "flowctl-console-screenshots")

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed "
                               "(pip install playwright; the browser is Debian's chromium)")
if not CHROMIUM.exists():
    pytest.skip("Debian's chromium is not installed at /usr/bin/chromium (make test installs it with "
                "apt-get when run as root)", allow_module_level=True)
expect = sync_api.expect


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()


class Served:
    """The console app served by uvicorn in a thread; ``url(path)``."""

    def __init__(self, tmp_path):
        import uvicorn

        self.console = Console(tmp_path)
        ready = threading.Event()

        class Server(uvicorn.Server):
            async def startup(self, sockets=None):
                await super().startup(sockets)
                ready.set()

        self.server = Server(uvicorn.Config(self.console.asgi, host="127.0.0.1", port=0, log_level="warning",
                                            lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        assert ready.wait(30), "uvicorn did not start"
        self.port = self.server.servers[0].sockets[0].getsockname()[1]

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self):
        self.server.should_exit = True
        self.thread.join(30)
        self.console.close()


@pytest.fixture
def served(tmp_path):
    s = Served(tmp_path)
    yield s
    s.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    p = context.new_page()
    p.on("dialog", lambda d: d.accept())  # the confirmations
    p.set_default_timeout(20_000)
    yield p
    context.close()


def shot(page, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def sign_in(page, served, key, start="/console/runs", screenshot=False):
    page.goto(served.url(start))
    expect(page).to_have_url(re.compile(r"/console/signin\?next="))
    page.fill("#key", key)
    if screenshot:
        shot(page, "signin")
    page.click("form.signin button[type=submit]")
    expect(page).to_have_url(served.url(start))


def status(page):
    return page.locator("#run-status")


def test_sign_in_find_a_paused_run_and_approve_it_from_the_inbox(served, page):
    c = served.console
    c.fix()
    for to in ("Oslo", "Bergen"):
        c.engine.run("ship", {"to": to})
    c.engine.run("ship", {"to": "nowhere"})
    paused = c.engine.run("grant", {"customer": "Acme"})
    sign_in(page, served, c.key("rita", "runs:read", "reviews"), screenshot=True)
    expect(page.locator("#who")).to_have_text("rita")
    shot(page, "runs")
    page.select_option("select[name=status]", "paused")  # htmx swaps the table body
    expect(page.locator("tr.run")).to_have_count(1)
    page.click(f"tr.run[data-run='{paused.run_id}'] a")
    expect(status(page)).to_have_text("paused")
    page.click("text=decide in the inbox")
    review = page.locator(f"#review-{paused.run_id}")
    expect(review).to_contain_text("Acme")
    expect(review.locator(".countdown")).to_contain_text("left")
    # the form made from the review's data_schema: typed fields, a group, a list, a JSON fallback
    review.locator("[name='data/limit']").fill("250")
    review.locator("[name='data/tier']").select_option("gold")
    review.locator("[name='data/rush']").check()
    review.locator("[name='data/contact/name']").fill("Ann Berg")
    review.locator("[name='data/tags']").fill("vip\nnew")
    review.locator("[name='reason']").fill("known customer")
    shot(page, "reviews")
    review.locator("button.decision-approve").click()
    expect(page).to_have_url(served.url(f"/console/runs/{paused.run_id}"))
    expect(status(page)).to_have_text("succeeded")
    expect(page.locator("tr.ev[data-type=review_decided]")).to_contain_text("by=key:rita")
    assert c.store.get_run(paused.run_id)["status"] == "succeeded"
    decided = [e["data"] for e in c.store.events(paused.run_id) if e["type"] == "review_decided"]
    assert decided[0]["data"] == {"limit": 250, "tier": "gold", "rush": True, "contact": {"name": "Ann Berg"},
                                  "tags": ["vip", "new"]}


def test_cancel_a_run_with_compensation_and_see_the_compensations_in_its_timeline(served, page):
    c = served.console
    paused = c.engine.run("charge", {"amount": 10, "card": "4111-1111"})
    sign_in(page, served, c.key("otto", "runs:read", "runs:write"), f"/console/runs/{paused.run_id}")
    expect(page.locator("#input")).not_to_contain_text("4111-1111")
    page.fill("#cancel-reason", "customer withdrew")
    page.select_option("#cancel-compensate", "yes")
    page.click("#cancel")
    expect(status(page)).to_have_text("cancelled")
    timeline = page.locator("#timeline")
    expect(timeline.locator("tr.ev[data-type=compensation_started]")).to_have_count(1)
    expect(timeline.locator("tr.ev[data-type=compensation_succeeded]")).to_have_count(1)
    expect(timeline.locator("tr.ev[data-type=run_cancelled]")).to_contain_text("by=key:otto")
    expect(page.locator("#graph svg .compensated")).to_have_count(1)
    expect(page.locator("#audit")).to_contain_text("hash chain intact")
    shot(page, "run")
    assert c.store.get_run(paused.run_id)["status"] == "cancelled"


def test_redrive_a_failed_run_after_fixing_its_tool(served, page):
    c = served.console
    failed = c.engine.run("ship", {"to": "Oslo"})
    sign_in(page, served, c.key("otto", "runs:read", "runs:write"), f"/console/runs/{failed.run_id}")
    expect(status(page)).to_have_text("failed")
    expect(page.locator("#graph svg .failed")).to_have_count(1)
    c.fix()  # the carrier is back
    page.fill("#redrive-reason", "carrier back up")
    page.click("#redrive")
    expect(status(page)).to_have_text("succeeded")
    expect(page.locator("tr.ev[data-type=run_redriven]")).to_contain_text("carrier back up")
    expect(page.locator("#output")).to_contain_text("Oslo")


def test_edit_context_and_continue(served, page):
    c = served.console
    c.fix()
    failed = c.engine.run("ship", {"to": "nowhere"})
    sign_in(page, served, c.key("otto", "runs:read", "runs:write"), f"/console/runs/{failed.run_id}")
    expect(page.locator("#edit-context")).to_contain_text("nowhere")
    page.fill("#edit-context", json.dumps({"to": "Bergen"}))
    page.fill("#edit-reason", "address corrected by the customer")
    page.click("#edit")
    expect(status(page)).to_have_text("succeeded")
    expect(page.locator("tr.ev[data-type=context_overridden]")).to_contain_text("Bergen")
    expect(page.locator("#output")).to_contain_text("Bergen")


def test_pause_a_run_at_its_next_checkpoint_and_resume_it(served, page):
    c = served.console
    run = c.engine.run("charge", {"amount": 10, "card": "4111-1111"})  # at its review: it pauses after the decision
    sign_in(page, served, c.key("otto", "runs:read", "runs:write"), f"/console/runs/{run.run_id}")
    page.fill("#pause-reason", "amounts look wrong")
    page.click("#pause")
    expect(page.locator("#pause-requested")).to_contain_text("amounts look wrong")
    c.engine.resume(run.run_id, token=run.review["token"], decision="approve", by="rita")
    page.reload()
    expect(status(page)).to_have_text("paused")
    expect(page.locator("#paused-note")).to_contain_text("by key:otto: amounts look wrong")
    expect(page.locator("tr.ev[data-type=run_paused]").last).to_contain_text("key:otto")
    page.fill("#resume-reason", "checked with finance")
    page.click("#resume")
    expect(status(page)).to_have_text("succeeded")
    assert c.store.get_run(run.run_id)["status"] == "succeeded"


def test_an_action_without_the_csrf_token_is_refused_and_nothing_is_done(served, page):
    c = served.console
    paused = c.engine.run("charge", {"amount": 10, "card": "4111"})
    sign_in(page, served, c.key("otto", "runs:read", "runs:write"), f"/console/runs/{paused.run_id}")
    before = c.store.get_run(paused.run_id)["last_seq"]
    # the browser's own session cookie goes with it: only the missing token is wrong
    r = page.request.post(served.url(f"/console/runs/{paused.run_id}/cancel"), form={"reason": "forged"})
    assert r.status == 403 and "CSRF" in r.text()
    row = c.store.get_run(paused.run_id)
    assert row["status"] == "paused" and row["last_seq"] == before
    page.reload()
    expect(status(page)).to_have_text("paused")


def test_health_page(served, page):
    c = served.console
    c.engine.run("ship", {"to": "Oslo"})  # fails: the tool is broken
    c.fix()
    for to in ("Oslo", "Bergen", "Tromsø"):
        c.engine.run("ship", {"to": to})
    c.engine.cancel(c.engine.run("charge", {"amount": 10, "card": "4111"}).run_id, by="key:otto")
    sign_in(page, served, c.key("otto", "runs:read"), "/console/health")
    expect(page.locator("#runs-count")).to_have_text("5")
    expect(page.locator("#rate-human_takeover_rate")).to_have_class("over")
    shot(page, "health")


def test_a_decision_dismissed_at_its_confirmation_is_not_made(served, browser):
    # (new-user finding: the inbox's buttons decided at once, without their confirmation)
    c = served.console
    paused = c.engine.run("grant", {"customer": "Acme"})
    context = browser.new_context()
    p = context.new_page()
    asked = []
    p.on("dialog", lambda d: (asked.append(d.message), d.dismiss()))
    p.set_default_timeout(20_000)
    try:
        sign_in(p, served, c.key("rita", "runs:read", "reviews"), start="/console/reviews")
        p.locator(f"#review-{paused.run_id} button.decision-reject").click()
        expect(p.locator(f"#review-{paused.run_id}")).to_be_visible()
        assert asked and "reject" in asked[0]
        assert c.store.get_run(paused.run_id)["status"] == "paused"
    finally:
        context.close()
