"""Each autofunc record reaches the user once, whatever handlers the host program installs
(Note [Each record once] in autofunc/logs.py): with ``TORCH_LOGS=autofunc`` through PyTorch's
handler only, without it through the host's (here the root logger, configured the way
``logging.basicConfig`` or vLLM's MoE path configures it)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from torch._logging import _internal as torch_logs

from autofunc.logs import get_logger
from autofunc.passes.report import Report
from autofunc.reports import publish

ROOT = Path(__file__).parent.parent


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def loggers():
    """The root logger with a host's handler, and autofunc's top logger as PyTorch leaves it
    after ``TORCH_LOGS=autofunc`` at import: its own handler, still propagating."""
    root, top = logging.getLogger(), logging.getLogger("autofunc")
    saved = (root.level, top.level, top.propagate, list(top.handlers))
    host = _Capture()
    root.addHandler(host)
    root.setLevel(logging.INFO)
    try:
        yield host, top
    finally:
        root.removeHandler(host)
        root.setLevel(saved[0])
        top.setLevel(saved[1])
        top.propagate = saved[2]
        top.handlers[:] = saved[3]


def _torch_handler(top: logging.Logger) -> _Capture:
    handler = torch_logs._track_handler(_Capture())
    top.addHandler(handler)
    top.setLevel(logging.INFO)
    top.propagate = True
    return handler


def _count(handler: _Capture, mark: str) -> int:
    return sum(mark in m for m in handler.messages)


def test_report_once_through_torchs_handler(loggers):
    host, top = loggers
    torch = _torch_handler(top)
    publish(Report(graph="GRAPH-ONCE"))
    get_logger("autofunc.passes.alias").warning("DECISION-ONCE")  # a child logger too
    assert _count(torch, "GRAPH-ONCE") == 1 and _count(host, "GRAPH-ONCE") == 0
    assert _count(torch, "DECISION-ONCE") == 1 and _count(host, "DECISION-ONCE") == 0


def test_report_once_through_the_hosts_handler(loggers):
    host, top = loggers
    publish(Report(graph="GRAPH-HOST"))
    assert _count(host, "GRAPH-HOST") == 1
    # PyTorch's handler attached, then gone again (torch._logging reset): back to the host's
    torch = _torch_handler(top)
    publish(Report(graph="GRAPH-TORCH"))
    top.removeHandler(torch)
    publish(Report(graph="GRAPH-BACK"))
    assert _count(torch, "GRAPH-TORCH") == 1 and _count(host, "GRAPH-TORCH") == 0
    assert _count(host, "GRAPH-BACK") == 1 and _count(torch, "GRAPH-BACK") == 0


def test_host_choice_to_stop_propagation_is_kept(loggers):
    host, top = loggers
    top.propagate = False  # the host's own setting, no PyTorch handler involved
    publish(Report(graph="GRAPH-QUIET"))
    assert _count(host, "GRAPH-QUIET") == 0 and top.propagate is False


PROGRAM = textwrap.dedent(
    """
    import logging
    import torch
    from autofunc.passes.report import Report
    from autofunc.reports import publish
    logging.basicConfig(level=logging.INFO)  # what vLLM's MoE path leaves configured
    publish(Report(graph="GRAPH-MARK"))
    """
)


@pytest.mark.parametrize("torch_logs", ["autofunc", "autofunc.inductor", None])
def test_torch_logs_in_a_fresh_process(torch_logs):
    env = {k: v for k, v in os.environ.items() if k != "TORCH_LOGS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    if torch_logs:
        env["TORCH_LOGS"] = torch_logs
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "GRAPH-MARK" in ln]
    assert len(lines) == 1, lines
    # PyTorch's format with TORCH_LOGS, the host's (basicConfig's) without
    assert lines[0].startswith("INFO:autofunc.inductor:") == (torch_logs is None), lines
