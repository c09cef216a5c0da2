"""Diagnostics on a cache hit (Note [Reports on a cache hit] in
autofunc/backends/inductor/glue.py): the second run of a compiled program, a fresh process with the first
run's Inductor cache, shows the same report as the first through ``collect_reports``,
``last_reports``, ``counters["autofunc"]``, ``TORCH_LOGS=autofunc`` and the trace artifact,
though its graph comes from the cache and autofunc's pass does not run. Plus the report's JSON
form, which the cache entry holds. Two small compiles: about 20-30 s on a loaded 2-core machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from autofunc.passes.copies import Copy, CopyKind
from autofunc.passes.report import CallReport, Decision, Reason, Report

# One graph, two calls of a mutable op: one written in place, one cloned.
PROGRAM = textwrap.dedent(
    """
    import json
    import torch
    import autofunc
    from autofunc.inductor import collect_reports, last_reports
    from torch._dynamo.utils import counters

    @torch.library.custom_op("cachehit::scale_", mutates_args=("x",))
    def scale_(x: torch.Tensor, k: float) -> None:
        x.mul_(k)

    @scale_.register_fake
    def _(x, k):
        return None

    autofunc.register(scale_)

    def f(a):
        b = a + 1
        scale_(b, 2.0)  # written in place
        before = b * 1
        scale_(b, 3.0)  # cloned: its old value is read later
        return before + b

    with collect_reports() as reports:
        out = torch.compile(f)(torch.ones(8))
    assert torch.equal(out, torch.full((8,), 16.0)), out
    print("REPORTS", json.dumps([str(r) for r in reports]))
    print("LAST", json.dumps([str(r) for r in last_reports()]))
    print("COUNTERS", json.dumps(dict(counters["autofunc"]), sort_keys=True))
    print("INDUCTOR", json.dumps(dict(counters["inductor"]), sort_keys=True))
    """
)


def _run(tmp_path: Path, trace: str) -> tuple[dict, str, str]:
    env = {
        **os.environ,
        "TORCH_LOGS": "autofunc",
        "TORCH_TRACE": str(tmp_path / trace),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"),
    }
    for name in ("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "TORCHINDUCTOR_FX_GRAPH_CACHE"):
        env.pop(name, None)
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = {}
    for line in proc.stdout.splitlines():
        tag, _, payload = line.partition(" ")
        if tag in ("REPORTS", "LAST", "COUNTERS", "INDUCTOR"):
            out[tag] = json.loads(payload)
    logs = "".join(p.read_text() for p in (tmp_path / trace).glob("*.log"))
    return out, proc.stderr, logs


def test_a_warm_cache_shows_the_same_report(tmp_path: Path) -> None:
    first, first_log, first_trace = _run(tmp_path, "trace1")
    second, second_log, second_trace = _run(tmp_path, "trace2")

    # the first run compiled the graph: one report, two calls, one clone
    assert first["INDUCTOR"].get("fxgraph_cache_miss", 0) >= 1
    assert len(first["REPORTS"]) == 1
    report = first["REPORTS"][0]
    assert "cachehit::scale_" in report and "2 call(s), 1 clone(s)" in report
    assert first["COUNTERS"]["calls"] == 2 and first["COUNTERS"]["cloned"] == 1

    # the second run loaded it from the cache, and shows the same report everywhere
    assert second["INDUCTOR"].get("fxgraph_cache_hit", 0) >= 1
    assert second["INDUCTOR"].get("fxgraph_cache_miss", 0) == 0
    assert second["REPORTS"] == first["REPORTS"]
    assert second["LAST"] == first["LAST"] == first["REPORTS"]
    assert second["COUNTERS"] == first["COUNTERS"]
    # TORCH_LOGS=autofunc: the report, as the first run logged it
    assert report.splitlines()[0] in first_log
    for line in report.splitlines():
        assert line in second_log
    # the structured trace: the artifact, holding the report
    for trace in (first_trace, second_trace):
        assert '"name": "autofunc_reinplace_report"' in trace
        assert "cachehit::scale_" in trace


def test_a_report_round_trips_through_json() -> None:
    report = Report(
        graph="GraphModule",
        note="ran as Inductor's device pass",
        calls=[
            CallReport(
                "autofunc_v2",
                "ns::op.default",
                "v2",
                [
                    Decision(("x", "y"), "buf0", ("alias", "[3, 0]"), Reason.INPLACE, 4096),
                    Decision(("z",), "arg0_1", ("alias",), Reason.GRAPH_INPUT, 32, "why not"),
                ],
                note="a note on the call",
            ),
            CallReport("autofunc_v1", "ns::other.default", "v1", []),
        ],
    )
    text = report.to_json()
    again = Report.from_json(text)
    assert again == report
    assert str(again) == str(report)
    assert again.to_json() == text


def test_from_json_refuses_what_it_cannot_read() -> None:
    import pytest

    good = json.loads(Report(calls=[CallReport("n", "op", "v1", [])]).to_json())
    for bad in (
        "[]",
        "not json",
        json.dumps({**good, "format": 99}),
        json.dumps({**good, "calls": [{"node": "n"}]}),
        json.dumps(
            {
                **good,
                "calls": [
                    {
                        "node": "n",
                        "op": "op",
                        "strategy": "v1",
                        "note": "",
                        "decisions": [
                            {
                                "args": ["x"],
                                "buffer": "b",
                                "chains": ["alias"],
                                "reason": "NO_SUCH_REASON",
                                "nbytes": 1,
                                "detail": "",
                            }
                        ],
                    }
                ],
            }
        ),
    ):
        with pytest.raises(ValueError, match="not an autofunc report"):
            Report.from_json(bad)


class _Loaded:
    """Stands in for a ``CompiledFxGraph`` just loaded from Inductor's cache."""

    def __init__(self, source_code: str = "", reports: tuple | None = None) -> None:
        self.source_code = source_code
        if reports is not None:
            self._autofunc_reports = reports


