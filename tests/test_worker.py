"""The benchmark worker protocol (``autofunc.bench.worker``): results in order, the item a dying
worker was in, a timeout, and stdout noise ignored."""

import os
from pathlib import Path

from autofunc.bench import worker

_PATH = [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(_PATH)}


def _run(items, **kw):
    return worker.run("worker_probe", {"items": items}, env=_ENV, **kw)


def test_results_in_order_and_noise_ignored():
    seen = []
    done = _run([["a", "ok"], ["b", "noise"], ["c", "ok"]], on_result=seen.append)
    assert [r["key"] for r in done.results] == ["a", "b", "c"] == [r["key"] for r in seen]
    assert (done.in_flight, done.returncode, done.timed_out) == (None, 0, False)


def test_the_item_a_dying_worker_was_in():
    done = _run([["a", "ok"], ["b", "crash"], ["c", "ok"]])
    assert [r["key"] for r in done.results] == ["a"]
    assert done.in_flight == "b" and done.returncode == 139


def test_timeout_kills_the_worker():
    # the budget covers the worker's start (the probe imports neither autofunc nor torch: well
    # under a second even on a loaded machine), item "a", and then the hang
    done = _run([["a", "ok"], ["b", "hang"]], timeout_s=15)
    assert done.timed_out and done.in_flight == "b"
    assert [r["key"] for r in done.results] == ["a"]


def test_an_error_line_names_the_cause_a_wrapper_hides():
    class CompileFailed(Exception):  # as Dynamo's BackendCompilerFailed: a header, then the cause
        def __init__(self, inner):
            super().__init__(f"backend='inductor' raised:\n{inner}")
            self.inner_exception = inner

    cause = RuntimeError("setStorage: sizes [2, 64] out of bounds\nthe rest")
    wrapped = CompileFailed(cause)
    assert worker.error_line(wrapped) == (
        "CompileFailed: backend='inductor' raised: "
        "RuntimeError: setStorage: sizes [2, 64] out of bounds"
    )
    try:
        raise ValueError("outer") from KeyError("k")
    except ValueError as e:
        assert worker.error_line(e) == "ValueError: outer KeyError: 'k'"
    assert worker.error_line(ValueError("a\nb")) == "ValueError: a"
    assert worker.error_line(ValueError("x" * 999), 200) == ("ValueError: " + "x" * 999)[:200]
