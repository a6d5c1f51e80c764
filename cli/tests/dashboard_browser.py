"""The dashboard in a real browser (system Chromium driven by Playwright for Python), run by
cli/tests/dashboard_browser.rs, which starts the servers and creates the runs. Arguments: one
JSON object on argv[1]. Exits non-zero (with the assertion) when the page does not show what it
must. Waits are for conditions, with timeouts; nothing asserts on time."""

import json
import os
import statistics
import sys
import time

from playwright.sync_api import sync_playwright, expect

cfg = json.loads(sys.argv[1])
URL = cfg["url"]
OBSERVE = cfg["observe_url"]
SHOTS = cfg["screenshots"]
T = 60_000  # ms, every wait (a guard: a loaded CI machine is slow)

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


# Every element with its own text: its colour against the background it sits on (the first
# ancestor with an opaque one), as the WCAG relative-luminance contrast ratio.
CONTRAST = """() => {
  const rgb = (c) => (c.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const bg = (e) => {
    for (; e; e = e.parentElement) {
      const c = rgb(getComputedStyle(e).backgroundColor);
      if (c.length === 3 || (c.length === 4 && c[3] > 0.99)) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  const worst = [];
  for (const e of document.querySelectorAll("body *")) {
    const own = [...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    if (!own || !e.offsetParent) continue;
    const a = lum(rgb(getComputedStyle(e).color)), b = lum(bg(e));
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    worst.push([ratio, e.tagName + "." + e.className + ": " + e.textContent.trim().slice(0, 30)]);
  }
  worst.sort((x, y) => x[0] - y[0]);
  return worst.slice(0, 3);
}"""


def check_contrast(page, what):
    worst = page.evaluate(CONTRAST)
    assert worst and worst[0][0] >= 4.5, f"{what}: text below WCAG AA 4.5:1: {worst}"
    return worst[0][0]


def column_card(page, bucket, run_id):
    return page.locator(f'.column[data-bucket="{bucket}"] .card[data-run="{run_id}"]')


