"""A worker for tests/test_worker.py: ``python -m worker_probe --worker`` with a spec of
``{"items": [[key, action], ...]}``; action "ok" returns a result, "crash" kills the process,
"hang" sleeps forever, "noise" prints a non-protocol line first."""

import os
import sys
import time

from autofunc.bench import worker

if __name__ == "__main__" and sys.argv[1:] == ["--worker"]:
    for key, action in worker.read_spec()["items"]:
        worker.start(key)
        if action == "crash":
            os._exit(139)
        if action == "hang":
            time.sleep(3600)
        if action == "noise":
            print("not json", flush=True)
        worker.result({"key": key})
