"""Profile autofunc's re-inplace pass alone on the decoder of ``autofunc bench-compile``.

Compiles the ``--layers``-layer decoder with Inductor once. When the post-grad pass is reached,
the pass runs ``--repeat`` times on copies of the graph (fake values shared, the cyclic GC off
unless ``--gc``), then once on the graph itself, and the compile stops there (``--finish`` lets
it go on). Options:

* ``--profile F``: the run on the graph itself under cProfile, stats to F;
* ``--sample F``: the same under pyinstrument (if installed; a development tool), text to F
  (``--sample-interval S``: seconds between samples; 1e-3 distorts the timings less);
* ``--objects``: objects the cyclic GC tracks, net, over each timed copy;
* ``--gc-events``: let the whole compile run with the GC on and print when each full (oldest
  generation) collection fired, how long it took and in which phase, beside the pass's window;
* ``--instructions``: the machine instructions the pass executes per HOP node, counted by
  valgrind's callgrind over ``--repeat`` copies (after one warm-up copy, the GC off): the same
  count to a few hundredths of a percent from run to run, where wall time on a shared 2-core
  machine varies by 20-40%. A change that removes work shows here even when no timing can
  resolve it; it does not show cache misses (the pass touches much code per node, so the same
  work costs several times more inside a compile than in a hot loop). Needs ``valgrind`` and
  ``callgrind_control`` on the PATH; the compile runs under valgrind (about a minute at 4
  layers).

    python -m tools.profile_pass --layers 128 --repeat 3 [--profile /tmp/pass.prof]
    python -m tools.profile_pass --layers 128 --gc-events
    python -m tools.profile_pass --layers 4 --repeat 5 --instructions

For measurement only; ``autofunc bench-compile`` gives the figures that go in results/.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import torch
import torch._functorch.config as functorch_config
import torch._inductor.config as inductor_config
from torch import fx
from torch.fx._lazy_graph_module import _LazyGraphModule

import autofunc
from autofunc.backends.inductor import glue as inductor
from autofunc.bench.compile_time import CONFIG
from autofunc.bench.model import MUTABLE_OPS, ModelConfig, TinyDecoder, make_inputs
from autofunc.hops.adapter import mutation_targets


def _copy(gm: fx.GraphModule) -> fx.GraphModule:
    graph = fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    return _LazyGraphModule(gm, graph)  # recompiles lazily, as Inductor's own module


def _sampler(interval: float):
    from pyinstrument import Profiler  # a development tool, not a dependency

    return Profiler(interval=interval)


def _time_copies(args: argparse.Namespace, gm: fx.GraphModule, kwargs: dict, hops: int) -> None:
    per = []
    for _ in range(args.repeat):
        copy = _copy(gm)
        gc.collect()
        if not args.gc:
            gc.disable()
        before = len(gc.get_objects()) if args.objects else 0
        t0 = time.perf_counter()
        inductor.reinplace(copy, **kwargs)
        per.append(1e3 * (time.perf_counter() - t0) / hops)
        if args.objects:
            print(f"objects the GC tracks: {len(gc.get_objects()) - before:+d} over the pass")
        gc.enable()
    if per:
        print(
            f"layers={args.layers} hops={hops} nodes={len(gm.graph.nodes)} pass ms/hop: "
            + " ".join(f"{p:.3f}" for p in per)
            + f" (median {statistics.median(per):.3f}; gc {'on' if args.gc else 'off'})"
        )


def _run_profiled(args: argparse.Namespace, gm: fx.GraphModule, kwargs: dict, hops: int) -> Any:
    gc.collect()
    if not args.gc:
        gc.disable()
    prof = cProfile.Profile() if args.profile else None
    sampler = _sampler(args.sample_interval) if args.sample else None
    t0 = time.perf_counter()
    if prof:
        prof.enable()
    if sampler:
        sampler.start()
    report = inductor.reinplace(gm, **kwargs)
    if prof:
        prof.disable()
        prof.dump_stats(args.profile)
    if sampler:
        sampler.stop()
        with open(args.sample, "w") as f:
            f.write(sampler.output_text(unicode=False, show_all=False))
    print(f"the pass on the graph itself: {1e3 * (time.perf_counter() - t0) / hops:.3f} ms/hop")
    gc.enable()
    return report


def _count_copies(args: argparse.Namespace, gm: fx.GraphModule, kwargs: dict, hops: int) -> None:
    """Inside callgrind (``--instructions``): instrument only the pass on ``--repeat`` copies."""
    inductor.reinplace(_copy(gm), **kwargs)  # warm-up: first-use costs are not the pass's
    copies = [_copy(gm) for _ in range(args.repeat)]
    gc.collect()
    gc.disable()
    pid = str(os.getpid())
    subprocess.run(["callgrind_control", "-i", "on", pid], check=True, capture_output=True)
    for copy in copies:
        inductor.reinplace(copy, **kwargs)
    subprocess.run(["callgrind_control", "-i", "off", pid], check=True, capture_output=True)
    print(f"{_COUNTED} hops={hops * args.repeat}", flush=True)


_COUNTED = "autofunc-pass-counted"


def _instructions(args: argparse.Namespace) -> None:
    """Run this tool under callgrind (``--instructions``) and print instructions per HOP."""
    missing = [t for t in ("valgrind", "callgrind_control") if shutil.which(t) is None]
    if missing:
        raise SystemExit(f"--instructions needs {' and '.join(missing)} on the PATH")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            "valgrind", "--tool=callgrind", "--instr-atstart=no",
            f"--callgrind-out-file={os.path.join(tmp, 'callgrind.out')}",
            sys.executable, "-m", "tools.profile_pass", "--layers", str(args.layers),
            "--repeat", str(args.repeat), "--_counted-child",
        ]  # fmt: skip
        run = subprocess.run(cmd, capture_output=True, text=True)
    out = run.stdout + run.stderr
    hops = re.search(rf"{_COUNTED} hops=(\d+)", out)
    total = re.search(r"Collected : (\d+)", out)
    if run.returncode or hops is None or total is None:
        raise SystemExit(f"callgrind run failed (exit {run.returncode}):\n{out[-3000:]}")
    n, ir = int(hops.group(1)), int(total.group(1))
    print(
        f"layers={args.layers} copies={args.repeat} hops={n} instructions={ir} "
        f"per hop={ir / n:,.0f}"
    )


class _GcEvents:
    """Full collections during the compile, with the phase they fired in."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.phase = "compile"
        self.events: list[tuple[float, float, str]] = []
        self._start = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, what: str, info: dict) -> None:
        if info["generation"] != 2:
            return
        if what == "start":
            self._start = time.perf_counter()
        else:
            now = time.perf_counter()
            self.events.append((self._start - self.t0, now - self._start, self.phase))

    def report(self, window: tuple[float, float]) -> None:
        print(f"the pass ran from {window[0]:.2f} s to {window[1]:.2f} s of the compile")
        for at, took, phase in self.events:
            print(f"  full collection at {at:6.2f} s, {1e3 * took:6.1f} ms, during {phase}")


