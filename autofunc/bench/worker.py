"""The one protocol between a benchmark and its worker subprocesses.

The parent runs ``python -m <module> --worker`` and writes a JSON spec to its stdin. The worker
reads it with :func:`read_spec` and prints one JSON object per line: :func:`start` before each
item (its key) and :func:`result` after it. The parent (:func:`run`) reads the lines as they
come, so when the worker dies (a segfault in compiled code, a double free in the built-in's)
the item in flight is known and the others are kept; a worker that runs past ``timeout_s`` is
killed. Anything else a worker prints to stdout is ignored; its stderr is kept for errors.

Used by ``bench.run`` (sweep points, each forked from the worker), ``bench.compile_time`` (one
compile per worker) and the developer tool ``tools.compare`` (programs per configuration).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import threading
from typing import Any, Callable

__all__ = ["WorkerRun", "error_line", "read_spec", "result", "run", "start"]


def error_line(e: BaseException, limit: int = 300) -> str:
    """One line for a failed item: ``Type: first line``, and where that line names no cause
    (``BackendCompilerFailed: backend='inductor' raised:``) the innermost exception's too."""
    def line(x: BaseException) -> str:
        text = str(x).strip()
        return f"{type(x).__name__}: {text.splitlines()[0] if text else ''}"

    inner, seen = e, {id(e)}
    while (nxt := inner.__cause__ or getattr(inner, "inner_exception", None)) is not None:
        if id(nxt) in seen:
            break
        inner, seen = nxt, seen | {id(nxt)}
    text = line(e) if inner is e else f"{line(e)} {line(inner)}"
    return text[:limit]


def read_spec() -> Any:
    """In a worker: the spec the parent wrote."""
    return json.loads(sys.stdin.read())


def start(key: str) -> None:
    """In a worker: the item ``key`` starts (named as in flight if the worker dies now)."""
    print(json.dumps({"start": key}), flush=True)


def result(value: dict) -> None:
    """In a worker: the result of the item that started last."""
    print(json.dumps({"result": value}), flush=True)


@dataclasses.dataclass
class WorkerRun:
    """What a worker did: its results in order, the item it died in (if any), how it ended."""

    results: list[dict]
    in_flight: str | None
    returncode: int
    stderr: str
    timed_out: bool = False


def run(
    module: str,
    spec: Any,
    *,
    env: dict | None = None,
    timeout_s: float | None = None,
    on_result: Callable[[dict], None] | None = None,
) -> WorkerRun:
    """Run ``python -m module --worker`` on ``spec`` until it exits (or ``timeout_s`` passes)."""
    results: list[dict] = []
    in_flight = None
    with tempfile.TemporaryFile("w+") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=dict(os.environ) if env is None else env,
        )
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            proc.kill()

        timer = threading.Timer(timeout_s, kill) if timeout_s is not None else None
        if timer is not None:
            timer.start()
        try:
            try:
                proc.stdin.write(json.dumps(spec))
                proc.stdin.close()
            except BrokenPipeError:  # it died before reading: its exit status tells
                pass
            for line in proc.stdout:
                try:
                    msg = json.loads(line)
                except json.JSONDecodeError:
                    continue  # something in the worker printed to stdout
                if not isinstance(msg, dict):
                    continue
                if "start" in msg:
                    in_flight = msg["start"]
                elif "result" in msg:
                    results.append(msg["result"])
                    in_flight = None
                    if on_result is not None:
                        on_result(msg["result"])
            returncode = proc.wait()
        finally:
            if timer is not None:
                timer.cancel()
        stderr.seek(0)
        err = stderr.read()
    return WorkerRun(results, in_flight, returncode, err[-3000:], timed_out.is_set())
