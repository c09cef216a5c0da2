"""Compile-time cost of re-inplacing as the model grows: autofunc's pass vs the built-in's.

For each layer count ``L`` (``4 * L`` mutable calls, so ``4 * L`` HOP nodes) and each of
``builtin_v2`` and ``autofunc_v2``, two fresh subprocesses sharing a new, empty Inductor cache
compile the decoder: the first cold (kernels built), the second warm (kernels cached; the FX
graph cache is off, so every graph pass runs again). Each times, by wrapping the functions
where Inductor looks them up (for measurement only):

* autofunc: ``autofunc.inductor.reinplace`` (the pass: analysis and rewrite);
* built-in: ``post_grad.reinplace_inplaceable_ops`` (its re-inplace analysis) and
  ``post_grad.decompose_auto_functionalized`` (decomposing its HOPs), which also run, with
  nothing to do for the HOPs, under autofunc.

With ``--repeat N`` every (config, layer count) is compiled warm N times, the repetitions
interleaved (all configs and depths once, then again), and each timing is the median of its N
values: on a shared machine whose speed drifts over minutes one run of each is not a
measurement. The kernel cache of a (config, layer count) is built once, by its cold compile.

    autofunc bench-compile [--layers 8,32,64,128] [--repeat N] [--json PATH] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

from . import worker

__all__ = [
    "CONFIG",
    "CompileRecord",
    "format_table",
    "main",
    "measure_compile",
    "median_record",
    "run",
]

CONFIGS = ("builtin_v2", "autofunc_v2")

# Small widths: only the number of layers (graph size) should drive the cost.
CONFIG = {
    "hidden": 32,
    "heads": 2,
    "kv_heads": 1,
    "head_dim": 16,
    "num_blocks": 4,
    "block_size": 16,
    "batch": 2,
    "intermediate": 32,
    "max_position": 64,
}


@dataclasses.dataclass
class CompileRecord:
    config: str
    layers: int
    hops: int | None = None  # HOP nodes seen by the re-inplace pass of this config
    nodes: int | None = None  # all nodes of the graph(s) that pass saw
    cold_s: float | None = None  # first compile, empty kernel cache
    warm_s: float | None = None  # second compile, kernels cached, every graph pass run again
    autofunc_pass_s: float | None = None  # (warm compile) autofunc.inductor.reinplace
    builtin_reinplace_s: float | None = None  # (warm) reinplace_inplaceable_ops
    builtin_decompose_s: float | None = None  # (warm) decompose_auto_functionalized
    pass_gc_s: float | None = None  # of pass_s: Python's cyclic GC collecting during the pass
    correct: bool | None = None
    error: str = ""
    runs: int = 1  # warm compiles the timings are the medians of

    @property
    def pass_s(self) -> float | None:
        """The time this config spends re-inplacing its HOPs."""
        if self.config.startswith("autofunc"):
            return self.autofunc_pass_s
        if self.builtin_reinplace_s is None or self.builtin_decompose_s is None:
            return None
        return self.builtin_reinplace_s + self.builtin_decompose_s


class _Timers:
    """Wall time spent in wrapped functions; a nested (recursive) call is not counted twice.

    Also the part of it spent in Python's cyclic garbage collector: a full collection walks the
    whole heap (every graph Dynamo and Inductor hold), so whichever pass it happens to interrupt
    looks slow by a few hundred ms at one layer count and not at the next.
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.gc_seconds: dict[str, float] = defaultdict(float)
        self.hops: dict[str, int] = defaultdict(int)
        self.nodes: dict[str, int] = defaultdict(int)
        self._active: str | None = None
        self._gc_start = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        if self._active is None:
            return
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.gc_seconds[self._active] += time.perf_counter() - self._gc_start

    def wrap(
        self, module: Any, name: str, key: str, count: Callable[..., tuple[int, int]]
    ) -> None:
        """Time ``module.name`` under ``key``; ``count(*args)`` gives its graph's (HOP nodes,
        all nodes)."""
        original = getattr(module, name)
        depth = 0

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            nonlocal depth
            if depth:
                return original(*args, **kwargs)
            depth += 1
            hops, nodes = count(*args, **kwargs)
            self.hops[key] += hops
            self.nodes[key] += nodes
            self._active = key
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[key] += time.perf_counter() - t0
                self._active = None
                depth -= 1

        setattr(module, name, timed)

    def clear(self) -> None:
        self.seconds.clear()
        self.gc_seconds.clear()
        self.hops.clear()
        self.nodes.clear()