def main() -> None:
    ap = argparse.ArgumentParser(
        prog="python -m tools.profile_pass", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--layers", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", default="")
    ap.add_argument("--sample", default="", help="a pyinstrument report of it (text) to here")
    ap.add_argument("--sample-interval", type=float, default=0.0002, help="seconds (pyinstrument)")
    ap.add_argument("--objects", action="store_true", help="count objects the GC tracks")
    ap.add_argument("--finish", action="store_true", help="finish the compile afterwards")
    ap.add_argument("--gc", action="store_true", help="leave the cyclic GC on while timing")
    ap.add_argument("--gc-events", action="store_true", help="full collections of the compile")
    ap.add_argument(
        "--instructions", action="store_true", help="instructions per HOP (valgrind)"
    )
    ap.add_argument("--_counted-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.instructions:
        return _instructions(args)

    original = inductor.reinplace
    events = _GcEvents() if args.gc_events else None
    window = [0.0, 0.0]

    def hooked(gm: fx.GraphModule, **kwargs):
        inductor.reinplace = original
        if events is not None:  # the real pass only, the GC left as it is
            window[0] = time.perf_counter() - events.t0
            events.phase = "the autofunc pass"
            try:
                return original(gm, **kwargs)
            finally:
                events.phase = "compile"
                window[1] = time.perf_counter() - events.t0
        hops = sum(1 for n in gm.graph.nodes if n.target in mutation_targets())
        if args._counted_child:
            _count_copies(args, gm, kwargs, hops)
            os._exit(0)
        _time_copies(args, gm, kwargs, hops)
        report = _run_profiled(args, gm, kwargs, hops)
        if args.finish:
            return report
        sys.stdout.flush()
        os._exit(0)  # the rest of the compile is not measured

    inductor.reinplace = hooked
    for op in MUTABLE_OPS:
        autofunc.register(op, strategy="v2")
    cfg = ModelConfig(layers=args.layers, **CONFIG)
    model = TinyDecoder(cfg, "cpu")
    with (
        inductor_config.patch(fx_graph_cache=False),
        functorch_config.patch(enable_autograd_cache=False),
    ):
        torch.compile(model, backend="inductor")(*make_inputs(cfg, "cpu").args())
    if events is not None:
        events.report((window[0], window[1]))


if __name__ == "__main__":
    main()
