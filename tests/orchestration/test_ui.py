"""The report as a person sees it: the Dagster UI in headless Chromium, after two runs of the job
whose second one regresses a variant.

Chromium is driven through its DevTools protocol (the `websockets` client), so the test reads
what the page shows: the report's plots decoded (naturalWidth > 0), a partition's numbers, and
the failing variant's own check marked failed.
"""

import asyncio
import itertools
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

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
                            "-h", "127.0.0.1", "-p", str(port)], cwd=REPO, env=env,
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


@pytest.fixture
def browser(tmp_path):
    pytest.importorskip("websockets", reason="the DevTools client (websockets) is not installed")
    b = Browser(tmp_path / "chromium")
    yield b
    b.close()


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


@needs_chromium
def test_the_ui_shows_plots_partition_numbers_and_the_failed_variant(tmp_path, job_env, browser):
    variants = tmp_path / "variants.yaml"
    variants.write_text(GOOD % "")
    env = job_env("state", EVAL_PIPELINE_VARIANTS=str(variants))
    first = start_job(tmp_path, "first", env, tiny_job_config(tmp_path / "first"))
    assert first.wait(timeout=600) == 0, (tmp_path / "first.log").read_text()[-3000:]
    variants.write_text(GOOD % ", abstain_below: 5.0")  # dense refuses every question: its gate fails
    second = start_job(tmp_path, "regressed", env, tiny_job_config(tmp_path / "regressed"))
    assert second.wait(timeout=600) == 1, (tmp_path / "regressed.log").read_text()[-3000:]
    log = (tmp_path / "regressed.log").read_text()
    assert "Asset check 'gate__dense' on 'verdict' did not pass" in log and "Asset check 'gate__bm25' on 'verdict' passed" in log
    assert "Asset check 'verdict_passed' on 'report' did not pass" in log
    headline = (tmp_path / "regressed" / "results.md").read_text().splitlines()[2].strip("*")
    assert "Gate FAILED for `dense`" in headline

    with webserver(tmp_path, env) as base:
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


def _location(base: str) -> dict:
    data = graphql(base, """mutation { reloadRepositoryLocation(repositoryLocationName: "definitions") {
        __typename ... on WorkspaceLocationEntry { loadStatus locationOrLoadError { __typename
        ... on PythonError { message errorChain { error { message stack } } } } } } }""")
    return data["reloadRepositoryLocation"]


def _partitions(base: str) -> list[str]:
    data = graphql(base, '{ assetNodeOrError(assetKey: {path: ["variant_metrics"]}) '
                         '{ ... on AssetNode { partitionKeys } } }')
    return data["assetNodeOrError"]["partitionKeys"]


def test_reload_definitions_rereads_the_variants_file(tmp_path, job_env):
    """Editing the variants file and reloading shows the new partitions; a bad file is the
    location's error, one line naming the file, the variant and the setting."""
    variants = tmp_path / "variants.yaml"
    variants.write_text(GOOD % "")
    env = job_env("state", EVAL_PIPELINE_VARIANTS=str(variants))
    with webserver(tmp_path, env) as base:
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
