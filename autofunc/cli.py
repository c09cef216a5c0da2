"""The ``autofunc`` command line: ``bench``, ``bench-compile`` and ``explain``.

    autofunc bench [--quick|--full|--gpu] [--json PATH] [--plot PATH] [--cases a,b] [--device D]
    autofunc bench-compile [--layers 8,32,64,128] [--json PATH] [--device cpu|cuda]
    autofunc explain MODULE:FUNCTION [--strategy v1|v2] [--backend inductor|aot_eager]

The only module of autofunc that prints. Benchmark code lives in ``autofunc.bench``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run the command in ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    ap = argparse.ArgumentParser(prog="autofunc", description="autofunc tools")
    sub = ap.add_subparsers(dest="command", required=True)

    bench = sub.add_parser("bench", help="memory/time/correctness sweep vs eager and the built-in")
    which = bench.add_mutually_exclusive_group()
    for name in ("quick", "full", "gpu"):
        which.add_argument(f"--{name}", dest="sweep", action="store_const", const=name)
    bench.add_argument("--json", default="", help="write records (with environment) here")
    bench.add_argument("--plot", default="", help="PNG of memory above eager, drawn from the JSON")
    bench.add_argument("--cases", default="", help="comma-separated cases (default: the sweep's)")
    bench.add_argument("--strategies", default="", help="comma-separated lines (default: all)")
    bench.add_argument(
        "--sizes", default="", help="comma-separated BLOCKSxLAYERS points, e.g. 16x2,64x2"
    )
    bench.add_argument("--device", default="", help="cpu or cuda (default: the sweep's)")
    bench.add_argument("--repeat", type=int, default=0, help="timed steps per point")
    bench.add_argument(
        "--in-process", action="store_true", help="measure in this process (no isolation, no RSS)"
    )

    compile_ = sub.add_parser("bench-compile", help="re-inplace pass cost vs model depth")
    compile_.add_argument("--layers", default="8,32,64,128")
    compile_.add_argument("--json", default="")
    compile_.add_argument("--timeout", type=float, default=600.0)
    compile_.add_argument(
        "--budget",
        type=float,
        default=None,
        help="start no new layer count after this many seconds",
    )
    compile_.add_argument("--device", default="cpu")

    explain = sub.add_parser("explain", help="compile FUNCTION's program and print the report")
    explain.add_argument(
        "target", metavar="MODULE:FUNCTION", help="FUNCTION() returns (fn, args) or (fn, args, ops)"
    )
    explain.add_argument("--strategy", choices=("v1", "v2"), default=None)
    explain.add_argument("--backend", choices=("inductor", "aot_eager"), default="inductor")

    args = ap.parse_args(argv)
    if args.command == "bench":
        return _bench(args)
    if args.command == "bench-compile":
        from .bench import compile_time

        argv2 = ["--layers", args.layers, "--timeout", str(args.timeout), "--device", args.device]
        argv2 += ["--json", args.json] if args.json else []
        argv2 += ["--budget", str(args.budget)] if args.budget is not None else []
        return compile_time.main(argv2)
    return _explain(args)


def _bench(args: argparse.Namespace) -> int:
    from .bench import report, run
    from .bench import sweep as sweeps

    sweep = sweeps.SWEEPS[args.sweep or "quick"]
    changes: dict = {}
    if args.cases:
        changes["cases"] = tuple(args.cases.split(","))
    if args.strategies:
        changes["lines"] = tuple(args.strategies.split(","))
    if args.sizes:
        changes["x_names"] = ("cache_blocks", "layers")
        changes["x_vals"] = tuple(
            tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")
        )
    if args.device:
        changes["device"] = args.device
    if args.repeat:
        changes["repeat"] = args.repeat
    if args.in_process:
        changes["isolate"] = False
    try:
        sweep = sweep.replace(**changes)
    except ValueError as e:
        print(f"autofunc bench: {e}", file=sys.stderr)
        return 2
    if sweep.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print(
                "autofunc bench: --device cuda but torch.cuda.is_available() is False",
                file=sys.stderr,
            )
            return 2
    n = len(sweep.cases) * len(sweep.x_vals) * len(sweep.lines)
    print(f"[bench] sweep {sweep.name}: {n} points on {sweep.device} ({sweep.backend})", flush=True)
    t0 = time.perf_counter()
    records = run.run_sweep(sweep, progress=lambda line: print(line, flush=True))
    print(report.format_table(records))
    print(f"[bench] {n} points in {time.perf_counter() - t0:.0f} s")
    json_path = args.json or (os.path.splitext(args.plot)[0] + ".json" if args.plot else "")
    if json_path:
        report.write_json(json_path, records, sweep)
        print(f"[bench] wrote {json_path}")
    if args.plot:
        report.plot(json_path, args.plot)
        print(f"[bench] wrote {args.plot}")
    return 0


def _explain(args: argparse.Namespace) -> int:
    import autofunc

    module_name, sep, fn_name = args.target.partition(":")
    if not sep or not fn_name:
        print(f"autofunc explain: expected MODULE:FUNCTION, got {args.target!r}", file=sys.stderr)
        return 2
    made = getattr(importlib.import_module(module_name), fn_name)()
    fn, fn_args, ops = (*made, ()) if len(made) == 2 else made
    print(autofunc.explain(fn, *fn_args, strategy=args.strategy, backend=args.backend, ops=ops))
    return 0


if __name__ == "__main__":
    sys.exit(main())
