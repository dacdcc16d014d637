"""The index sweep launched from the Launchpad as a person does it (issue #28, item 1): `dagster dev`
(the webserver and the daemon that dequeues and launches runs) over a variants file that lists two
indexes; in headless Chromium, the caret beside "Materialize all…" → "Open launchpad", the config
as the Launchpad pre-fills it (every default, `pgvector_store`'s chunking included), "Materialize",
"Confirm" in the partitioned-job dialog; the run must succeed. Such a run used to be refused in its
first step, because the pre-filled chunking defaults counted as the user's chunking
(tests/unit/config/test_launchpad_defaults.py). docs/launch_index_sweep.png is the screenshot this
test takes of the succeeded run (copied there by hand)."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.integration.cli import REPO, job_environment
from tests.integration.test_index_sweep import SRE
from tests.orchestration.test_ui import _click, _dialogs, _free_port, graphql, needs_chromium, open_job_menu

pytestmark = pytest.mark.integration

# Two indexes on the default chunking (the demo corpus is what the Launchpad pre-fills: 36
# documents), two engines: four pairs.
TWO_INDEXES = f"""\
baseline: minilm-w150-o20|pg-dense
indexes:
  - embedder: bundled
    chunking: {{split_length: 150, split_overlap: 20}}
  - name: sre-w150-o20
    embedder: {{kind: local, model: "{SRE}"}}
    chunking: {{split_length: 150, split_overlap: 20}}
variants:
  - engine: pg-dense
  - engine: bm25
gate: {{tolerances: {{hit@1: 0.05, mrr: 0.05, ndcg@10: 0.05}}}}
"""

EDITOR = """(() => {
  const cm = document.querySelector('[role=dialog] .CodeMirror');
  return cm && cm.CodeMirror && cm.CodeMirror.getValue().includes('pgvector_store') ? cm.CodeMirror.getValue() : null;
})()"""

# The Launchpad's own state: the config it launches, which the editor's component receives back as
# `configCode` (read from React's props, as test_ui.CHECK_PLOTS reads a chart's); and whether its
# "Materialize" button is live (it is once the Launchpad has validated the pre-filled config).
LAUNCHPAD_CONFIG = """(() => {
  let e = document.querySelector('[role=dialog] .CodeMirror'), key = null;  // CodeMirror's own DOM: its React parent
  for (; e && !(key = Object.keys(e).find(k => k.startsWith('__reactFiber'))); e = e.parentElement);
  for (let f = key ? e[key] : null, i = 0; f && i < 20; i++, f = f.return) {
    const p = f.memoizedProps || {};
    if (typeof p.configCode === 'string') return p.configCode;
  }
  return null;
})()"""
MATERIALIZE_LIVE = """(() => {
  const b = [...document.querySelectorAll('[role=dialog] button')].find(e => e.innerText.trim() === 'Materialize');
  return !!b && !b.disabled;
})()"""

# The daemon looks for queued runs every second instead of Dagster's 5 s (the run this test queues
# is launched sooner; nothing else changes).
RUN_COORDINATOR = """
run_coordinator:
  module: dagster._core.run_coordinator
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: 1
"""

RUN_STATUS = """query ($runId: ID!) { runOrError(runId: $runId) { __typename ... on Run { status runConfigYaml
  tags { key value } stepStats { stepKey status } } } }"""


def _graphql(base: str, query: str, **variables) -> dict:
    body = json.dumps({"query": query, "variables": variables}).encode()
    request = urllib.request.Request(f"{base}/graphql", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())["data"]


def _evaluate(browser, expression: str):
    return browser.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")


def _until(what, timeout: float, every: float = 1.0, why=lambda: ""):
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        assert time.monotonic() < deadline, why()
        time.sleep(every)


def _group(pgid: int) -> dict[int, str]:
    """The live processes of process group `pgid`: pid -> command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if entry.name.isdigit() and int(fields[2]) == pgid and fields[0] != "Z":
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or not a process
    return found