def _report() -> Report:
    decision = Decision(("x",), "buf0", ("alias",), Reason.READ_LATER, 32, "by mul")
    copies = [Copy("clone", CopyKind.CLONE, "autofunc_v2", 32), Copy("clone_1", CopyKind.OTHER, "", 8)]
    return Report(
        calls=[CallReport("autofunc_v2", "ns::op.default", "v2", [decision])], copies=copies
    )


def test_a_hit_delivers_the_stored_report_as_a_compile_would() -> None:
    from torch._dynamo.utils import counters

    from autofunc.backends.inductor import glue as inductor

    counters["autofunc"].clear()
    with inductor.collect_reports() as reports:
        inductor._replay(_Loaded(reports=(_report().to_json(),)))
        inductor._replay(_Loaded(reports=()))  # a graph without calls: nothing
    assert [str(r) for r in reports] == [str(_report())]
    assert str(inductor.last_reports()[-1]) == str(_report())
    assert dict(counters["autofunc"]) == {
        "calls": 1,
        "inplace": 0,
        "cloned": 1,
        "bytes_cloned": 32,
        "bytes_saved": 0,
        "copies": 1,
        "bytes_copied": 32,
    }
    counters["autofunc"].clear()


def test_a_hit_without_a_stored_report_says_so_once(monkeypatch, caplog) -> None:
    import logging

    from autofunc.backends.inductor import glue as inductor

    monkeypatch.setattr(inductor.registry, "registrations", lambda: {"ns::op": "v2"})
    monkeypatch.setattr(inductor, "_said", set())
    caplog.set_level(logging.INFO, logger="autofunc.inductor")
    with inductor.collect_reports() as reports:
        inductor._replay(_Loaded("buf0 = torch.ops.other.op.default(x)"))  # no autofunc op
        assert not caplog.records
        for _ in range(2):
            inductor._replay(_Loaded("torch.ops.ns.op.default(buf0)"))
            inductor._replay(_Loaded('aoti_torch_call_dispatcher("ns::op", "", ...)'))
        inductor._replay(_Loaded(reports=("{not json",)))
    assert reports == []
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages  # one per cause, once per process
    assert all("came from Inductor's FX graph cache" in m for m in messages)
    assert all("explain" in m and "TORCHINDUCTOR_FORCE_DISABLE_CACHES=1" in m for m in messages)
    assert "holds no autofunc report" in messages[0] and "cannot be read" in messages[1]


def test_the_cache_hooks_wrap_inductor_once() -> None:
    import torch

    from autofunc.backends.inductor import glue as inductor

    torch.compile(lambda x: x + 1)(torch.ones(2))
    inductor._hook_inductor_cache()  # idempotent
    from torch._inductor.codecache import FxGraphCache
    from torch._inductor.output_code import CompiledFxGraph

    assert getattr(CompiledFxGraph.__init__, "_autofunc", False)
    assert getattr(FxGraphCache.cache_hit_post_compile, "_autofunc", False)
    assert not hasattr(CompiledFxGraph.__init__.__wrapped__, "__wrapped__")  # wrapped once
