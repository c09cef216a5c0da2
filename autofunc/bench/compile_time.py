"""Compile-time cost of re-inplacing as the model grows: autofunc's pass vs the built-in's.

For each layer count ``L`` (``4 * L`` mutable calls, so ``4 * L`` HOP nodes) and each of
``builtin_v2`` and ``autofunc_v2``, two fresh subprocesses sharing a new, empty Inductor cache
compile the decoder: the first cold (kernels built), the second warm (kernels cached; the FX
graph cache is off, so every graph pass runs again). Each times, by wrapping the functions
where Inductor looks them up (for measurement only; ``compile_timers``):

* autofunc: ``autofunc.backends.inductor.glue.reinplace`` (the pass: analysis and rewrite);
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
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

from . import worker
from .compile_timers import PHASES, gc_share, install_timers, phases_of

__all__ = [
    "CONFIG",
    "CompileRecord",
    "format_phases",
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
    # (warm compile) autofunc.backends.inductor.glue.reinplace
    autofunc_pass_s: float | None = None
    builtin_reinplace_s: float | None = None  # (warm) reinplace_inplaceable_ops
    builtin_decompose_s: float | None = None  # (warm) decompose_auto_functionalized
    pass_gc_s: float | None = None  # of pass_s: Python's cyclic GC collecting during the pass
    rule_s: float | None = None  # (warm) the functionalization rule of the mutable-op calls
    gc_s: float | None = None  # (warm) Python's cyclic GC over the whole compile
    full_gcs: int | None = None  # (warm) full (oldest-generation) collections in the compile
    # (warm) the pass's share of the compile's full collections, by the objects it leaves
    # (Note [Who pays for a full collection])
    pass_gc_share_s: float | None = None
    phases: dict = dataclasses.field(default_factory=dict)  # (warm) seconds per compile phase
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


def measure_compile(
    config: str, layers: int, device: str = "cpu", phase: str = "cold"
) -> CompileRecord:
    """Compile the ``layers``-layer decoder under ``config`` once in this process and time it
    (as ``cold_s`` or ``warm_s`` per ``phase``) and the re-inplace passes inside it."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from torch._dynamo.utils import compilation_time_metrics

    import autofunc

    from ..testing import run_against_eager
    from .model import MUTABLE_OPS, ModelConfig, TinyDecoder, make_inputs

    record = CompileRecord(config, layers)
    timers = install_timers(config)
    compilation_time_metrics.clear()
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
            setattr(record, f"{phase}_s", check.seconds - timers.overhead_s)
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
        record.rule_s = timers.seconds.get(
            "autofunc_rule" if config == "autofunc_v2" else "builtin_rule", 0.0
        )
        record.gc_s, record.full_gcs = timers.gc_total, len(timers.full_gcs)
        counted = [timers.objects[k] for k in keys if k in timers.objects]
        if counted:
            record.pass_gc_share_s = gc_share(
                counted[0][0], sum(left for _, left in counted), timers.full_gcs
            )
        record.phases = phases_of(compilation_time_metrics)
        if record.phases["post_grad"] is not None:  # the heap was counted inside that phase
            record.phases["post_grad"] -= timers.overhead_s
        key = "autofunc_pass" if config == "autofunc_v2" else "builtin_reinplace"
        record.hops = timers.hops.get(key, 0)
        record.nodes = timers.nodes.get(key, 0)
    except Exception as e:  # noqa: BLE001 - a failed compile is a result
        record.error = worker.error_line(e)
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


_TIMINGS = ("warm_s", "autofunc_pass_s", "builtin_reinplace_s", "builtin_decompose_s", "pass_gc_s",
            "rule_s", "gc_s", "full_gcs", "pass_gc_share_s")  # fmt: skip


def median_record(records: list[CompileRecord]) -> CompileRecord:
    """One record for the repetitions of one (config, layer count): each timing (and each
    phase) is the median of its values (taken field by field), the cold time and the counts are
    the first run's; a failed or wrong repetition makes the whole record failed or wrong."""
    first = records[0]
    failed = next((r for r in records if r.error), None)
    if failed is not None:
        return failed
    out = dataclasses.replace(first, runs=len(records))
    out.correct = all(r.correct for r in records)
    for name in _TIMINGS:
        values = [getattr(r, name) for r in records if getattr(r, name) is not None]
        setattr(out, name, statistics.median(values) if values else None)
    out.phases = {}
    for phase in dict.fromkeys(p for r in records for p in r.phases):
        values = [r.phases[phase] for r in records if r.phases.get(phase) is not None]
        out.phases[phase] = statistics.median(values) if values else None
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
        "pass = autofunc.backends.inductor.glue.reinplace (analysis + rewrite); both from the "
        "warm compile, "
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


def format_phases(records: list[CompileRecord]) -> str:
    """Where each warm compile's time goes (``phases_of``), and the pass's cost per HOP node
    three ways: without GC, with its share of the compile's full collections, with the
    collections that happened to run inside it."""
    from .report import format_columns

    header = ["layers", "config", "warm s", *PHASES, "rule", "gc (full)",
              "pass/hop: no gc", "+ gc share", "+ gc inside"]  # fmt: skip
    body = []
    for r in sorted(records, key=lambda r: (r.layers, r.config)):
        if r.error:
            continue
        hops, no_gc = r.hops, None if r.pass_s is None else r.pass_s - (r.pass_gc_s or 0.0)
        share = None if no_gc is None or r.pass_gc_share_s is None else no_gc + r.pass_gc_share_s
        row = [str(r.layers), r.config, _f(r.warm_s, ".1f")]
        row += [_f(r.phases.get(p), ".2f") for p in PHASES]
        row += [_f(r.rule_s, ".2f"), f"{_f(r.gc_s, '.2f')} ({_f(r.full_gcs, '.0f')})"]
        row += [_ms(no_gc, hops), _ms(share, hops), _ms(r.pass_s, hops)]
        body.append(row)
    out = format_columns(header, body)
    out.append(
        "seconds of the warm compile per phase (Dynamo's own timers): aot = AOTAutograd with "
        "functionalization, rule = the part of it in the functionalization rule of the "
        "mutable-op calls, post_grad includes the re-inplace passes, codegen = scheduling, "
        "code generation and loading; gc = Python's cyclic GC over the compile (full "
        "collections). pass/hop in ms: gc share = the pass's share of the full collections by "
        "the objects it leaves (Note [Who pays for a full collection]), gc inside = the "
        "collections that ran during the pass."
    )
    return "\n".join(out)


def _f(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _ms(seconds: float | None, per: int | None = 1) -> str:
    if seconds is None or not per:
        return "-"
    return f"{1e3 * seconds / per:.2f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if not a or not b else f"{a / b:.2f}"


def main(args: argparse.Namespace) -> int:
    """``autofunc bench-compile``, its arguments parsed and checked by :mod:`autofunc.cli`:
    ``layers`` (``"8,32"``), ``timeout``, ``budget``, ``device``, ``repeat``, ``json``."""
    layer_counts = [int(x) for x in args.layers.split(",") if x]
    records = run(
        layer_counts, args.timeout, budget_s=args.budget, device=args.device, repeat=args.repeat
    )
    print(format_table(records))
    print()
    print(format_phases(records))
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
    if sys.argv[1:] == ["--worker"]:  # the spec comes on stdin (bench.worker)
        _worker(worker.read_spec())
    else:
        sys.exit(
            "usage: python -m autofunc.bench.compile_time --worker < spec.json "
            "(use `autofunc bench-compile`)"
        )
