"""The ``autofunc`` command line: ``bench``, ``bench-compile``, ``bench-kernels``,
``bench-triton`` and ``explain``.

    autofunc bench [--quick|--full|--gpu] [--json PATH] [--plot PATH] [--cases a,b] [--device D]
                   [--mode default|reduce-overhead]
    autofunc bench-compile [--layers 8,32,64,128] [--repeat N] [--json PATH] [--device cpu|cuda]
    autofunc bench-kernels [--quick] [--kernels a,b] [--max-gib G] [--json PATH] [--device D]
    autofunc bench-triton [--layers 2,4,8,16,32] [--cases] [--json PATH] [--device cpu|cuda]
    autofunc explain MODULE:FUNCTION [--strategy v1|v2] [--backend inductor|aot_eager]

The one parser of every user-facing benchmark: each benchmark module takes the parsed
arguments (``main(args)``) and has no parser of its own. Benchmark code lives in
``autofunc.bench``. Every user error (bad arguments, an unwritable output path, a target that
cannot be imported or does not return ``(fn, args)``) is one line on stderr and exit status 2,
found before any work starts: arguments are checked before the benchmark modules are imported.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import time
from typing import Any

__all__ = ["main"]


class _UsageError(Exception):
    """A user error: :func:`main` prints ``autofunc <command>: <message>`` and returns 2."""


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line (no usage block), exit status 2. ``lazy_epilog``: a
    function returning the epilog, called only when the help is printed (it may import what
    parsing must not)."""

    def __init__(self, *args: Any, lazy_epilog: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy_epilog = lazy_epilog

    def format_help(self) -> str:
        if self._lazy_epilog is not None:
            self.epilog = self._lazy_epilog()
        return super().format_help()

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def main(argv: list[str] | None = None) -> int:
    """Run the command in ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    ap = _parser()
    args = ap.parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except _UsageError as e:
        print(f"autofunc {args.command}: {e}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    from . import __version__
    from .bench.configs import CONFIGS

    ap = _Parser(prog="autofunc", description="autofunc tools")
    ap.add_argument("--version", action="version", version=f"autofunc {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)

    bench = sub.add_parser(
        "bench",
        help="memory/time/correctness sweep vs eager and the built-in",
        description="Compile each case with each strategy (a line of the plot), run it, and "
        "compare its result, its memory above eager and its step time with eager's; print a "
        "table and a one-line verdict (autofunc_v2 vs builtin_v2). Each point runs in its own "
        "process unless --in-process. Output folders are created.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        lazy_epilog=_bench_epilog,
    )
    which = bench.add_mutually_exclusive_group()
    sweeps = {
        "quick": "the default: every case at 2 small cache sizes, 2 layers, on CPU",
        "full": "every case at 8 cache sizes (64-4096 blocks) and 2 or 8 layers, on CPU",
        "gpu": "the 32-layer model on CUDA, 256 MiB-8 GiB caches, bf16",
    }
    for name, text in sweeps.items():
        which.add_argument(
            f"--{name}", dest="sweep", action="store_const", const=name, help=text
        )
    bench.add_argument("--json", default="", help="write records (with environment) here")
    bench.add_argument("--plot", default="", help="PNG of memory above eager, drawn from the JSON")
    bench.add_argument(
        "--cases", default="", help="comma-separated cases (default: the sweep's; listed below)"
    )
    bench.add_argument(
        "--strategies",
        default="",
        help=f"comma-separated lines, of {', '.join(CONFIGS)} (default: all; listed below)",
    )
    bench.add_argument(
        "--sizes", default="", help="comma-separated BLOCKSxLAYERS points, e.g. 16x2,64x2"
    )
    bench.add_argument("--device", default="", help="cpu or cuda (default: the sweep's)")
    bench.add_argument("--repeat", type=int, default=0, help="timed steps per point")
    bench.add_argument(
        "--mode",
        choices=("default", "reduce-overhead"),
        default=None,
        help="torch.compile mode (reduce-overhead: CUDA graphs; default: the sweep's)",
    )
    bench.add_argument(
        "--in-process", action="store_true", help="measure in this process (no isolation, no RSS)"
    )

    compile_ = sub.add_parser("bench-compile", help="re-inplace pass cost vs model depth")
    compile_.add_argument("--layers", default="8,32,64,128", help="comma-separated layer counts")
    compile_.add_argument("--json", default="", help="write the records here")
    compile_.add_argument(
        "--timeout", type=float, default=600.0, help="seconds per compile subprocess"
    )
    compile_.add_argument(
        "--budget",
        type=float,
        default=None,
        help="start no new layer count after this many seconds",
    )
    compile_.add_argument(
        "--device", default="cpu", help="cpu (C++ kernels) or cuda (Triton kernels)"
    )
    compile_.add_argument(
        "--repeat", type=int, default=1, help="warm compiles per point, interleaved (medians)"
    )

    kernels = sub.add_parser(
        "bench-kernels", help="each Triton kernel's bandwidth beside a device copy (GPU)"
    )
    kernels.add_argument("--json", default="", help="write the rows and the environment here")
    kernels.add_argument("--kernels", default="", help="comma-separated kernels (default: all)")
    kernels.add_argument("--quick", action="store_true", help="a few small shapes")
    kernels.add_argument(
        "--max-gib",
        type=float,
        default=24.0,
        help="skip attention points whose K/V cache exceeds this many GiB (peak device memory: "
        "about 2.5x the largest K/V kept)",
    )
    kernels.add_argument("--device", default="cuda")

    triton = sub.add_parser(
        "bench-triton", help="user Triton kernels writing kv[l]: bytes per step, PyTorch vs ours"
    )
    triton.add_argument("--layers", default="2,4,8,16,32", help="comma-separated layer counts")
    triton.add_argument(
        "--device", default="cpu", help="cpu (graph allocations) or cuda (measured)"
    )
    triton.add_argument("--json", default="", help="write the rows here")
    triton.add_argument(
        "--cases", action="store_true", help="also the small cases (bytes per program, CPU)"
    )

    explain = sub.add_parser("explain", help="compile FUNCTION's program and print the report")
    explain.add_argument(
        "target",
        metavar="MODULE:FUNCTION",
        help="FUNCTION is a zero-argument factory: FUNCTION() returns (fn, args) or "
        "(fn, args, ops), and explain compiles and runs fn(*args)",
    )
    explain.add_argument("--strategy", choices=("v1", "v2"), default=None)
    explain.add_argument("--backend", choices=("inductor", "aot_eager"), default="inductor")
    return ap


def _bench_epilog() -> str:
    """The valid ``--cases`` and ``--strategies``, one line each (imports the cases: help only)."""
    from .bench.cases import CASES
    from .bench.configs import CONFIGS

    def block(title: str, notes: dict[str, str]) -> list[str]:
        width = max(map(len, notes))
        return [title, *(f"  {name.ljust(width)}  {note}" for name, note in notes.items())]

    lines = block("cases (--cases):", {n: c.note for n, c in CASES.items()})
    lines += block("strategies (--strategies):", {n: c.note for n, c in CONFIGS.items()})
    return "\n".join(lines)


# --- argument checks: each raises _UsageError naming the option and what it got ----------------
def _positive_ints(option: str, text: str, sep: str = ",") -> tuple[int, ...]:
    """``"8,32"`` -> ``(8, 32)``; anything but positive integers is a usage error."""
    try:
        values = tuple(int(v) for v in text.split(sep))
    except ValueError:
        values = ()
    if not values or any(v <= 0 for v in values):
        raise _UsageError(f"{option} must be {sep!r}-separated positive integers, got {text!r}")
    return values


def _sizes(text: str) -> tuple[tuple[int, int], ...]:
    """``"16x2,64x2"`` -> ``((16, 2), (64, 2))`` (BLOCKSxLAYERS points)."""
    try:
        points = tuple(_positive_ints("--sizes", point, sep="x") for point in text.split(","))
    except _UsageError:
        points = ()
    if not points or any(len(p) != 2 for p in points):
        raise _UsageError(
            f"--sizes must be comma-separated BLOCKSxLAYERS points of positive integers, "
            f"e.g. 16x2,64x2; got {text!r}"
        )
    return points  # type: ignore[return-value]


def _check_writable(option: str, path: str) -> None:
    """``path`` can be created or overwritten: it is not a folder, and its folder exists and is
    writable or can be created (its nearest existing ancestor is a writable folder). Checked up
    front so a long run never ends in a failed write; :func:`_make_folders` creates the folder
    once every argument is checked."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise _UsageError(f"{option} {path!r} is a directory, not a file path")
    existing = folder
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise _UsageError(
            f"{option} {path!r}: cannot create directory {folder!r}: {existing!r} is a file"
        )
    if not os.access(existing, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise _UsageError(f"{option} {path!r} is not writable")


def _make_folders(*paths: str) -> None:
    """Create the folder of each output path given (``""``: none), as ``mkdir -p`` would: the
    README's ``--json bench-results/q.json`` works in a fresh clone. Called after every argument
    is checked, so a usage error leaves nothing behind."""
    for path in paths:
        if path:
            folder = os.path.dirname(os.path.abspath(path))
            try:
                os.makedirs(folder, exist_ok=True)
            except OSError as e:
                raise _UsageError(f"cannot create directory {folder!r}: {e.strerror}") from None


def _check_device(option: str, device: str) -> None:
    """``cpu`` or ``cuda[:N]``, and CUDA only where torch sees a GPU."""
    if device == "cpu":
        return
    if device != "cuda" and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise _UsageError(f"{option} must be cpu or cuda[:N], got {device!r}")
    import torch

    if not torch.cuda.is_available():
        raise _UsageError(f"{option} {device} but torch.cuda.is_available() is False")


def _bench(args: argparse.Namespace) -> int:
    sizes = _sizes(args.sizes) if args.sizes else None
    if args.repeat < 0:
        raise _UsageError(f"--repeat must be >= 0, got {args.repeat}")
    json_path = args.json or (os.path.splitext(args.plot)[0] + ".json" if args.plot else "")
    if json_path:
        _check_writable("--json" if args.json else "--plot (its .json)", json_path)
    if args.plot:
        _check_writable("--plot", args.plot)
        if importlib.util.find_spec("matplotlib") is None:
            raise _UsageError("--plot needs matplotlib, which is not installed")
    if args.device:
        _check_device("--device", args.device)

    from .bench import plot, report, run
    from .bench import sweep as sweeps

    sweep = sweeps.SWEEPS[args.sweep or "quick"]
    changes: dict = {}
    if args.cases:
        changes["cases"] = tuple(args.cases.split(","))
    if args.strategies:
        changes["lines"] = tuple(args.strategies.split(","))
    if sizes:
        changes["x_names"] = ("cache_blocks", "layers")
        changes["x_vals"] = sizes
    if args.device:
        changes["device"] = args.device
    if args.repeat:
        changes["repeat"] = args.repeat
    if args.in_process:
        changes["isolate"] = False
    if args.mode is not None:
        changes["mode"] = None if args.mode == "default" else args.mode
    try:
        sweep = sweep.replace(**changes)
    except ValueError as e:
        raise _UsageError(str(e)) from None
    if not args.device:
        _check_device(f"sweep {sweep.name!r} runs on", sweep.device)
    _make_folders(json_path, args.plot)
    n = len(sweep.cases) * len(sweep.x_vals) * len(sweep.lines)
    print(f"[bench] sweep {sweep.name}: {n} points on {sweep.device} ({sweep.backend})", flush=True)
    t0 = time.perf_counter()
    records = run.run_sweep(
        sweep,
        progress=lambda line: print(line, flush=True),
        # the JSON holds every point measured so far: a run cut short keeps them
        on_record=(lambda recs: report.write_json(json_path, recs, sweep)) if json_path else None,
    )
    print(report.format_table(records))
    print(f"[bench] {n} points in {time.perf_counter() - t0:.0f} s")
    if json_path:
        report.write_json(json_path, records, sweep)
        print(f"[bench] wrote {json_path}")
    if args.plot:
        plot.plot(json_path, args.plot)
        print(f"[bench] wrote {args.plot}")
    print(report.verdict(records))
    return 0


def _bench_compile(args: argparse.Namespace) -> int:
    _positive_ints("--layers", args.layers)
    if args.json:
        _check_writable("--json", args.json)
    if args.timeout <= 0 or (args.budget is not None and args.budget < 0):
        raise _UsageError(
            f"--timeout must be > 0 and --budget >= 0, got {args.timeout} and {args.budget}"
        )
    if args.device not in ("cpu", "cuda"):
        raise _UsageError(f"--device must be cpu or cuda, got {args.device!r}")
    if args.repeat < 1:
        raise _UsageError(f"--repeat must be >= 1, got {args.repeat}")
    _check_device("--device", args.device)
    _make_folders(args.json)
    from .bench import compile_time

    return compile_time.main(args)


def _bench_kernels(args: argparse.Namespace) -> int:
    _check_triton()
    if args.json:
        _check_writable("--json", args.json)
    if args.max_gib <= 0:
        raise _UsageError(f"--max-gib must be > 0, got {args.max_gib}")
    _check_device("--device", args.device)
    from .bench.kernel_cases import GOALS

    args.kernels = [k.strip() for k in args.kernels.split(",") if k.strip()] or list(GOALS)
    unknown = [k for k in args.kernels if k not in GOALS]
    if unknown:
        raise _UsageError(f"--kernels: unknown {unknown}; known: {','.join(GOALS)}")
    _make_folders(args.json)
    from .bench import kernels

    return kernels.main(args)


def _bench_triton(args: argparse.Namespace) -> int:
    _check_triton()
    _positive_ints("--layers", args.layers)
    if args.json:
        _check_writable("--json", args.json)
    if args.device not in ("cpu", "cuda"):
        raise _UsageError(f"--device must be cpu or cuda, got {args.device!r}")
    _check_device("--device", args.device)
    _make_folders(args.json)
    from .bench import triton_cache

    return triton_cache.main(args)


def _check_triton() -> None:
    if importlib.util.find_spec("triton") is None:
        raise _UsageError("needs triton, which is not installed (pip install 'autofunc[triton]')")


def _explain(args: argparse.Namespace) -> int:
    from .errors import AutofuncError

    fn, fn_args, ops = _load_target(args.target)
    import autofunc

    try:
        report = autofunc.explain(
            fn, *fn_args, strategy=args.strategy, backend=args.backend, ops=ops
        )
    except AutofuncError as e:
        raise _UsageError(f"{args.target}: {e}") from None
    print(report)
    return 0


def _load_target(target: str) -> tuple[Any, tuple, tuple]:
    """Import ``MODULE:FUNCTION``, call ``FUNCTION()`` and check it returned ``(fn, args)`` or
    ``(fn, args, ops)``; each failure is a one-line usage error naming the target."""
    module_name, sep, fn_name = target.partition(":")
    if not sep or not module_name or not fn_name:
        raise _UsageError(f"expected MODULE:FUNCTION, got {target!r}")
    # The console script's sys.path lacks the current directory, where ``python -m`` has it:
    # a module next to the user imports either way.
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # ImportError, or any error the module raises while importing
        raise _UsageError(f"cannot import {module_name!r}: {type(e).__name__}: {e}") from None
    factory = getattr(module, fn_name, None)
    if not callable(factory):
        what = "has no attribute" if factory is None else "has a non-callable"
        raise _UsageError(f"module {module_name!r} {what} {fn_name!r}")
    required = _required_parameters(factory)
    if required:
        raise _UsageError(
            f"{target} takes arguments ({', '.join(required)}), but FUNCTION must be a "
            f"zero-argument factory that returns (fn, args) or (fn, args, ops), e.g. "
            f"'def make(): return {fn_name}, (x, y)'; explain calls FUNCTION() and then fn(*args)"
        )
    try:
        made = factory()
    except Exception as e:  # the user's factory failed: report it, not our stack
        raise _UsageError(f"{target}() raised {type(e).__name__}: {e}") from None
    shape_ok = isinstance(made, (tuple, list)) and len(made) in (2, 3)
    if shape_ok:
        fn, fn_args, ops = (*made, ()) if len(made) == 2 else made
        shape_ok = callable(fn) and isinstance(fn_args, (tuple, list))
        shape_ok = shape_ok and isinstance(ops, (tuple, list))
    if not shape_ok:
        raise _UsageError(
            f"{target}() must return (fn, args) or (fn, args, ops) with fn callable and args/ops "
            f"tuples, got {_describe(made)}"
        )
    return fn, tuple(fn_args), tuple(ops)


def _required_parameters(fn: Any) -> list[str]:
    """The parameters ``fn()`` would miss (``[]`` where its signature cannot be read)."""
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
             inspect.Parameter.KEYWORD_ONLY)  # fmt: skip
    return [p.name for p in params if p.kind in kinds and p.default is inspect.Parameter.empty]


_COMMANDS = {
    "bench": _bench,
    "bench-compile": _bench_compile,
    "bench-kernels": _bench_kernels,
    "bench-triton": _bench_triton,
    "explain": _explain,
}


def _describe(value: Any) -> str:
    """A short description of a value, for error messages."""
    if isinstance(value, (tuple, list)):
        inner = ", ".join(type(v).__name__ for v in value)
        return f"{type(value).__name__} of {len(value)} ({inner})"
    return type(value).__name__


if __name__ == "__main__":
    sys.exit(main())
