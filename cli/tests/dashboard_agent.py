"""An agent task's events in a real browser (system Chromium driven by Playwright for Python),
run by cli/tests/dashboard_agent.rs, which starts `babysitter up` with the pinned Claude Code
against the scripted model server and creates the run. Argument: one JSON object on argv[1].
Exits non-zero (with the assertion) when the page does not show what it must. Waits are for
conditions, with timeouts; nothing asserts on time."""

import json
import os
import sys

from playwright.sync_api import sync_playwright, expect

cfg = json.loads(sys.argv[1])
URL = cfg["url"]
RUN = cfg["run"]
T = 60_000  # ms, every wait

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

with sync_playwright() as p:
    browser = p.chromium.launch_persistent_context(
        cfg["profile"], executable_path="/usr/bin/chromium", args=ARGS, headless=True,
        viewport={"width": 1400, "height": 900})
    page = browser.new_page()
    page.goto(URL + "/")
    page.fill('input[name="token"]', cfg["token"])
    page.click('button[type="submit"]')
    expect(page.locator(".board")).to_be_visible(timeout=T)
    page.goto(URL + "/runs/" + RUN)

    # The run waits on its breakpoint: approved from the page, the agent task starts while the
    # page follows the run, and its events arrive live (the tool call, then its command waits).
    expect(page.locator(".breakpoint textarea")).to_be_visible(timeout=T)
    page.fill(".breakpoint textarea", "go ahead, agent")
    page.click("button.approve")
    live = page.locator("#agent-events li.agent-event")
    expect(live.filter(has_text="session.started")).to_have_count(1, timeout=T)
    expect(live.filter(has_text="Bash(")).not_to_have_count(0, timeout=T)
    expect(page.locator('.task[data-kind="agent"][data-state="leased"]')).to_have_count(1, timeout=T)
    print("live agent events:", live.count())

    # The command may finish: the agent answers, the run completes, and the task's stored
    # events read back as its timeline — the tool call, its output, the answer — with the
    # worker and harness that ran it.
    open(cfg["release"], "w").close()
    expect(page.locator('#run-status[data-status="completed"]')).to_be_visible(timeout=T)
    task = page.locator('.task[data-kind="agent"]')
    expect(task).to_have_attribute("data-state", "ok", timeout=T)
    expect(task).to_contain_text("worker ", timeout=T)
    expect(task).to_contain_text("harness claude-code", timeout=T)
    task.locator("button.agent-btn").click()
    timeline = page.locator("#agent-timeline li.agent-event")
    expect(timeline.filter(has_text="tool_call assistant: Bash(")).to_have_count(1, timeout=T)
    expect(timeline.filter(has_text=cfg["tool_output"])).not_to_have_count(0, timeout=T)
    expect(timeline.filter(has_text=cfg["answer"])).not_to_have_count(0, timeout=T)
    expect(page.locator('#agent-timeline li[data-type="item.delta"]')).to_have_count(0, timeout=T)
    os.makedirs(cfg["screenshots"], exist_ok=True)
    page.locator("#log-view").scroll_into_view_if_needed()
    page.screenshot(path=os.path.join(cfg["screenshots"], "agent-events.png"), full_page=True)
    print("stored agent events:", timeline.count())
    browser.close()
print("browser checks passed")