def _count(graph: torch.fx.Graph, targets: tuple) -> tuple[int, int]:
    """(calls of ``targets``, all nodes) in ``graph``."""
    hops = sum(1 for n in graph.nodes if n.op == "call_function" and n.target in targets)
    return hops, len(graph.nodes)


def _install_timers() -> _Timers:
    from torch._higher_order_ops.auto_functionalize import (
        auto_functionalized,
        auto_functionalized_v2,
    )
    from torch._inductor.fx_passes import post_grad

    from .. import inductor
    from ..hops.adapter import mutation_targets

    builtin, ours = (auto_functionalized, auto_functionalized_v2), mutation_targets()
    timers = _Timers()
    timers.wrap(inductor, "reinplace", "autofunc_pass", lambda gm, **_: _count(gm.graph, ours))
    timers.wrap(
        post_grad,
        "reinplace_inplaceable_ops",
        "builtin_reinplace",
        lambda *args: _count(args[-1], builtin),
    )
    timers.wrap(
        post_grad, "decompose_auto_functionalized", "builtin_decompose", lambda graph: (0, 0)
    )
    return timers


def measure_compile(
    config: str, layers: int, device: str = "cpu", phase: str = "cold"
) -> CompileRecord:
    """Compile the ``layers``-layer decoder under ``config`` once in this process and time it
    (as ``cold_s`` or ``warm_s`` per ``phase``) and the re-inplace passes inside it."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    import autofunc

    from ..testing import run_against_eager
    from .model import MUTABLE_OPS, ModelConfig, TinyDecoder, make_inputs

    record = CompileRecord(config, layers)
    timers = _install_timers()
    regs = (
        [autofunc.register(op, strategy="v2") for op in MUTABLE_OPS]
        if config == "autofunc_v2"
        else []
    )
    cfg = ModelConfig(layers=layers, **CONFIG)
    model = TinyDecoder(cfg, device)
    try:
        with (
            inductor_config.patch(fx_graph_cache=False, enable_auto_functionalized_v2=True),
            functorch_config.patch(enable_autograd_cache=False),
        ):
            check = run_against_eager(
                model,
                torch.compile(model, backend="inductor"),
                make_inputs(cfg, device).args(),
                atol=1e-4,
                rtol=1e-4,
                sync=torch.cuda.synchronize if device.startswith("cuda") else None,
            )
            setattr(record, f"{phase}_s", check.seconds)
        record.correct = check.correct
        record.autofunc_pass_s = timers.seconds.get("autofunc_pass", 0.0)
        record.builtin_reinplace_s = timers.seconds.get("builtin_reinplace", 0.0)
        record.builtin_decompose_s = timers.seconds.get("builtin_decompose", 0.0)
        keys = (
            ("autofunc_pass",)
            if config == "autofunc_v2"
            else ("builtin_reinplace", "builtin_decompose")
        )
        record.pass_gc_s = sum(timers.gc_seconds.get(k, 0.0) for k in keys)
        key = "autofunc_pass" if config == "autofunc_v2" else "builtin_reinplace"
        record.hops = timers.hops.get(key, 0)
        record.nodes = timers.nodes.get(key, 0)
    except Exception as e:  # noqa: BLE001 - a failed compile is a result
        text = str(e).strip()
        record.error = f"{type(e).__name__}: {text.splitlines()[0][:300] if text else ''}"
    finally:
        for r in regs:
            r.remove()
    return record


def _run_one(
    config: str, layers: int, timeout_s: float, device: str, cache_dir: str, cold: bool
) -> CompileRecord:
    """One warm compile in a fresh subprocess, preceded (``cold``) by the cold compile that fills
    the Inductor cache ``cache_dir``. Pass times are the warm run's."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache_dir, "TRITON_CACHE_DIR": cache_dir}
    first = None
    if cold:
        first = _subprocess(config, layers, timeout_s, device, "cold", env)
        if first.error:
            return first
    warm = _subprocess(config, layers, timeout_s, device, "warm", env)
    if first is not None:
        warm.cold_s = first.cold_s
        warm.correct = bool(first.correct and warm.correct)
    return warm


