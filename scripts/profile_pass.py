"""Profile autofunc's re-inplace pass alone on the decoder of ``autofunc bench-compile``.

Compiles the ``--layers``-layer decoder with Inductor once; when the post-grad pass is reached,
copies the graph ``--repeat`` times (fake values shared) and runs the pass on each copy, timing
it with and without the cyclic GC running, then lets the compile go on. With ``--profile F`` the
pass on the graph itself (after the copies) runs under cProfile and its stats go to F; with
``--sample F`` under pyinstrument (if installed), its call tree as text to F.

    python scripts/profile_pass.py --layers 128 --repeat 3 [--profile /tmp/pass.prof]

For measurement only; ``autofunc bench-compile`` gives the figures that go in results/.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import sys
import gc
import statistics
import time

import torch
import torch._functorch.config as functorch_config
import torch._inductor.config as inductor_config
import torch.fx as fx
from torch.fx._lazy_graph_module import _LazyGraphModule

import autofunc
from autofunc import inductor
from autofunc.bench.compile_time import CONFIG
from autofunc.bench.model import MUTABLE_OPS, ModelConfig, TinyDecoder, make_inputs
from autofunc.hops.adapter import mutation_targets


def _copy(gm: fx.GraphModule) -> fx.GraphModule:
    graph = fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return _LazyGraphModule(gm, graph)  # recompiles lazily, as Inductor's own module


def _sampler():
    from pyinstrument import Profiler  # a development tool, not a dependency

    return Profiler(interval=0.0002)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", default="")
    ap.add_argument("--sample", default="", help="a pyinstrument report of it (text) to here")
    ap.add_argument("--objects", action="store_true", help="count objects the GC tracks")
    ap.add_argument("--finish", action="store_true", help="finish the compile afterwards")
    ap.add_argument("--gc", action="store_true", help="leave the cyclic GC on while timing")
    args = ap.parse_args()

    original = inductor.reinplace
    timings: list[float] = []

    def timed(gm: fx.GraphModule, **kwargs):
        hops = sum(1 for n in gm.graph.nodes if n.target in mutation_targets())
        for i in range(args.repeat):
            copy = _copy(gm)
            gc.collect()
            if not args.gc:
                gc.disable()
            prof = None
            before = len(gc.get_objects()) if args.objects else 0
            t0 = time.perf_counter()
            if prof:
                prof.enable()
            original(copy, **kwargs)
            if prof:
                prof.disable()
                prof.dump_stats(args.profile)
            timings.append(time.perf_counter() - t0)
            if args.objects:
                print(f"objects the GC tracks: {len(gc.get_objects()) - before:+d} over the pass")
            gc.enable()
        per = [1e3 * t / hops for t in timings]
        if per:
            print(
                f"layers={args.layers} hops={hops} nodes={len(gm.graph.nodes)} pass ms/hop: "
                + " ".join(f"{p:.3f}" for p in per)
                + f" (median {statistics.median(per):.3f}; gc {'on' if args.gc else 'off'})"
            )
        gc.collect()
        if not args.gc:
            gc.disable()
        prof = cProfile.Profile() if args.profile else None
        sampler = _sampler() if args.sample else None
        t0 = time.perf_counter()
        if prof:
            prof.enable()
        if sampler:
            sampler.start()
        report = original(gm, **kwargs)
        if prof:
            prof.disable()
            prof.dump_stats(args.profile)
        if sampler:
            sampler.stop()
            with open(args.sample, "w") as f:
                f.write(sampler.output_text(unicode=False, show_all=False))
        print(f"the pass on the graph itself: {1e3 * (time.perf_counter() - t0) / hops:.3f} ms/hop")
        gc.enable()
        if args.finish:
            return report
        sys.stdout.flush()
        os._exit(0)  # the rest of the compile is not measured

    inductor.reinplace = timed
    for op in MUTABLE_OPS:
        autofunc.register(op, strategy="v2")
    cfg = ModelConfig(layers=args.layers, **CONFIG)
    model = TinyDecoder(cfg, "cpu")
    with (
        inductor_config.patch(fx_graph_cache=False),
        functorch_config.patch(enable_autograd_cache=False),
    ):
        torch.compile(model, backend="inductor")(*make_inputs(cfg, "cpu").args())


if __name__ == "__main__":
    main()
