"""Board of many runs in a real browser (run by cli/tests/dashboard_scale.rs, for `observe` and
for the orchestrator): loads the board, waits until every bucket counts what the test put in,
prints the page load time and the page's JS heap, checks the banner and search.

Arguments: one JSON object on argv[1] — url, profile, runs, counts (bucket → runs), needs_you,
searches (run ids each found alone), detail ([run id, status]: its page shows that status, read
from the journal), and for a server with tokens `token` (logged in through the
page). With `approve` (a run id waiting on a breakpoint) it then shows that card, prints `ready`,
waits for a line on stdin (the test approved the breakpoint over gRPC meanwhile) and checks the
card moves to completed and the counts follow, without a reload."""
import json
import sys
import time

from playwright.sync_api import sync_playwright, expect

cfg = json.loads(sys.argv[1])
URL = cfg["url"]
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--enable-precise-memory-info"]


def count(page, bucket):
    return page.locator(f'.column[data-bucket="{bucket}"] .count')


def banner(n):
    return "1 run needs you" if n == 1 else f"{n} runs need you"


def expect_counts(page, counts, timeout):
    for bucket, n in counts.items():
        expect(count(page, bucket)).to_have_text(str(n), timeout=timeout)


with sync_playwright() as p:
    browser = p.chromium.launch_persistent_context(
        cfg["profile"], executable_path="/usr/bin/chromium", args=ARGS, headless=True,
        viewport={"width": 1400, "height": 900})
    page = browser.new_page()
    counts = cfg["counts"]
    t0 = time.monotonic()
    page.goto(URL + "/")
    if cfg.get("token"):
        page.fill('input[name="token"]', cfg["token"])
        page.click('button[type="submit"]')
    # The server indexes the runs first: wait until the board counts them all.
    expect_counts(page, counts, 600_000)
    print(f"MEASURE board complete {(time.monotonic() - t0):.1f} s after the first page load", flush=True)
    loads = []
    for _ in range(5):
        t0 = time.monotonic()
        page.goto(URL + "/")
        expect_counts(page, counts, 60_000)
        expect(page.locator('.column[data-bucket="completed"] .card')).to_have_count(
            min(50, counts["completed"]), timeout=60_000)
        loads.append((time.monotonic() - t0) * 1000)
    expect(page.locator("#banner")).to_contain_text(banner(cfg["needs_you"]), timeout=60_000)
    search_ms = []
    for run_id in cfg["searches"]:
        t0 = time.monotonic()
        page.fill("#search", run_id)
        expect(page.locator(".card")).to_have_count(1, timeout=60_000)
        expect(page.locator(f'.card[data-run="{run_id}"]')).to_have_count(1, timeout=60_000)
        search_ms.append((time.monotonic() - t0) * 1000)
    heap = page.evaluate("performance.memory.usedJSHeapSize")
    loads.sort()
    searched = ", ".join(f"{ms:.0f}" for ms in search_ms)
    print(f"MEASURE board of {cfg['runs']} runs: page load median {loads[2]:.0f} ms (min {loads[0]:.0f}, max {loads[-1]:.0f}), "
          f"search to one card {searched} ms (incl. 150 ms debounce), page JS heap {heap / 1e6:.1f} MB", flush=True)

    run_id, status = cfg["detail"]
    t0 = time.monotonic()
    page.goto(URL + "/runs/" + run_id)
    expect(page.locator(f'#run-status[data-status="{status}"]')).to_be_visible(timeout=60_000)
    expect(page.locator("#journal-ok")).to_be_visible(timeout=60_000)
    print(f"MEASURE detail of {run_id} ({status}): {(time.monotonic() - t0) * 1000:.0f} ms", flush=True)
    page.goto(URL + "/")

    if cfg.get("approve"):
        run_id = cfg["approve"]
        card = '.column[data-bucket="{}"] .card[data-run="' + run_id + '"]'
        page.fill("#search", run_id)
        expect(page.locator(card.format("needs-you"))).to_have_count(1, timeout=60_000)
        page.fill("#search", "")
        expect_counts(page, counts, 60_000)
        print("ready", flush=True)
        sys.stdin.readline()
        t0 = time.monotonic()
        moved = dict(counts, completed=counts["completed"] + 1)
        moved["needs-you"] = counts["needs-you"] - 1
        expect_counts(page, moved, 60_000)
        expect(page.locator("#banner")).to_contain_text(banner(cfg["needs_you"] - 1), timeout=60_000)
        page.fill("#search", run_id)
        expect(page.locator(card.format("completed"))).to_have_count(1, timeout=60_000)
        expect(page.locator(card.format("needs-you"))).to_have_count(0, timeout=60_000)
        print(f"MEASURE approved over gRPC: counts and banner moved {(time.monotonic() - t0) * 1000:.0f} ms after the approval returned, "
              "card in completed", flush=True)
    browser.close()
