"""Cost of a compiled frame's guards as the number of mutable-op calls in it grows.

For each N, a frame calling a registered in-place op N times (on rows of one input) is
compiled with ``aot_eager``, and its Dynamo guards are checked many times on the same input, as
on every call of the compiled code (inside the registration: outside it the registrations guard
fails at once). Rows: autofunc v1, autofunc v2, and PyTorch's built-in (an op of the same body
never registered with autofunc). A frame's guards should cost the same however many op calls it
holds (Note [One registrations guard per frame] in autofunc/guards.py).

    python -m tools.guard_overhead [--calls 8,128,512] [--checks 2000] [--json PATH]

For measurement only; the table goes to stdout, the figures to ``--json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch._dynamo.eval_frame import _debug_get_cache_entry_list

import autofunc
from autofunc.bench.env import environment


@torch.library.custom_op("af_guard_overhead::add_one", mutates_args=("x",))
def add_one(x: torch.Tensor) -> None:
    x.add_(1)


@torch.library.custom_op("af_guard_overhead::add_one_builtin", mutates_args=("x",))
def add_one_builtin(x: torch.Tensor) -> None:
    x.add_(1)


def registered_frame(a: torch.Tensor, calls: int) -> torch.Tensor:
    for i in range(calls):
        add_one(a[i])
    return a


def builtin_frame(a: torch.Tensor, calls: int) -> torch.Tensor:
    for i in range(calls):
        add_one_builtin(a[i])
    return a


def _time_checks(frame, a: torch.Tensor, calls: int, checks: int) -> float:
    (entry,) = _debug_get_cache_entry_list(frame.__code__)
    manager, frame_locals = entry.guard_manager, {"a": a, "calls": calls}
    if not manager.check(frame_locals):
        raise AssertionError("the guards fail on the input they were compiled for")
    per = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(checks):
            manager.check(frame_locals)
        per.append((time.perf_counter() - t0) / checks * 1e6)
    return statistics.median(per)


def measure(config: str, calls: int, checks: int) -> dict:
    """Microseconds per guard check of the frame compiled under ``config``; median of 5."""
    torch._dynamo.reset()
    a = torch.zeros(calls, 2)
    if config == "builtin":
        torch.compile(builtin_frame, backend="aot_eager")(a, calls)
        us = _time_checks(builtin_frame, a, calls, checks)
    else:
        with autofunc.register(add_one, strategy=config.removeprefix("autofunc_")):
            torch.compile(registered_frame, backend="aot_eager")(a, calls)
            us = _time_checks(registered_frame, a, calls, checks)
    return {"config": config, "calls": calls, "guard_check_us": us}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tools.guard_overhead", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--calls", default="8,128,512")
    ap.add_argument("--checks", type=int, default=2000)
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    rows = []
    print(f"{'config':<12} {'op calls':>8} {'guard check (us)':>17}")
    for calls in (int(c) for c in args.calls.split(",")):
        for config in ("builtin", "autofunc_v1", "autofunc_v2"):
            row = measure(config, calls, args.checks)
            rows.append(row)
            print(f"{config:<12} {calls:>8} {row['guard_check_us']:>17.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"env": environment(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
