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


@pytest.fixture
def dagster_dev(tmp_path, embedded_pg):
    """`dagster dev` (webserver and daemon) on 127.0.0.1 with its own Dagster home, run storage and
    state dir, over the two-index variants file; its base URL. The whole process group is stopped
    after the test, and the state dir's vector server."""
    from eval_pipeline.store.database import EmbeddedPostgres

    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    variants = tmp_path / "variants.yaml"
    variants.write_text(TWO_INDEXES)
    env = job_environment(tmp_path / "state", embedded_pg.uri("dagster_ui_launch_sweep", driver="psycopg2"),
                          EVAL_PIPELINE_VARIANTS=str(variants))
    env["DAGSTER_HOME"] = str(home)
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
        os.killpg(dev.pid, signal.SIGTERM)
        try:
            # `dagster dev` itself waits 60 s for a webserver or daemon that does not stop (seen in
            # the loaded lane after the run): the test is done with them, so 10 s is enough
            dev.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(dev.pid, signal.SIGKILL)
            dev.wait(timeout=30)
        EmbeddedPostgres(tmp_path / "state").stop()


@needs_chromium
def test_the_index_sweep_launches_from_the_launchpad_with_its_prefilled_defaults(dagster_dev, browser, capsys):
    base, tmp_path, log = dagster_dev
    started = time.monotonic()
    menu = open_job_menu(browser, base, timeout=180)
    assert "Open launchpad" in menu, menu
    assert _click(browser, "[role=menu] a, [role=menu] button, .bp5-menu a", "Open launchpad")
    prefilled = _until(lambda: _evaluate(browser, EDITOR), 60, why=lambda: _dialogs(browser))
    time.sleep(2)  # the editor fills in every default
    prefilled = _evaluate(browser, EDITOR)
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
    time.sleep(2)  # the Launchpad validates the config before it enables the button
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
    time.sleep(2)
    browser.screenshot(tmp_path / "launch_index_sweep.png")
