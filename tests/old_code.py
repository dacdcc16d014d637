"""A project module as it was at another revision, loaded in memory: the reviews compare the code before a
change with the code now on the same inputs (old-against-new tests)."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_LOADED: dict[tuple[str, str], types.ModuleType] = {}


def module_at(revision: str, path: str) -> types.ModuleType:
    """``path`` (e.g. ``eval_pipeline/verdict/answers.py``) as it was at ``revision``, executed once per process
    under a module name of its own (registered in ``sys.modules``: dataclasses look their module up); its
    imports are today's modules."""
    key = (revision, path)
    if key not in _LOADED:
        source = subprocess.run(["git", "-C", str(ROOT), "show", f"{revision}:{path}"],
                                capture_output=True, text=True, check=True).stdout
        name = "_old_" + "".join(c if c.isalnum() else "_" for c in f"{revision}_{path}")
        module = types.ModuleType(name)
        module.__file__ = f"<{revision}:{path}>"
        sys.modules[name] = module
        exec(compile(source, module.__file__, "exec"), module.__dict__)  # noqa: S102 - the code before, to compare
        _LOADED[key] = module
    return _LOADED[key]
