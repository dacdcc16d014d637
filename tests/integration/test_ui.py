"""The report as a person sees it: the Dagster UI's report asset page in headless Chromium."""

import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.integration.cli import REPO, start_job, tiny_job_config

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (make test installs Debian's chromium)")
def test_report_headline_in_the_ui(tmp_path, job_env):
    env = job_env("state")
    job = start_job(tmp_path, "run", env, tiny_job_config(tmp_path / "results"))
    assert job.wait(timeout=600) == 0, (tmp_path / "run.log").read_text()[-3000:]
    headline = (tmp_path / "results" / "results.md").read_text().splitlines()[2].strip("*")
    assert headline.startswith("Best variant:")

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
        url = f"http://127.0.0.1:{port}/assets/report"
        common = [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium'}", "--virtual-time-budget=20000"]
        # The page renders the metadata after its GraphQL queries return; on a loaded machine the
        # virtual time budget can run out first, so look up to three times before failing.
        for _ in range(3):
            dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
            if headline in dom:
                break
        assert headline in dom
        shot = tmp_path / "report_asset.png"
        subprocess.run([*common, "--window-size=1500,1100", f"--screenshot={shot}", url], capture_output=True,
                       timeout=120)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    finally:
        web.terminate()
        web.wait(timeout=30)
