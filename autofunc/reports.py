"""Where the pass's reports go, whatever backend ran the pass: the open ``collect_reports()``
blocks, ``last_reports()`` and PyTorch's own compile diagnostics (``deliver``).

Backend-neutral: the Inductor glue (``autofunc/backends/inductor/glue.py``) delivers each
report of a graph it compiles, or of one Inductor's cache serves
(Note [Reports on a cache hit]); any other backend that runs the pass and wants its reports
seen calls :func:`deliver` the same way.
Reports are kept only for the blocks open while a graph compiles, and the last 64 for
``last_reports``, so a long-running server does not accumulate them.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from .logs import get_logger

__all__ = ["collect_reports", "deliver", "last_reports", "publish"]

# the logger PyTorch's TORCH_LOGS=autofunc switches on; its records reach the user once
# (Note [Each record once] in autofunc/logs.py)
log = get_logger("autofunc.inductor")


class _Reports:
    """Each delivered report goes to every open ``collect_reports()`` block (``blocks``, guarded
    by ``lock``: graphs compile in several threads) and to ``recent``, the last 64."""

    def __init__(self) -> None:
        self.blocks: list[list] = []
        self.lock = threading.Lock()
        self.recent: collections.deque = collections.deque(maxlen=64)

    def deliver(self, report: Any) -> None:
        self.recent.append(report)
        with self.lock:
            for reports in self.blocks:
                reports.append(report)


_reports = _Reports()


@contextlib.contextmanager
def collect_reports() -> Iterator[list]:
    """Collect the re-inplace report of every graph compiled inside the block::

        with collect_reports() as reports:
            torch.compile(fn)(*args)
        print(reports[0])

    A graph served from Inductor's FX graph cache or AOTAutograd's cache runs no post-grad
    pass; its report, stored with the cache entry when the graph was compiled, is delivered
    here on the hit, the same as a fresh compile's (Note [Reports on a cache hit]). Where this
    torch does not let autofunc store or replay it, the ``autofunc`` log says so at INFO and
    ``explain`` (which turns both caches off) or ``TORCHINDUCTOR_FORCE_DISABLE_CACHES=1``
    shows the decisions.
    """
    reports: list = []
    with _reports.lock:
        _reports.blocks.append(reports)
    try:
        yield reports
    finally:
        with _reports.lock:
            _reports.blocks.remove(reports)


def last_reports(clear: bool = False) -> list:
    """The reports of the most recently compiled graphs (at most 64), oldest first."""
    out = list(_reports.recent)
    if clear:
        _reports.recent.clear()
    return out


def deliver(report: Any) -> None:
    """Where a graph's report goes: the open ``collect_reports`` blocks, ``last_reports`` and
    PyTorch's diagnostics (:func:`publish`); the same for a graph compiled now and one loaded
    from a cache."""
    _reports.deliver(report)
    publish(report)


def publish(report: Any) -> None:
    """Note [Diagnostics the PyTorch way]
    Each compiled graph's report goes where PyTorch's own compile diagnostics go: the log
    ``autofunc`` (``TORCH_LOGS=autofunc`` prints the report, ``+autofunc`` each decision as it
    is made), the structured trace (``TORCH_TRACE=dir``; ``tlparse`` lists it as the artifact
    ``autofunc_reinplace_report``), and ``torch._dynamo.utils.counters["autofunc"]`` (calls,
    buffers in place and cloned, bytes cloned and saved, copy nodes for mutations and their
    bytes), beside Inductor's counters."""
    from torch._dynamo.utils import counters
    from torch._logging import trace_structured

    log.info("%s", report)
    trace_structured(
        "artifact",
        metadata_fn=lambda: {"name": "autofunc_reinplace_report", "encoding": "string"},
        payload_fn=lambda: str(report),
    )
    c = counters["autofunc"]
    c["calls"] += len(report.calls)
    c["inplace"] += sum(1 for d in report.decisions if d)
    c["cloned"] += report.num_clones
    c["bytes_cloned"] += report.bytes_cloned
    c["bytes_saved"] += report.bytes_saved
    c["copies"] += len(report.mutation_copies)
    c["bytes_copied"] += report.bytes_copied
