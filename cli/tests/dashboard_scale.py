"""Board of many runs in a real browser (run by cli/tests/dashboard_scale.rs): loads the board,
waits for the columns, prints the page load time and the page's JS heap, checks the counts."""
import json
import sys
import time

from playwright.sync_api import sync_playwright, expect

cfg = json.loads(sys.argv[1])
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--enable-precise-memory-info"]
with sync_playwright() as p:
    browser = p.chromium.launch_persistent_context(
        cfg["profile"], executable_path="/usr/bin/chromium", args=ARGS, headless=True,
        viewport={"width": 1400, "height": 900})
    page = browser.new_page()
    # The server indexes the runs first: wait until the board counts them all.
    t0 = time.monotonic()
    page.goto(cfg["url"] + "/")
    expect(page.locator('.column[data-bucket="completed"] .count')).to_have_text(str(cfg["completed"]), timeout=600_000)
    print(f"MEASURE board complete {(time.monotonic() - t0):.1f} s after the first page load")
    loads = []
    for _ in range(5):
        t0 = time.monotonic()
        page.goto(cfg["url"] + "/")
        expect(page.locator('.column[data-bucket="completed"] .count')).to_have_text(str(cfg["completed"]), timeout=60_000)
        expect(page.locator('.column[data-bucket="completed"] .card')).to_have_count(50, timeout=60_000)
        loads.append((time.monotonic() - t0) * 1000)
    expect(page.locator("#banner")).to_contain_text(f'{cfg["needs_you"]} runs need you', timeout=60_000)
    t0 = time.monotonic()
    page.fill("#search", cfg["search"])
    expect(page.locator(".card")).to_have_count(1, timeout=60_000)
    search_ms = (time.monotonic() - t0) * 1000
    heap = page.evaluate("performance.memory.usedJSHeapSize")
    loads.sort()
    print(f"MEASURE board of {cfg['runs']} runs: page load median {loads[2]:.0f} ms (min {loads[0]:.0f}, max {loads[-1]:.0f}), "
          f"search to one card {search_ms:.0f} ms (incl. 150 ms debounce), page JS heap {heap / 1e6:.1f} MB, cards rendered {page.locator('.card').count()}")
    browser.close()