with sync_playwright() as p:
    browser = p.chromium.launch_persistent_context(
        cfg["profile"], executable_path="/usr/bin/chromium", args=ARGS, headless=True,
        viewport={"width": 1400, "height": 900})
    page = browser.new_page()

    # An unauthorised browser gets the login answer, not data.
    resp = page.goto(URL)
    assert resp.status == 401, resp.status
    expect(page.locator('input[name="token"]')).to_be_visible(timeout=T)
    assert cfg["gated"] not in page.content()
    api = page.request.get(URL + "/api/runs")
    assert api.status == 401 and cfg["gated"] not in api.text(), api.text()
    page.fill('input[name="token"]', "not-a-token")
    page.click('button[type="submit"]')
    expect(page.locator("#login-message")).to_contain_text("not accepted", timeout=T)

    # Log in: the board, the banner, cards in their buckets.
    page.fill('input[name="token"]', cfg["token"])
    page.click('button[type="submit"]')
    n = len(cfg["latency_runs"]) + 1
    expect(page.locator("#banner")).to_contain_text(f"{n} runs need you", timeout=T)
    expect(page.locator('.column[data-bucket="needs-you"] .count')).to_have_text(str(n), timeout=T)
    # A column shows its newest 50; search finds any run by id.
    page.fill("#search", cfg["gated"])
    expect(column_card(page, "needs-you", cfg["gated"])).to_be_visible(timeout=T)
    expect(page.locator(".card")).to_have_count(1, timeout=T)
    page.fill("#search", cfg["fanout"])
    expect(column_card(page, "working", cfg["fanout"])).to_be_visible(timeout=T)

    # The fan-out's tasks finish: its card moves to completed without a reload.
    open(cfg["release"], "w").close()
    expect(column_card(page, "completed", cfg["fanout"])).to_be_visible(timeout=T)
    page.fill("#search", "")
    expect(page.locator('.column[data-bucket="completed"] .card')).to_have_count(2, timeout=T)
    # Keyboard: / focuses search, j moves between cards.
    page.keyboard.press("/")
    expect(page.locator("#search")).to_be_focused(timeout=T)
    page.keyboard.press("Escape")
    expect(page.locator("#search")).not_to_be_focused(timeout=T)
    # A live re-render may land between the key and the check (it keeps the focused card, but
    # on a loaded machine the first key can race the page's own refresh): a few tries.
    for attempt in range(3):
        page.keyboard.press("j")
        try:
            expect(page.locator(".card:focus")).to_have_count(1, timeout=T // 6)
            break
        except AssertionError:
            if attempt == 2:
                print(page.evaluate("document.activeElement.outerHTML.slice(0, 300)"))
                raise
    os.makedirs(SHOTS, exist_ok=True)
    page.screenshot(path=os.path.join(SHOTS, "board.png"))
    # Both themes: the toggle switches, every text passes WCAG AA contrast.
    ratios = {}
    for theme in ("light", "dark"):
        page.evaluate(f"localStorage.setItem('babysitter-theme', '{theme}')")
        page.reload()
        expect(page.locator(f'html[data-theme="{theme}"]')).to_have_count(1, timeout=T)
        expect(page.locator(".card").first).to_be_visible(timeout=T)
        ratios[theme] = check_contrast(page, f"board, {theme}")
    page.screenshot(path=os.path.join(SHOTS, "board-dark.png"))
    page.keyboard.press("t")
    expect(page.locator('html[data-theme="light"]')).to_have_count(1, timeout=T)
    print(f"MEASURE lowest text contrast on the board: light {ratios['light']:.2f}:1, dark {ratios['dark']:.2f}:1")

    # The fan-out's detail: three tasks side by side in one stage.
    page.goto(URL + "/runs/" + cfg["fanout"])
    expect(page.locator('.stage[data-size="3"] .task')).to_have_count(3, timeout=T)
    expect(page.locator('.stage[data-size="3"] .task[data-state="ok"]')).to_have_count(3, timeout=T)
    expect(page.locator("#journal-ok")).to_be_visible(timeout=T)
    expect(page.locator("#journal-rows tr")).not_to_have_count(0, timeout=T)
    check_contrast(page, "run detail, light")
    page.screenshot(path=os.path.join(SHOTS, "run-detail.png"), full_page=True)

    # Approve the breakpoint from the page, with a comment: the run continues and completes.
    page.goto(URL + "/runs/" + cfg["gated"])
    try:
        expect(page.locator(".breakpoint textarea")).to_be_visible(timeout=T)
    except AssertionError:
        print(page.inner_text("body"), page.evaluate("document.getElementById('main').innerHTML.slice(0, 3000)"))
        raise
    page.fill(".breakpoint textarea", "looks good from the browser")
    page.click("button.approve")
    expect(page.locator('#run-status[data-status="completed"]')).to_be_visible(timeout=T)

    # Latency: approve each of the waiting runs through the page's own API, and time from the
    # decision (its EFFECT_RESOLVED append) to the card showing in the completed column.
    page.goto(URL + "/")
    expect(page.locator(".board")).to_be_visible(timeout=T)
    samples = []
    for run_id in cfg["latency_runs"]:
        page.fill("#search", run_id)
        expect(column_card(page, "needs-you", run_id)).to_be_visible(timeout=T)
        ms = page.evaluate("""async ([runId, effect]) => {
            const s = await (await fetch('/api/session')).json();
            const seen = () => document.querySelector(`.column[data-bucket="completed"] .card[data-run="${runId}"]`);
            const moved = new Promise((resolve) => {
                const obs = new MutationObserver(() => { if (seen()) { obs.disconnect(); resolve(performance.now()); } });
                obs.observe(document.getElementById('main'), { childList: true, subtree: true });
            });
            const t0 = performance.now();
            await fetch(`/api/runs/${runId}/breakpoints/${effect}`, { method: 'POST',
                headers: { 'content-type': 'application/json', 'x-babysitter-csrf': s.csrf },
                body: JSON.stringify({ approved: true, comment: 'latency' }) });
            return (await moved) - t0;
        }""", [run_id, cfg["latency_effects"][run_id]])
        samples.append(ms)
    if samples:
        samples.sort()
        p50 = statistics.median(samples)
        p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
        print(f"MEASURE append-to-card: n={len(samples)} p50={p50:.1f} ms p99={p99:.1f} ms max={samples[-1]:.1f} ms")

    # observe: a corrupted local journal shows as corrupt (no login: a local, token-less server).
    page.goto(OBSERVE + "/runs/" + cfg["corrupt"])
    expect(page.locator("#journal-corrupt")).to_contain_text("corrupt", timeout=T)
    expect(page.locator("tr.corrupt-row")).to_have_count(1, timeout=T)
    page.screenshot(path=os.path.join(SHOTS, "corrupt-journal.png"), full_page=True)
    page.goto(OBSERVE + "/")
    expect(column_card(page, "failed", cfg["corrupt"])).to_be_visible(timeout=T)

    # Page load of the board (the runs this server has).
    t0 = time.monotonic()
    page.goto(URL + "/")
    expect(page.locator(".board")).to_be_visible(timeout=T)
    load_ms = (time.monotonic() - t0) * 1000
    heap = page.evaluate("performance.memory ? performance.memory.usedJSHeapSize : 0")
    print(f"MEASURE board-load: {load_ms:.0f} ms, js heap {heap / 1e6:.1f} MB")
    browser.close()
print("browser checks passed")