def _kill_group(pgid: int, timeout: float = 10) -> None:
    """SIGKILL every process of group `pgid` at once but multiprocessing's resource trackers: they
    see their pipe close and unlink the semaphores their processes still held (Dagster's queue and
    event of each run it launched: 8 in /dev/shm), as on a clean stop; then the group, if any is left."""
    deadline = time.monotonic() + (timeout if Path("/proc/self/stat").exists() else 0)  # else: no /proc to read
    while time.monotonic() < deadline:
        members = _group(pgid)
        if not members:
            return
        for pid in [pid for pid, cmd in members.items() if "multiprocessing.resource_tracker" not in cmd]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture
def dagster_dev(tmp_path, embedded_pg):
    """`dagster dev` (webserver and daemon) on 127.0.0.1 with its own Dagster home, run storage and
    state dir, over the two-index variants file; its base URL. The whole process group is killed
    after the test, and the state dir's vector server (a session of its own: pg_ctl) stopped."""
    from eval_pipeline.store.database import EmbeddedPostgres

    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text() + RUN_COORDINATOR)
    variants = tmp_path / "variants.yaml"
    variants.write_text(TWO_INDEXES)
    env = job_environment(tmp_path / "state", embedded_pg.uri("dagster_ui_launch_sweep", driver="psycopg2"),
                          EVAL_PIPELINE_VARIANTS=str(variants))
    env["DAGSTER_HOME"] = str(home)
    # the code servers' sockets and multiprocessing's folders, which a killed `dagster dev` leaves
    # behind, go in a folder removed after the test (short: a unix socket's path has 107 bytes at most)
    scratch = Path(tempfile.mkdtemp(prefix="dagster-dev-"))
    env["TMPDIR"] = str(scratch)
    port = _free_port()
    log = tmp_path / "dev.log"
    dev = subprocess.Popen([str(Path(sys.executable).parent / "dagster"), "dev", "-m", "definitions",
                            "-h", "127.0.0.1", "-p", str(port)], cwd=REPO, env=env,
                           stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"

    def up():
        try:
            urllib.request.urlopen(f"{base}/server_info", timeout=2)
            return True
        except OSError:
            assert dev.poll() is None, log.read_text()[-3000:]
            return False

    try:
        _until(up, 180, 0.5, lambda: log.read_text()[-3000:])
        yield base, tmp_path, log
    finally:
        # The test is done with the webserver, the daemon and their code servers (the run has
        # finished): killed at once. Stopped with SIGTERM they took 2.5 s, and up to `dagster dev`'s
        # own 60 s for a process that does not stop (seen in the loaded lane after the run).
        _kill_group(dev.pid)
        dev.wait(timeout=30)
        EmbeddedPostgres(tmp_path / "state").stop()
        shutil.rmtree(scratch, ignore_errors=True)


@needs_chromium
def test_the_index_sweep_launches_from_the_launchpad_with_its_prefilled_defaults(dagster_dev, browser, capsys):
    base, tmp_path, log = dagster_dev
    started = time.monotonic()
    menu = open_job_menu(browser, base, timeout=180)
    assert "Open launchpad" in menu, menu
    assert _click(browser, "[role=menu] a, [role=menu] button, .bp5-menu a", "Open launchpad")
    # the editor filled in with every default, and the Launchpad done checking it (its button live);
    # the same text on two reads in a row
    seen = []

    def prefilled_settled():
        value = _evaluate(browser, EDITOR)
        seen.append(value)
        return value if value and len(seen) > 1 and seen[-2] == value and _evaluate(browser, MATERIALIZE_LIVE) else None

    prefilled = _until(prefilled_settled, 60, 0.25, why=lambda: (seen[-1:], _dialogs(browser)))
    config = yaml.safe_load(prefilled)
    store = config["ops"]["pgvector_store"]["config"]
    # what the Launchpad pre-fills: the chunking defaults, which the variants file's indexes set
    assert {k: store[k] for k in ("split_by", "split_length", "split_overlap", "embed_title")} == {
        "split_by": "word", "split_length": 150, "split_overlap": 20, "embed_title": True}, store

    # One setting changed: the report's folder, whose default is the checkout's results/ (a test
    # writes in its own tmp dir). Everything else is as pre-filled.
    results = tmp_path / "results"
    edited, n = re.subn(r"(?m)^(\s*results_dir:).*$", lambda m: f"{m.group(1)} {json.dumps(str(results))}", prefilled)
    assert n == 1, prefilled
    _evaluate(browser, f"document.querySelector('[role=dialog] .CodeMirror').CodeMirror.setValue({json.dumps(edited)})")
    # the Launchpad holds the edited config (what "Materialize" launches) and its button is live
    _until(lambda: _evaluate(browser, LAUNCHPAD_CONFIG) == edited and _evaluate(browser, MATERIALIZE_LIVE), 30, 0.25,
           lambda: (_evaluate(browser, LAUNCHPAD_CONFIG), _dialogs(browser)))
    browser.screenshot(tmp_path / "launchpad_prefilled.png")

    assert _click(browser, "[role=dialog] button", "Materialize")
    _until(lambda: any("This job is partitioned" in d for d in _dialogs(browser)), 30, 0.5, lambda: _dialogs(browser))
    assert _click(browser, "[role=dialog] button", "Confirm")

    def launched():
        runs = graphql(base, "{ runsOrError { ... on Runs { results { runId } } } }")["runsOrError"]["results"]
        return runs[0]["runId"] if runs else None

    run_id = _until(launched, 60, why=lambda: (_dialogs(browser), log.read_text()[-3000:]))
    # The run is followed over GraphQL below; a page left open on the asset graph re-renders its
    # live updates for the whole run, about half a core of Chromium that the run's own steps (and
    # the lane's other worker) need. The run's page is opened again once it has finished.
    browser.call("Page.navigate", url="about:blank")

    def finished():
        run = _graphql(base, RUN_STATUS, runId=run_id)["runOrError"]
        return run if run["status"] in ("SUCCESS", "FAILURE", "CANCELED") else None

    run = _until(finished, 1200, 1, lambda: log.read_text()[-3000:])
    elapsed = time.monotonic() - started
    with capsys.disabled():
        print(f"\nrun {run_id} launched from the Launchpad: {run['status']} after {elapsed:.0f} s (load "
              f"{os.getloadavg()[0]:.2f})")
    steps = {s["stepKey"]: s["status"] for s in run["stepStats"]}
    assert run["status"] == "SUCCESS", (steps, log.read_text()[-5000:])
    # pgvector_store is a graph: its plan, one ingest step per index shard, and its finish
    store_steps = {k: v for k, v in steps.items() if k.startswith("pgvector_store.")}
    assert len(store_steps) >= 3 and set(store_steps.values()) == {"SUCCESS"}, steps
    assert any("sre_w150_o20" in k for k in store_steps) and any("minilm_w150_o20" in k for k in store_steps), steps
    launched_with = yaml.safe_load(run["runConfigYaml"])
    assert launched_with["ops"]["pgvector_store"] == config["ops"]["pgvector_store"]  # the defaults, sent as is
    tags = {t["key"]: t["value"] for t in run["tags"]}
    assert tags.get("dagster/asset_partition_range_start") == "minilm-w150-o20|pg-dense", tags
    assert tags.get("dagster/asset_partition_range_end") == "sre-w150-o20|bm25", tags
    report = (results / "results.md").read_text()
    assert "## Indexes" in report and "| sre-w150-o20\\|bm25 |" in report, report[:3000]

    browser.wait_for(f"{base}/runs/{run_id}", "document.body.innerText.includes('Success') "
                                               "&& document.body.innerText.includes('pgvector_store')", timeout=60)
    # for the screenshot: the run's events drawn, down to its last (a moment after the header)
    deadline = time.monotonic() + 10
    while not _evaluate(browser, "document.body.innerText.includes('RUN_SUCCESS')") and time.monotonic() < deadline:
        time.sleep(0.25)
    browser.screenshot(tmp_path / "launch_index_sweep.png")
