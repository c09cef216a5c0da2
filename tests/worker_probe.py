"""A worker for tests/test_worker.py: ``python -m worker_probe --worker`` with a spec of
``{"items": [[key, action], ...]}``; action "ok" returns a result, "crash" kills the process,
"hang" sleeps forever, "noise" prints a non-protocol line first.

The protocol module (``autofunc/bench/worker.py``, standard library only) is loaded from its
file, without importing the ``autofunc`` package (and torch with it): the worker starts in a
fraction of a second, so the tests' timeout measures the items, not an import that takes
seconds on a loaded machine."""

import importlib.util
import os
import sys
import time
from pathlib import Path

_package = importlib.util.find_spec("autofunc")  # finds the package without importing it
_spec = importlib.util.spec_from_file_location(
    "autofunc_bench_worker", Path(_package.origin).parent / "bench" / "worker.py"
)
worker = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)  # dataclasses look
_spec.loader.exec_module(worker)

if __name__ == "__main__" and sys.argv[1:] == ["--worker"]:
    assert "torch" not in sys.modules, "the probe must start without importing torch"
    for key, action in worker.read_spec()["items"]:
        worker.start(key)
        if action == "crash":
            os._exit(139)
        if action == "hang":
            time.sleep(3600)
        if action == "noise":
            print("not json", flush=True)
        worker.result({"key": key})
