"""Imported first by the parallel job's forkserver (resources/parallel_executor.py), before anything
else it preloads: drops the folder the server was started in from the front of its `sys.path`.

Python 3.11 starts a forkserver as `python -c ...` in the current folder, which leads its
`sys.path`, so a `token.py` or `yaml.py` in the folder a run was started from would replace the
installed module in the server and in every step forked from it. Being the first of the server's
preload list, this also holds for a server multiprocessing restarts by itself in the middle of a run.
Each step gets the run's own path back when it starts (multiprocessing restores it)."""

import sys

if sys.path and sys.path[0] == "":
    del sys.path[0]
