"""The report as a person sees it: the Dagster UI in headless Chromium, after three runs of the job
whose third one regresses a variant.

Chromium is driven through its DevTools protocol (the `websockets` client), so the test reads
what the page shows: the report's plots decoded (naturalWidth > 0) and its sections in order, a
partition's numbers, the failing variant's own check marked failed, each gate check's plots (the
points read from the chart's own props) and its run links. The screenshots in docs/
(report_top.png, check_trend.png, check_metadata.png) are the ones these tests take.

On the same three runs (issue #28, items 4 and 10): the report page leads with the verdict in
place (no dialog), every asset shows its kinds and owner, a partition's columns are typed and
described, and the `accept_reference` Launchpad asks for the run to accept and a note only
(docs/report_verdict.png, asset_kinds.png, column_schema.png and accept_launchpad.png are the
screenshots these take, copied there by hand).
"""

import asyncio
import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from tests.integration.cli import REPO, start_job, tiny_job_config

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (make chromium installs Debian's)")

GOOD = ("baseline: dense\nvariants:\n  - {engine: pg-dense, name: dense%s}\n  - bm25\n"
        "gate: {tolerances: {hit@1: 0.05, mrr: 0.05, ndcg@10: 0.05}}\n")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def webserver(tmp_path, env):
    port = _free_port()
    web = subprocess.Popen([str(Path(sys.executable).parent / "dagster-webserver"), "-m", "definitions",
                            "-h", "127.0.0.1", "-p", str(port)], cwd=REPO,
                           env={**env, "DAGSTER_HOME": str(REPO)},  # the project's dagster.yaml
                           stdout=open(tmp_path / "web.log", "w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2)
                break
            except OSError:
                assert web.poll() is None and time.monotonic() < deadline, (tmp_path / "web.log").read_text()[-2000:]
                time.sleep(0.5)
        yield f"http://127.0.0.1:{port}"
    finally:
        web.terminate()
        web.wait(timeout=30)


def graphql(base: str, query: str) -> dict:
    request = urllib.request.Request(f"{base}/graphql", data=json.dumps({"query": query}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())["data"]


class Browser:
    """One headless Chromium page, driven through the DevTools protocol."""

    def __init__(self, profile: Path):
        self.profile = profile
        self.proc = subprocess.Popen([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                                      "--remote-debugging-port=0", "--window-size=1500,1100", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file, deadline = profile / "DevToolsActivePort", time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            assert self.proc.poll() is None and time.monotonic() < deadline, "chromium did not start"
            time.sleep(0.2)
        port = port_file.read_text().split()[0]
        pages = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
        self.ws_url = next(p["webSocketDebuggerUrl"] for p in pages if p["type"] == "page")
        self.ids = itertools.count(1)

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        # Chromium keeps its singleton socket in a folder of its own in the system's temp dir (the
        # profile's SingletonSocket links to it), which a terminated browser leaves behind
        link = self.profile / "SingletonSocket"
        folder = Path(os.readlink(link)).parent if link.is_symlink() else None
        if folder is not None and folder.name.startswith("org.chromium.Chromium."):
            shutil.rmtree(folder, ignore_errors=True)

    async def _call(self, method: str, **params):
        import websockets

        async with websockets.connect(self.ws_url, max_size=None) as ws:
            ident = next(self.ids)
            await ws.send(json.dumps({"id": ident, "method": method, "params": params}))
            while True:
                message = json.loads(await ws.recv())
                if message.get("id") == ident:
                    return message.get("result", {})

    def call(self, method: str, **params):
        return asyncio.run(self._call(method, **params))

    def wait_for(self, url: str, expression: str, timeout: float = 90):
        """Open `url`, then evaluate `expression` (JSON-returning JavaScript) until it is truthy."""
        self.call("Page.navigate", url=url)
        deadline, value = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
            value = result.get("result", {}).get("value")
            if value:
                return value
            time.sleep(1)
        text = self.call("Runtime.evaluate", expression="document.body.innerText", returnByValue=True)
        raise AssertionError(f"{url}: {expression} stayed {value!r}; page text: "
                             f"{text.get('result', {}).get('value', '')[:3000]}")

    def screenshot(self, path: Path):
        import base64

        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))


# The report's markdown is over 1000 characters, so the UI shows it behind "[Show Markdown]" (a
# dialog): open the one on the `report` row, then wait for its images to decode.
PLOTS_LOADED = """(() => {
  const imgs = [...document.querySelectorAll('img')].filter(i => i.src.startsWith('data:image/png'));
  if (imgs.length >= 2 && imgs.every(i => i.complete && i.naturalWidth > 0)) return imgs.map(i => i.naturalWidth);
  if (!document.querySelector('[role=dialog]')) {
    const links = [...document.querySelectorAll('*')].filter(e => e.childElementCount === 0
      && e.textContent.trim() === '[Show Markdown]');
    const row = links.find(e => (e.closest('tr') || e.parentElement).innerText.trim().startsWith('report'));
    if (row) row.click();
  }
  return null;
})()"""


RUN_ID = re.compile(r"retrieval_eval - ([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}) - ")


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory, embedded_pg):
    """Three runs of the two-variant job, then the webserver over them, shared by the browser tests
    (each run of the tiny set takes 20-40 s). The third run regresses `dense` (it refuses every
    question), so its gate fails there and its check still records the numbers. Its own Dagster
    database and state dir: the checks' plots and the gate's history hold these three runs only."""
    from eval_pipeline.store.database import EmbeddedPostgres
    from tests.integration.cli import job_environment

    tmp = tmp_path_factory.mktemp("ui_three_runs")
    variants = tmp / "variants.yaml"
    env = job_environment(tmp / "state", embedded_pg.uri("dagster_ui_three_runs", driver="psycopg2"),
                          EVAL_PIPELINE_VARIANTS=str(variants))
    try:
        runs = {}
        for name, extra in (("first", ""), ("second", ""), ("regressed", ", abstain_below: 5.0")):
            variants.write_text(GOOD % extra)
            code = start_job(tmp, name, env, tiny_job_config(tmp / name)).wait(timeout=600)
            log = (tmp / f"{name}.log").read_text()
            runs[name] = SimpleNamespace(code=code, log=log, id=RUN_ID.search(log).group(1),
                                         results=tmp / name / "results.md")
        assert runs["first"].code == 0, runs["first"].log[-3000:]
        assert runs["regressed"].code == 1, runs["regressed"].log[-3000:]
        with webserver(tmp, env) as base:
            yield SimpleNamespace(tmp=tmp, base=base, runs=runs)
    finally:
        EmbeddedPostgres(tmp / "state").stop()


def _gate_checks(log: str) -> dict[str, bool]:
    found = re.findall(r"Asset check '(gate__\w+)' on 'verdict' (passed|did not pass)", log)
    return {name: outcome == "passed" for name, outcome in found}


@needs_chromium
def test_the_ui_shows_plots_partition_numbers_and_the_failed_variant(three_runs, browser):
    first, second, regressed = three_runs.runs.values()
    assert first.code == 0, first.log[-3000:]
    # The second run is the first one again: every gate passes (a grader that applies to no prompt
    # of the tiny golden set measured nothing in the first run: not a reason to fail the second).
    assert second.code == 0, second.log[-3000:]
    assert _gate_checks(second.log) == {"gate__dense": True, "gate__bm25": True}, second.log[-3000:]
    assert regressed.code == 1, regressed.log[-3000:]
    assert _gate_checks(regressed.log) == {"gate__dense": False, "gate__bm25": True}
    assert "Asset check 'verdict_passed' on 'report' did not pass" in regressed.log
    headline = regressed.results.read_text().splitlines()[2].strip("*")
    assert "Gate FAILED for `dense`" in headline
    headline = headline.replace("`", "")  # the UI's metadata shows it as plain text

    base, tmp_path = three_runs.base, three_runs.tmp
    widths = browser.wait_for(f"{base}/assets/report", PLOTS_LOADED)
    assert all(w > 0 for w in widths)
    assert browser.wait_for(f"{base}/assets/report", f"document.body.innerText.includes({json.dumps(headline)})")
    browser.screenshot(tmp_path / "report_asset.png")
    assert (tmp_path / "report_asset.png").stat().st_size > 20_000

    ndcg = browser.wait_for(f"{base}/assets/variant_metrics?view=partitions&partition=bm25",
                            "(() => { const m = document.body.innerText.match(/ndcg@10\\s+([0-9.]+)/); "
                            "return m ? m[1] : null; })()")
    assert 0.0 <= float(ndcg) <= 1.0

    # The verdict asset decides, and says so on its page; its Checks tab lists each variant's
    # gate with its latest result: the regressed variant's own check is Failed (the UI draws it
    # red), the other variant's Succeeded.
    assert browser.wait_for(f"{base}/assets/verdict", f"document.body.innerText.includes({json.dumps(headline)})")
    states = browser.wait_for(f"{base}/assets/verdict?view=checks", """(() => {
      const t = document.body.innerText;
      const d = t.match(/gate__dense\\s+gate__dense\\s+(\\w+)/), b = t.match(/gate__bm25\\s+gate__bm25\\s+(\\w+)/);
      return d && b ? [d[1], b[1]] : null; })()""")
    assert states == ["Failed", "Succeeded"], states


# A check's Plots section draws one chart per numeric metadata entry (Chart.js on a canvas). The
# points are read from the chart's React props: metadata label -> one list of y values per series.
CHECK_PLOTS = """(() => {
  const out = {};
  for (const c of document.querySelectorAll('canvas')) {
    const key = Object.keys(c).find(k => k.startsWith('__reactFiber'));
    if (!key) continue;
    let f = c[key], data = null, label = null;
    for (let i = 0; f && i < 10; i++, f = f.return) {
      const p = f.memoizedProps || {};
      if (!data && p.data && p.data.datasets) data = p.data;
      if (!label && typeof p.label === 'string') label = p.label;
    }
    if (data && label) out[label] = data.datasets.map(s => s.data.map(p => p && typeof p === 'object' ? p.y : p));
  }
  return out['hit@1'] && out['hit@1'][0].length >= 3 ? out : null;
})()"""

TREND = ("hit@1", "hit@5", "mrr", "ndcg@10", "latency_p95_ms")


def _scroll_to(browser, text: str):
    browser.call("Runtime.evaluate", expression=f"""(() => {{
      const e = [...document.querySelectorAll('*')].find(e => e.childElementCount === 0
        && e.textContent.trim() === {json.dumps(text)});
      if (e) e.scrollIntoView({{block: 'start'}}); }})()""")
    time.sleep(1)


@needs_chromium
def test_each_variant_s_gate_check_plots_its_trend_one_point_per_run(three_runs, browser):
    """Issue #28, item 2: a gate check records its variant's headline numbers on every evaluation,
    passed or failed, so its Plots are that variant's trend: after three runs, one series of three
    points per metric. `dense` regressed in the third run (its check failed) and the point is there."""
    base, tmp_path = three_runs.base, three_runs.tmp
    plots = {}
    for variant in ("dense", "bm25"):
        plots[variant] = browser.wait_for(f"{base}/assets/verdict?view=checks&checkDetail=gate__{variant}",
                                          CHECK_PLOTS)
        for metric in TREND:
            series = plots[variant][metric]
            assert len(series) == 1 and len(series[0]) == 3, (variant, metric, series)
            assert all(isinstance(y, (int, float)) for y in series[0]), (variant, metric, series)
            assert all(round(y, 4) == y for y in series[0]), (variant, metric, series)
        if variant == "dense":
            _scroll_to(browser, "Plots")
            browser.screenshot(tmp_path / "check_trend.png")
    (dense,), (bm25,) = plots["dense"]["hit@1"], plots["bm25"]["hit@1"]
    assert dense[2] == 0 and dense[0] == dense[1] > 0, dense  # refusing every question: no hit
    assert bm25[0] == bm25[1] == bm25[2], bm25  # nothing changed for bm25
    # three gated metrics failed against the previous run (the second) and against the pinned
    # reference (the first): six failing rows
    assert plots["dense"]["failures"] == [[0, 0, 6]], plots["dense"]["failures"]


RUN_LINKS = """(() => {
  const links = [...document.querySelectorAll('a[href^="/runs/"]')].map(a => {
    const row = a.closest('tr');
    return [row ? row.innerText.split('\\n')[0].trim() : '', a.textContent.trim(), a.getAttribute('href')];
  }).filter(([label]) => label === 'previous_run' || label === 'reference_run');
  return links.length >= 2 ? links : null;
})()"""


@needs_chromium
def test_the_gate_check_metadata_links_the_runs_it_compared(three_runs, browser):
    """Issue #28, item 5: `previous_run` and `reference_run` are links to those runs' pages, and
    the headline numbers are rounded to 4 decimals."""
    base, tmp_path, runs = three_runs.base, three_runs.tmp, three_runs.runs
    links = browser.wait_for(f"{base}/assets/verdict?view=checks&checkDetail=gate__dense", RUN_LINKS)
    by_label = {label: (text, href) for label, text, href in links}
    earlier = {runs["first"].id, runs["second"].id}
    for label, (text, href) in by_label.items():
        assert href == f"/runs/{text}" and text in earlier, (label, text, href, earlier)
    assert by_label["reference_run"][0] == runs["first"].id  # the first eligible run, nothing accepted
    text = browser.call("Runtime.evaluate", expression="document.body.innerText", returnByValue=True)["result"]["value"]
    latency = re.search(r"latency_p95_ms\s+([0-9.]+)", text).group(1)
    assert len(latency.partition(".")[2]) <= 4, latency
    _scroll_to(browser, "Metadata")
    browser.screenshot(tmp_path / "check_metadata.png")


# The report opens in a dialog whose scroll container is Blueprint's overlay; where it opens,
# and where the report's headline and sections sit in it.
REPORT_DIALOG = """(() => {
  const d = document.querySelector('[role=dialog]');
  const imgs = d ? [...d.querySelectorAll('img')] : [];
  if (!d || imgs.length < 2 || !imgs.every(i => i.complete && i.naturalWidth > 0)) return null;
  const overlay = d.closest('.bp5-overlay-scroll-container') || d.parentElement.parentElement;
  return {scrollTop: overlay.scrollTop, scrollHeight: overlay.scrollHeight, clientHeight: overlay.clientHeight,
          focused: document.activeElement.textContent.trim().slice(0, 20),
          headings: [...d.querySelectorAll('h1,h2')].map(h => h.textContent.trim()),
          text: d.innerText.slice(0, 400)};
})()"""

HEADLINE_IN_VIEW = """(() => {
  const d = document.querySelector('[role=dialog]');
  const overlay = d.closest('.bp5-overlay-scroll-container') || d.parentElement.parentElement;
  overlay.scrollTop = 0;
  const top = d.querySelector('h1').getBoundingClientRect().top;
  return top >= 0 && top < innerHeight ? top : null;
})()"""


@needs_chromium
def test_the_report_dialog_leads_with_the_headline_and_the_gate(three_runs, browser, capsys):
    """Issue #28, item 4: the report reads headline, regression gate, variants first, how far the
    numbers can be trusted near the end. Dagster's dialog focuses its Close button, at the bottom,
    so it opens scrolled down; the numbers are printed, and the top is in view once scrolled up."""
    base, tmp_path, regressed = three_runs.base, three_runs.tmp, three_runs.runs["regressed"]
    headline = regressed.results.read_text().splitlines()[2].strip("*")
    opened = browser.wait_for(f"{base}/assets/report", PLOTS_LOADED.replace(
        "return imgs.map(i => i.naturalWidth);", f"return {REPORT_DIALOG};"))
    with capsys.disabled():
        print(f"\nreport dialog opened at scrollTop {opened['scrollTop']} of {opened['scrollHeight']} "
              f"(view {opened['clientHeight']}), focus on {opened['focused']!r}")
    assert opened["text"].removeprefix("report").lstrip().startswith("Retrieval evaluation"), opened["text"]
    assert headline.replace("`", "") in opened["text"], (headline, opened["text"])
    headings = opened["headings"]
    sections = ("Retrieval evaluation", "Regression gate", "Variants", "How far the numbers can be trusted",
                "Provenance")
    order = [next(i for i, h in enumerate(headings) if h.startswith(prefix)) for prefix in sections]
    assert order == sorted(order), headings
    top = browser.call("Runtime.evaluate", expression=HEADLINE_IN_VIEW, returnByValue=True)["result"]["value"]
    assert top is not None
    time.sleep(1)
    browser.screenshot(tmp_path / "report_top.png")


def _click(browser, selector: str, text: str) -> bool:
    """Click the first `selector` element whose text is `text`; whether there was one."""
    return browser.call("Runtime.evaluate", returnByValue=True, expression=f"""(() => {{
      const e = [...document.querySelectorAll({json.dumps(selector)})]
        .find(e => e.innerText.trim() === {json.dumps(text)});
      if (e) e.click(); return !!e; }})()""")["result"]["value"]


def _dialogs(browser) -> list[str]:
    return browser.call("Runtime.evaluate", returnByValue=True, expression=(
        "[...document.querySelectorAll('[role=dialog]')].map(d => d.innerText)"))["result"]["value"]


def open_job_menu(browser, base: str, timeout: float = 90) -> list[str]:
    """The items of the menu under the caret beside "Materialize all…" on the job page (where
    the Launchpad is), once it is open."""
    return browser.wait_for(f"{base}/locations/definitions/jobs/retrieval_eval", """(() => {
      const items = [...document.querySelectorAll('[role=menu] a, [role=menu] button, .bp5-menu a')]
        .map(e => e.innerText.trim()).filter(Boolean);
      if (items.length) return items;
      const bs = [...document.querySelectorAll('button')];
      const i = bs.findIndex(b => b.innerText.trim() === 'Materialize all…');
      if (i >= 0) bs[i + 1].click();
      return null; })()""", timeout=timeout)


@needs_chromium
def test_the_launchpad_is_under_the_caret_beside_materialize_all(three_runs, browser):
    """Where a person launches a run with config, as the README tells it (issue #28, item 3): the
    job page has no Launchpad tab; the caret beside "Materialize all…" opens a menu with "Open
    launchpad"; its button is "Materialize", and without a partition Dagster asks first ("This job
    is partitioned…"). Nothing is launched: the test cancels."""
    base, tmp_path = three_runs.base, three_runs.tmp
    menu = open_job_menu(browser, base)
    assert "Open launchpad" in menu, menu
    tabs = browser.call("Runtime.evaluate", returnByValue=True,
                        expression="document.body.innerText")["result"]["value"]
    assert "Launchpad" not in tabs.split("Materialize all…")[0], tabs[:1000]  # no such tab
    browser.screenshot(tmp_path / "job_launchpad_menu.png")

    assert _click(browser, "[role=menu] a, [role=menu] button, .bp5-menu a", "Open launchpad")
    deadline = time.monotonic() + 60
    while not any(d.startswith("Launchpad") for d in _dialogs(browser)):
        assert time.monotonic() < deadline, _dialogs(browser)
        time.sleep(1)
    time.sleep(2)  # the config editor fills in its defaults
    (launchpad,) = [d for d in _dialogs(browser) if d.startswith("Launchpad")]
    assert launchpad.startswith("Launchpad (configure assets)") and "pgvector_store" in launchpad, launchpad[:500]
    assert _click(browser, "[role=dialog] button", "Materialize")
    deadline, clicked = time.monotonic() + 60, time.monotonic()
    while not any("This job is partitioned" in d for d in _dialogs(browser)):
        assert time.monotonic() < deadline, _dialogs(browser)
        if time.monotonic() - clicked > 10:  # on a loaded machine the first click can land before the button is live
            _click(browser, "[role=dialog] button", "Materialize")
            clicked = time.monotonic()
        time.sleep(0.5)
    (ask,) = [d for d in _dialogs(browser) if "This job is partitioned" in d]
    assert ask.startswith("Are you sure?") and "Confirm" in ask and "Cancel" in ask, ask
    browser.screenshot(tmp_path / "launchpad_partitioned.png")
    assert _click(browser, "[role=dialog] button", "Cancel")


# --------------------------------------------------------------------------------------------
# More of the UI as a person sees it (issue #28, items 4 and 10), on the same three runs
# --------------------------------------------------------------------------------------------


def _widen(browser, width: int = 1900):
    """A wider window for a screenshot: at 1500 px the metadata table's value column is cut at the
    right edge (Dagster's layout; the text is all there)."""
    window = browser.call("Browser.getWindowForTarget")["windowId"]
    browser.call("Browser.setWindowBounds", windowId=window, bounds={"width": width, "height": 1100})


# The metadata table's rows as shown: key, whether the value is a [Show Markdown] link, its text,
# and where the row starts on the page as it opened.
METADATA_ROWS = """(() => {
  const rows = [...document.querySelectorAll('tr')].filter(r => !r.parentElement.closest('td'))
    .map(r => [...r.querySelectorAll(':scope > td')])
    .filter(cells => cells.length >= 3 && cells[0].innerText.trim() !== 'Key')
    .map(cells => ({key: cells[0].innerText.trim(), text: cells[cells.length - 1].innerText.trim(),
                    top: cells[0].getBoundingClientRect().top}));
  // the markdown renders a moment after the table
  return rows.some(r => r.key === 'verdict' && r.text) ? {rows, height: innerHeight} : null;
})()"""


@needs_chromium
def test_the_report_page_leads_with_the_verdict_in_place(three_runs, browser):
    """Item 4: the report's first metadata entry is the verdict, the headline and each variant's
    gate, short enough that Dagster renders it in the table (a longer markdown entry is a
    [Show Markdown] dialog, which opens scrolled to its bottom), and the second the variants
    table (numbers, gate and why), which Dagster always shows in place: the failed variant, what
    dropped and by how much are on the page as it opens, without a click or a scroll."""
    shown = browser.wait_for(f"{three_runs.base}/assets/report", METADATA_ROWS)
    rows, height = shown["rows"], shown["height"]
    assert [r["key"] for r in rows[:3]] == ["verdict", "variants", "headline"], [r["key"] for r in rows]
    verdict = rows[0]
    assert "[Show Markdown]" not in verdict["text"], verdict["text"]
    assert "Gate FAILED for dense" in verdict["text"], verdict["text"]
    # judged against the second run and the first (its reference), equal; or, when the code changed
    # between the runs (the checkout is being edited while the test runs), not compared, which fails
    # every variant and says why
    assert re.search(r"dense: FAILED \((comparable\): dropped past its tolerance: hit@1 0\.000 vs 1\.000 "
                     r"\(-1\.000, tol 0\.05, previous/reference\)|not_compared\))", verdict["text"]), verdict["text"]
    assert re.search(r"bm25: (passed|FAILED \(not_compared\))", verdict["text"]), verdict["text"]
    assert 0 < verdict["top"] < height, (verdict["top"], height)  # in view as the page opens
    # then each variant's numbers, gate and why, a table shown in place, the failed variant first
    variants = rows[1]
    assert "[Show" not in variants["text"], variants["text"]
    assert re.search(r"variant\s+nDCG@10 \(Δ\).*gate\s+why", variants["text"], re.S), variants["text"]
    assert variants["text"].index("dense") < variants["text"].index("bm25"), variants["text"]
    assert re.search(r"FAILED \((vs history|not compared)\)", variants["text"]), variants["text"]
    assert 0 < variants["top"] < height, (variants["top"], height)
    _widen(browser)
    browser.wait_for(f"{three_runs.base}/assets/report", METADATA_ROWS)
    _scroll_to(browser, "Metadata")
    browser.screenshot(three_runs.tmp / "report_verdict.png")


@needs_chromium
def test_every_asset_shows_its_kinds_and_owner(three_runs, browser):
    """Item 10: the asset page's Definition panel lists the owner and the kinds (set once, in
    definitions.py); the store is Postgres and pgvector."""
    text = browser.wait_for(f"{three_runs.base}/assets/pgvector_store", """(() => {
      const t = document.body.innerText; return t.includes('Owners') && t.includes('Kinds') ? t : null; })()""")
    owners = text.split("Owners", 1)[1].split("Kinds", 1)[0].split()
    kinds = text.split("Kinds", 1)[1].split("Tags", 1)[0].split()
    assert owners == ["eval-pipeline"], owners
    assert sorted(kinds) == ["Postgres", "pgvector"], kinds
    catalog = browser.wait_for(f"{three_runs.base}/assets", """(() => {
      const t = document.body.innerText;  // the statuses load after the list
      return t.includes('pgvector_store') && !t.includes('Loading') ? t : null; })()""")
    assert "pgvector" in catalog.split("pgvector_store", 1)[1][:200], catalog[:2000]
    browser.screenshot(three_runs.tmp / "asset_kinds.png")


COLUMNS = """(() => {
  const heading = [...document.querySelectorAll('*')].find(e => e.childElementCount === 0
    && e.textContent.trim() === 'Columns');
  if (!heading) return null;
  const rows = [...document.querySelectorAll('tr')].map(r => [...r.querySelectorAll('td')].map(c => c.innerText.trim()))
    .filter(cells => cells.length === 3);
  return rows.length > 20 && rows.every(cells => cells[2]) ? rows : null;  // descriptions render as markdown
})()"""


@needs_chromium
def test_a_partition_s_columns_are_typed_and_described(three_runs, browser):
    """Item 10: variant_metrics' Columns say list[string] or json where pandas says object, each
    with what the column holds (assets/columns.py)."""
    rows = browser.wait_for(f"{three_runs.base}/assets/variant_metrics", COLUMNS)
    columns = {name: (kind, description) for name, kind, description in rows}
    assert columns["doc_ids"] == ("list[string]", "the documents returned, best first"), columns["doc_ids"]
    assert columns["microscope"][0] == "json"
    assert columns["qid"][0] == "string" and columns["error"][0] == "string"
    assert not [name for name, (kind, _) in columns.items() if kind in ("object", "str")], columns
    assert not [name for name, (_, description) in columns.items() if not description], columns
    _scroll_to(browser, "Columns")
    browser.screenshot(three_runs.tmp / "column_schema.png")


EDITOR = """(() => {
  const cm = document.querySelector('.CodeMirror');
  return cm && cm.CodeMirror && cm.CodeMirror.getValue().trim() ? cm.CodeMirror.getValue() : null;
})()"""


@needs_chromium
def test_the_accept_reference_launchpad_asks_for_the_run_and_a_note_only(three_runs, browser):
    """Item 10: the Launchpad of `accept_reference` opens with `run_id: latest` (the newest
    recorded run) and a `note`: no database image, no state directory."""
    value = browser.wait_for(f"{three_runs.base}/locations/definitions/jobs/accept_reference/playground", EDITOR)
    assert yaml.safe_load(value) == {"ops": {"accept_reference_run": {"config": {"note": "", "run_id": "latest"}}}}, \
        value
    assert "pgvector/pgvector" not in value and str(three_runs.tmp / "state") not in value
    browser.screenshot(three_runs.tmp / "accept_launchpad.png")


# --------------------------------------------------------------------------------------------
# The variants file read again on "Reload definitions", and a bad one (issue #28, item 6): no
# job runs, so both tests share one webserver of their own, started last (it stops at the end of
# the module, right after them). Each writes the file it needs and reloads the location itself:
# either runs first, or alone.
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def variants_webserver(tmp_path_factory, embedded_pg):
    """The webserver over a variants file the tests edit (its own state dir, stopped after them),
    started with the two-variant file GOOD."""
    from eval_pipeline.store.database import EmbeddedPostgres
    from tests.integration.cli import job_environment

    tmp = tmp_path_factory.mktemp("ui_variants_file")
    variants = tmp / "variants.yaml"
    variants.write_text(GOOD % "")
    env = job_environment(tmp / "state", embedded_pg.uri("dagster", driver="psycopg2"),
                          EVAL_PIPELINE_VARIANTS=str(variants))
    try:
        with webserver(tmp, env) as base:
            yield SimpleNamespace(base=base, variants=variants)
    finally:
        EmbeddedPostgres(tmp / "state").stop()


def _location(base: str) -> dict:
    data = graphql(base, """mutation { reloadRepositoryLocation(repositoryLocationName: "definitions") {
        __typename ... on WorkspaceLocationEntry { loadStatus locationOrLoadError { __typename
        ... on PythonError { message errorChain { error { message stack } } } } } } }""")
    return data["reloadRepositoryLocation"]


def _partitions(base: str) -> list[str]:
    data = graphql(base, '{ assetNodeOrError(assetKey: {path: ["variant_metrics"]}) '
                         '{ ... on AssetNode { partitionKeys } } }')
    return data["assetNodeOrError"]["partitionKeys"]


def test_reload_definitions_rereads_the_variants_file(variants_webserver):
    """Editing the variants file and reloading shows the new partitions; a bad file is the
    location's error, one line naming the file, the variant and the setting."""
    base, variants = variants_webserver.base, variants_webserver.variants
    if variants.read_text() != GOOD % "":  # the other test ran first: back to the file the server started with
        variants.write_text(GOOD % "")
        assert _location(base)["locationOrLoadError"]["__typename"] == "RepositoryLocation"
    assert _partitions(base) == ["dense", "bm25"]
    variants.write_text(variants.read_text().replace("  - bm25\n", "  - bm25\n  - metadata\n"))
    assert _location(base)["locationOrLoadError"]["__typename"] == "RepositoryLocation"
    assert _partitions(base) == ["dense", "bm25", "metadata"]

    variants.write_text(GOOD % ", depth: -1")
    error = _location(base)["locationOrLoadError"]
    assert error["__typename"] == "PythonError"
    # Dagster wraps every load error ("Error occurred during the loading of Dagster definitions");
    # the UI shows ours under it: one line, naming the file, the variant and the setting.
    (ours,) = [e["error"] for e in error["errorChain"] if "VariantsFileError" in e["error"]["message"]]
    assert ours["message"].strip().count("\n") == 0, ours["message"]
    assert str(variants) in ours["message"] and "variant 1" in ours["message"] and "depth" in ours["message"]


@needs_chromium
def test_a_broken_code_location_shows_its_one_line_under_deployment(variants_webserver, tmp_path, browser):
    """Where a person finds why the definitions did not load (issue #28, item 6): the Catalog only
    loses *Jobs* from its navigation; Deployment → Code locations marks `definitions` Failed, and
    its "View error" dialog shows our one line (file:line, variant, setting) between Dagster's
    tracebacks, in view when the dialog opens."""
    base, variants = variants_webserver.base, variants_webserver.variants
    line = f"bad variants file: {variants}:3: variant 1: depth must be an integer in [1, 1000], got -1"
    variants.write_text(GOOD % ", depth: -1")
    assert _location(base)["locationOrLoadError"]["__typename"] == "PythonError"
    nav = browser.wait_for(f"{base}/assets", """(() => { const t = document.body.innerText;
      return t.includes('Catalog') && t.includes('Deployment') ? t.split('Search')[0] : null; })()""")
    assert "Jobs" not in nav, nav
    assert browser.wait_for(f"{base}/deployment/locations", """(() => {
      const b = [...document.querySelectorAll('button,a')].find(e => e.innerText.trim() === 'View error');
      if (b) b.click();
      return !!document.querySelector('[role=dialog]'); })()""")
    time.sleep(1)
    where = browser.call("Runtime.evaluate", returnByValue=True, expression=f"""(() => {{
      const d = document.querySelector('[role=dialog]');
      const e = [...d.querySelectorAll('*')].find(e => e.childElementCount === 0
        && e.textContent.includes({json.dumps(line)}));
      return e ? [d.innerText.slice(0, 40), e.getBoundingClientRect().top, innerHeight]
        : d.innerText.slice(0, 3000);
    }})()""")["result"]["value"]
    assert isinstance(where, list), where
    title, top, height = where
    assert title.startswith("Code location error") and 0 <= top < height, where
    browser.screenshot(tmp_path / "location_error.png")