_TIMINGS = ("warm_s", "autofunc_pass_s", "builtin_reinplace_s", "builtin_decompose_s", "pass_gc_s")


def median_record(records: list[CompileRecord]) -> CompileRecord:
    """One record for the repetitions of one (config, layer count): each timing is the median
    of its values (taken field by field), the cold time and the counts are the first run's; a
    failed or wrong repetition makes the whole record failed or wrong."""
    first = records[0]
    failed = next((r for r in records if r.error), None)
    if failed is not None:
        return failed
    out = dataclasses.replace(first, runs=len(records))
    out.correct = all(r.correct for r in records)
    for name in _TIMINGS:
        values = [getattr(r, name) for r in records if getattr(r, name) is not None]
        setattr(out, name, statistics.median(values) if values else None)
    return out


def _subprocess(
    config: str, layers: int, timeout_s: float, device: str, phase: str, env: dict
) -> CompileRecord:
    spec = {"config": config, "layers": layers, "device": device, "phase": phase}
    done = worker.run("autofunc.bench.compile_time", spec, env=env, timeout_s=timeout_s)
    if done.timed_out:
        return CompileRecord(config, layers, error=f"{phase}: timeout ({timeout_s:.0f} s)")
    if done.results:
        return CompileRecord(**done.results[-1])
    return CompileRecord(
        config, layers, error=f"{phase}: crash (exit {done.returncode}): {done.stderr[-300:]}"
    )


def _worker(spec: dict) -> None:
    worker.start(f"{spec['config']} L={spec['layers']} {spec['phase']}")
    record = measure_compile(spec["config"], spec["layers"], spec["device"], spec["phase"])
    worker.result(dataclasses.asdict(record))


def run(
    layer_counts: list[int],
    timeout_s: float = 600.0,
    progress: Callable[[str], None] = print,
    budget_s: float | None = None,
    device: str = "cpu",
    repeat: int = 1,
) -> list[CompileRecord]:
    """Every config at every layer count, smallest first, ``repeat`` times interleaved (see the
    module docstring); one record per (config, layer count). Stops starting new layer counts
    (first repetition) or new repetitions once ``budget_s`` seconds have passed, and returns the
    records of what ran."""
    runs: dict[tuple[str, int], list[CompileRecord]] = {}
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="autofunc-compile-") as root:
        for rep in range(repeat):
            for layers in layer_counts:
                if budget_s is not None and time.perf_counter() - t_start > budget_s:
                    progress(f"[bench-compile] budget of {budget_s:.0f} s spent; stopping")
                    return [median_record(v) for v in runs.values()]
                for config in CONFIGS:
                    done = runs.setdefault((config, layers), [])
                    if done and done[0].error:
                        continue
                    cache_dir = os.path.join(root, f"{config}-{layers}")
                    os.makedirs(cache_dir, exist_ok=True)
                    t0 = time.perf_counter()
                    r = _run_one(config, layers, timeout_s, device, cache_dir, cold=not done)
                    done.append(r)
                    progress(
                        f"[bench-compile] L={layers} {config} run {rep + 1}/{repeat}: "
                        + (
                            r.error
                            or (f"cold {r.cold_s:.1f}s " if r.cold_s is not None else "")
                            + f"warm {r.warm_s:.1f}s pass {1e3 * (r.pass_s or 0):.1f}ms "
                            f"(gc {1e3 * (r.pass_gc_s or 0):.1f}ms) hops={r.hops} "
                            f"correct={r.correct}"
                        )
                        + f" ({time.perf_counter() - t0:.0f}s)"
                    )
    return [median_record(v) for v in runs.values()]


