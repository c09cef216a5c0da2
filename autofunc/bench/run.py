"""Run a :class:`~autofunc.bench.sweep.Sweep`: one :class:`Record` per (case, sizes, strategy).

Each point is measured in a process of its own: the runner starts one worker subprocess
(``python -m autofunc.bench.run --worker``, the ``bench.worker`` protocol) that imports torch
and autofunc once and then forks a child per point, so every point starts from the same clean
state (no compiled graphs, no registrations, an allocator and resident set of its own) without
paying for the imports again.
A point that crashes or hangs its child is recorded as such and the sweep goes on; where
``os.fork`` is missing the worker measures in-process and a crash restarts it (as in
``tools/compare.py``). The worker never initialises CUDA itself: its children do, after the fork.

Per point, in the child:

1. build the program and register its ops with the strategy (``cases``, ``sweep.STRATEGIES``);
2. run eager on fresh inputs (the reference), then compile and time the first call;
3. check outputs and final inputs (the KV cache) against eager; count the clones left;
4. time steps (median after warm-up) for eager and compiled; the ratio is what is reported;
5. read the peak resident set, then measure the bytes one call allocates (``measure_memory``).

Memory above eager is bytes allocated per call (CPU) or peak bytes per call (CUDA) minus
eager's, both measured in the same child. Nothing here prints except the worker protocol.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import resource
import select
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from . import cases, triton_point, worker
from .sweep import STRATEGIES, Sweep

__all__ = ["Record", "measure_point", "run_sweep"]

# Correctness tolerance per dtype: compiled kernels may reorder float arithmetic. bf16 drifts
# with depth: on the 32-layer GPU model (H100, torch 2.11) eager and compiled differ by up to
# 0.07 on values up to 6 for the built-in v2 and autofunc v2 alike, while in fp32 both agree
# with eager to 2e-6; Inductor rounds fused bf16 arithmetic once where eager rounds every op.
_TOLERANCE = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-1}


@dataclasses.dataclass
class Record:
    """One measured point. ``None`` means not measured (an error, or not applicable)."""

    case: str
    strategy: str
    x: dict[str, Any]
    cache_bytes: int = 0  # the point's paged KV cache size
    correct: bool | None = None  # outputs and final inputs equal to eager's
    error: str = ""  # "crash (...)", "timeout", or the exception's first line
    clones: int | None = None  # autofunc: clones its reports keep; built-in: missed reinplacing
    bytes_cloned: int | None = None  # autofunc only: bytes of those clones
    allocated: int | None = None  # bytes one compiled call allocates
    peak: int | None = None  # peak bytes live during one compiled call
    eager_allocated: int | None = None
    eager_peak: int | None = None
    mem_above_eager: int | None = None  # allocated (CPU) / peak (CUDA) minus eager's
    time_s: float | None = None  # median seconds per step
    eager_time_s: float | None = None
    time_ratio: float | None = None  # time_s / eager_time_s, same process
    compile_s: float | None = None  # first call, compile included
    rss_above_baseline: int | None = None  # peak RSS of the point's process minus a baseline's
    rss_steps: int | None = None  # peak RSS while stepping above RSS before (Linux)
    mismatch: list[str] = dataclasses.field(default_factory=list)  # what differs from eager
    wall_s: float | None = None
    mode: str | None = None  # torch.compile mode ("reduce-overhead": CUDA graphs)
    # CUDA only: torch.cuda.max_memory_allocated over the whole point (inputs, compile, CUDA
    # graph pools, warm-up and timed steps); what a long-running server must have free. A
    # per-call peak misses what CUDA graphs keep in their pool, so this is what is compared.
    footprint: int | None = None
    footprint_above_eager: int | None = None  # footprint minus the eager line's at this point

    @property
    def key(self) -> str:
        return point_key(self.case, self.x, self.strategy)


def point_key(case: str, xs: dict[str, Any], strategy: str) -> str:
    return " ".join([case, *(f"{k}={v}" for k, v in xs.items()), strategy])


# -- one point, in this process ------------------------------------------------------------------


def measure_point(
    sweep: Sweep, case: str, xs: dict[str, Any], strategy: str, *, rss: bool = False
) -> Record:
    """Measure one point in this process (steps 1-5 of the module docstring).

    ``rss``: record resident-set figures (only meaningful in a process of the point's own).
    """
    t_start = time.perf_counter()
    record = Record(case, strategy, dict(xs), mode=sweep.mode)
    regs: list = []
    threads = torch.get_num_threads()
    if sweep.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    try:
        program = cases.build(case, sweep.config(xs), sweep.device, sweep.torch_dtype)
        record.cache_bytes = program.cache_bytes
        regs = _register(program, strategy)
        if sweep.device == "cpu" and sweep.cpu_threads:
            torch.set_num_threads(sweep.cpu_threads)
        with _compile_config(strategy):
            _measure(sweep, program, strategy, record, rss)
    except Exception as e:  # noqa: BLE001 - a failure under this strategy is a result
        record.error = worker.error_line(e)
    finally:
        for r in regs:
            r.remove()
        torch._dynamo.reset()
        torch.set_num_threads(threads)
    record.wall_s = time.perf_counter() - t_start
    return record


def _register(program: cases.Program, strategy: str) -> list:
    """Hand the program's ops (its user Triton kernels) to autofunc under ``strategy``; returns
    what to ``remove()`` afterwards."""
    autofunc_strategy = STRATEGIES[strategy].strategy
    if autofunc_strategy is None:
        return []
    import autofunc

    regs = [autofunc.register(op, strategy=autofunc_strategy) for op in program.ops]
    if program.triton:
        regs.append(triton_point.TritonSwitch())
    return regs


def _compile_config(strategy: str) -> contextlib.ExitStack:
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    stack = contextlib.ExitStack()
    stack.enter_context(
        inductor_config.patch(
            enable_auto_functionalized_v2=STRATEGIES[strategy].builtin_v2,
            fx_graph_cache=False,
            # Compile kernels in the point's own process: a fresh worker pool per point would
            # cost more than it saves, and serial builds keep compile times comparable.
            compile_threads=1,
        )
    )
    stack.enter_context(functorch_config.patch(enable_autograd_cache=False))
    return stack


def _measure(
    sweep: Sweep, program: cases.Program, strategy: str, record: Record, rss: bool
) -> None:
    if program.triton and not sweep.device.startswith("cuda"):
        triton_point.measure_graph(program, STRATEGIES[strategy], record)
        return
    compiled, args, eager_args = _compile_and_check(sweep, program, strategy, record)
    _time_and_memory(sweep, program.fn, eager_args, compiled, args, record, rss)


def _compile_and_check(
    sweep: Sweep, program: cases.Program, strategy: str, record: Record
) -> tuple[Callable, tuple, tuple]:
    """Steps 2-3: eager reference, compile (first call), correctness, clones left."""
    from torch._dynamo.utils import counters

    from ..inductor import last_reports
    from ..testing import run_against_eager

    fn, make_args = program.fn, program.make_args
    config = STRATEGIES[strategy]
    autofunc_strategy, is_compiled = config.strategy, config.compiled

    torch._dynamo.reset()
    counters.clear()
    last_reports(clear=True)
    compiled = torch.compile(fn, backend=sweep.backend, mode=sweep.mode) if is_compiled else fn
    tol = _TOLERANCE.get(sweep.torch_dtype, 1e-4)
    check = run_against_eager(
        fn, compiled, make_args(), atol=tol, rtol=tol, sync=lambda: _sync(sweep.device)
    )
    record.compile_s = check.seconds if is_compiled else 0.0
    record.mismatch = check.mismatch
    record.correct = check.correct
    if autofunc_strategy is not None:
        reports = last_reports(clear=True)
        record.clones = sum(r.num_clones for r in reports)
        record.bytes_cloned = sum(r.bytes_cloned for r in reports)
    elif is_compiled:
        record.clones = int(
            counters["inductor"].get("possibly_missed_reinplacing_opportunities", 0)
        )
    else:
        record.clones = 0
    return compiled, tuple(check.inputs), tuple(check.eager_inputs)


def _time_and_memory(
    sweep: Sweep,
    fn: Callable,
    eager_args: tuple,
    compiled: Callable,
    args: tuple,
    record: Record,
    rss: bool,
) -> None:
    """Steps 4-5: step times (eager and compiled, this process), resident set, bytes per call."""
    from .measure import measure_memory, median_time

    device, is_compiled = sweep.device, compiled is not fn
    step_eager, step = _stepper(fn, eager_args), _stepper(compiled, args)
    timing = {"warmup": sweep.warmup, "repeat": sweep.repeat, "device": device}
    record.eager_time_s = median_time(step_eager, **timing)
    record.time_s = median_time(step, **timing) if is_compiled else record.eager_time_s
    record.time_ratio = record.time_s / record.eager_time_s if record.eager_time_s else None

    if device.startswith("cuda"):  # before measure_memory resets the peak
        torch.cuda.synchronize()
        record.footprint = torch.cuda.max_memory_allocated()
    if rss:  # before the profiler below adds its own memory
        record.rss_steps = _rss_while(step, sweep.repeat)
        record.rss_above_baseline = _max_rss()  # the runner subtracts the baseline's
    eager_mem = measure_memory(step_eager, device)
    mem = measure_memory(step, device) if is_compiled else eager_mem
    record.eager_allocated, record.eager_peak = eager_mem.allocated, eager_mem.peak
    record.allocated, record.peak = mem.allocated, mem.peak
    if device.startswith("cuda"):
        record.mem_above_eager = mem.peak - eager_mem.peak
    else:
        record.mem_above_eager = mem.allocated - eager_mem.allocated


def _stepper(fn: Callable, args: tuple) -> Callable[[], Any]:
    def step() -> Any:
        return fn(*args)

    return step


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _max_rss() -> int:
    """Peak resident set of this process so far, in bytes."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024  # Linux reports KiB


def _rss_while(step: Callable[[], Any], repeat: int) -> int | None:
    """Peak RSS while running ``step`` ``repeat`` times, above the RSS before (Linux only).

    Writing ``5`` to ``/proc/self/clear_refs`` resets the peak (``VmHWM``) to the current RSS.
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = _proc_status("VmRSS")
        for _ in range(repeat):
            step()
        return _proc_status("VmHWM") - before
    except OSError:
        return None


def _proc_status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(f"/proc/self/status has no {field}")


def _baseline_rss(sweep: Sweep, case: str, xs: dict[str, Any]) -> int:
    """Peak RSS of a process that only builds the program and its inputs."""
    program = cases.build(case, sweep.config(xs), sweep.device, sweep.torch_dtype)
    args = (program.make_args(), program.make_args())  # eager's and the compiled call's
    del args
    return _max_rss()


def _failed(sweep: Sweep, case: str, xs: dict[str, Any], strategy: str, why: str) -> Record:
    cache_bytes = sweep.config(xs).cache_bytes(sweep.torch_dtype)
    return Record(case, strategy, dict(xs), cache_bytes, correct=False, error=why)


# -- isolation: a forked child per point ---------------------------------------------------------


def _in_child(fn: Callable[[], dict], timeout_s: float) -> tuple[dict | None, str]:
    """Run ``fn`` in a forked child; ``(its JSON result, "")`` or ``(None, why it died)``."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns
        os.close(read_fd)
        code = 0
        try:
            payload = json.dumps(fn()).encode()
        except BaseException as e:  # noqa: BLE001 - reported to the parent, then exit
            payload, code = json.dumps({"__error__": worker.error_line(e)}).encode(), 1
        with os.fdopen(write_fd, "wb") as out:
            out.write(payload)
        os._exit(code)
    os.close(write_fd)
    chunks, deadline, why = [], time.monotonic() + timeout_s, ""
    with os.fdopen(read_fd, "rb") as pipe:
        while True:
            ready, _, _ = select.select([pipe], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                why = f"timeout ({timeout_s:.0f} s)"
                break
            chunk = os.read(pipe.fileno(), 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if why:
        return None, why
    if os.WIFSIGNALED(status):
        return None, f"crash (signal {os.WTERMSIG(status)})"
    try:
        result = json.loads(b"".join(chunks))
    except json.JSONDecodeError:
        return None, f"crash (exit {os.waitstatus_to_exitcode(status)})"
    if "__error__" in result:
        return None, result["__error__"]
    return result, ""


def _measure_isolated(
    sweep: Sweep, case: str, xs: dict[str, Any], strategy: str, baseline: dict[tuple, int]
) -> Record:
    if not hasattr(os, "fork") or not _forks(sweep):
        return measure_point(sweep, case, xs, strategy)  # the worker is the point's process
    key = (case, tuple(xs.items()))
    if key not in baseline:
        result, _ = _in_child(lambda: {"rss": _baseline_rss(sweep, case, xs)}, sweep.timeout_s)
        baseline[key] = result["rss"] if result else None
    result, why = _in_child(
        lambda: dataclasses.asdict(measure_point(sweep, case, xs, strategy, rss=True)),
        sweep.timeout_s,
    )
    if result is None:
        return _failed(sweep, case, xs, strategy, why)
    record = Record(**result)
    if record.rss_above_baseline is not None and baseline[key] is not None:
        record.rss_above_baseline -= baseline[key]
    return record


def _forks(sweep: Sweep) -> bool:
    """Whether points run in forked children of one worker (CPU), or each in a worker process
    of its own (CUDA: a child forked from a process that has initialised CUDA cannot use it, and
    importing torch's compile stack may initialise it)."""
    return sweep.device == "cpu"


def _worker(spec: dict) -> None:
    sweep = _sweep_from_json(spec["sweep"])
    # Imports the children inherit, so that no point pays for them (no compute: see docstring).
    import torch._dynamo
    import torch._inductor.compile_fx  # noqa: F401

    import autofunc  # noqa: F401
    from autofunc.testing import same_result  # noqa: F401

    baseline: dict[tuple, int] = {}
    for case, xs, strategy in spec["points"]:
        worker.start(point_key(case, xs, strategy))
        worker.result(dataclasses.asdict(_measure_isolated(sweep, case, xs, strategy, baseline)))


def _sweep_from_json(d: dict) -> Sweep:
    d = dict(d)
    for name in ("x_names", "lines", "cases"):
        d[name] = tuple(d[name])
    d["x_vals"] = tuple(tuple(v) for v in d["x_vals"])
    return Sweep(**d)


# -- the runner ----------------------------------------------------------------------------------


def run_sweep(
    sweep: Sweep,
    progress: Callable[[str], None] = print,
    on_record: Callable[[list[Record]], None] | None = None,
) -> list[Record]:
    """Measure every point of ``sweep``; ``progress`` gets one line per point, and
    ``on_record`` (if given) the records so far after each point, so that a run cut short
    keeps what it measured.

    With ``sweep.isolate`` the points run in a worker subprocess (a forked child each on CPU, a
    worker each on CUDA, see :func:`_forks`); otherwise in this process, one after the other
    (for tests).
    """
    points = [(case, xs, strategy) for case, xs in sweep.points() for strategy in sweep.lines]
    records: list[Record] = []
    if on_record is not None:
        line_only = progress

        def progress(line: str) -> None:  # every point's line comes right after its record
            line_only(line)
            on_record(_with_footprints(list(records)))

    if not sweep.isolate:
        for case, xs, strategy in points:
            records.append(measure_point(sweep, case, xs, strategy))
            progress(progress_line(records[-1], len(records), len(points)))
        return _with_footprints(records)
    todo = list(points)
    while todo:
        batch = todo if _forks(sweep) else todo[:1]
        in_flight, returncode = _run_worker(sweep, batch, records, progress, len(points))
        done = {r.key for r in records}
        todo = [p for p in todo if point_key(*p) not in done]
        if in_flight is not None:  # the worker itself died inside this point
            case, xs, strategy = next(p for p in todo if point_key(*p) == in_flight)
            records.append(_failed(sweep, case, xs, strategy, f"crash (worker exit {returncode})"))
            progress(progress_line(records[-1], len(records), len(points)))
            todo = [p for p in todo if point_key(*p) != in_flight]
        elif todo and (_forks(sweep) or point_key(*batch[0]) not in done):
            raise RuntimeError(f"bench worker exited {returncode} with {len(todo)} points left")
    return _with_footprints(records)


def _with_footprints(records: list[Record]) -> list[Record]:
    """Fill ``footprint_above_eager`` from the eager record of the same case and sizes."""
    eager = {
        (r.case, tuple(r.x.items())): r.footprint
        for r in records
        if r.strategy == "eager" and r.footprint is not None
    }
    for r in records:
        base = eager.get((r.case, tuple(r.x.items())))
        if r.footprint is not None and base is not None:
            r.footprint_above_eager = r.footprint - base
    return records


def _run_worker(
    sweep: Sweep, todo: list, records: list[Record], progress: Callable, total: int
) -> tuple[str | None, int]:
    def on_result(value: dict) -> None:
        records.append(Record(**value))
        progress(progress_line(records[-1], len(records), total))

    spec = {"sweep": dataclasses.asdict(sweep), "points": todo}
    done = worker.run("autofunc.bench.run", spec, on_result=on_result)
    if done.returncode != 0 and not done.results and done.in_flight is None:
        raise RuntimeError(f"bench worker failed (exit {done.returncode}):\n{done.stderr}")
    return done.in_flight, done.returncode


def progress_line(r: Record, index: int, total: int) -> str:
    if r.error:
        status = f"ERROR {r.error}"
    else:
        status = (
            f"{'ok' if r.correct else 'WRONG'} clones={r.clones} "
            f"+mem={r.mem_above_eager} B time={_fmt(r.time_ratio, '.2f')}x "
            f"compile={_fmt(r.compile_s, '.1f')}s"
        )
    return f"[bench {index}/{total}] {r.key}: {status} ({_fmt(r.wall_s, '.1f')}s)"


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        _worker(worker.read_spec())
    else:
        sys.exit("usage: python -m autofunc.bench.run --worker < spec.json (use `autofunc bench`)")