def format_table(records: list[CompileRecord]) -> str:
    by = {(r.config, r.layers): r for r in records}
    header = ["layers", "hops", "nodes", "builtin pass ms", "gc", "/hop", "/hop-gc",
              "autofunc pass ms", "gc", "/hop", "/hop-gc", "warm s b/a", "ratio", "cold s b/a",
              "ratio"]  # fmt: skip
    body = []
    for layers in dict.fromkeys(r.layers for r in records):
        b, a = by.get(("builtin_v2", layers)), by.get(("autofunc_v2", layers))
        hops = next((r.hops for r in (a, b) if r is not None and r.hops), None)
        nodes = next((r.nodes for r in (a, b) if r is not None and r.nodes), None)
        row = [str(layers), _f(hops, "d"), _f(nodes, "d")]
        for r in (b, a):
            no_gc = None if r is None or r.pass_s is None else r.pass_s - (r.pass_gc_s or 0.0)
            row += [_ms(r and r.pass_s), _ms(r and r.pass_gc_s), _ms(r and r.pass_s, hops)]
            row += [_ms(no_gc, hops)]
        for attr in ("warm_s", "cold_s"):
            bs, as_ = getattr(b, attr, None), getattr(a, attr, None)
            row += [f"{_f(bs, '.1f')}/{_f(as_, '.1f')}", _ratio(as_, bs)]
        body.append(row)
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

    def line(row: list[str]) -> str:
        return "  ".join(c.rjust(w) for c, w in zip(row, widths))

    out = [line(header), line(["-" * w for w in widths]), *map(line, body)]
    out += [f"  L={r.layers} {r.config}: {r.error}" for r in records if r.error]
    out += [
        f"  L={r.layers} {r.config}: result differs from eager"
        for r in records
        if r.correct is False
    ]
    out.append(
        "builtin pass = reinplace_inplaceable_ops + decompose_auto_functionalized; autofunc "
        "pass = autofunc.inductor.reinplace (analysis + rewrite); both from the warm compile, "
        "gc = the part of it Python's garbage collector took, /hop = the pass per HOP node (gc "
        "included), /hop-gc = without it; nodes = all nodes of the graph the pass saw. "
        "warm/cold: end-to-end first call "
        "(builtin/autofunc) with the kernel cache full/empty, each in a fresh process; "
        "ratio = autofunc / builtin."
    )
    runs = max((r.runs for r in records), default=1)
    if runs > 1:
        out.append(f"warm timings: medians of {runs} interleaved warm compiles per point.")
    return "\n".join(out)


def _f(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _ms(seconds: float | None, per: int | None = 1) -> str:
    if seconds is None or not per:
        return "-"
    return f"{1e3 * seconds / per:.2f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if not a or not b else f"{a / b:.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="autofunc bench-compile", description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="8,32,64,128", help="comma-separated layer counts")
    ap.add_argument("--json", default="", help="write the records here")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per compile subprocess")
    ap.add_argument(
        "--budget",
        type=float,
        default=None,
        help="start no new layer count after this many seconds",
    )
    ap.add_argument("--device", default="cpu", help="cpu (C++ kernels) or cuda (Triton kernels)")
    ap.add_argument(
        "--repeat", type=int, default=1, help="warm compiles per point, interleaved (medians)"
    )
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:  # the spec comes on stdin (bench.worker)
        _worker(worker.read_spec())
        return 0
    layer_counts = [int(x) for x in args.layers.split(",") if x]
    records = run(
        layer_counts, args.timeout, budget_s=args.budget, device=args.device, repeat=args.repeat
    )
    print(format_table(records))
    if args.json:
        from .report import write_json

        write_json(
            args.json,
            records,
            kind="compile_time",
            sweep={
                "layers": layer_counts,
                "model": CONFIG,
                "device": args.device,
                "repeat": args.repeat,
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
