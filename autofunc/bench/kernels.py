"""Kernel bandwidth on a GPU: each Triton kernel beside a device copy of the same bytes.

    autofunc bench-kernels [--quick] [--kernels a,b] [--max-gib G] [--device D] [--json PATH]

Owns measuring and the table (``autofunc.cli`` parses the arguments); what is measured
(shapes, bytes, inputs) is ``autofunc.bench.kernel_cases``. Per point, in order: (1) build the
inputs, (2) check the kernel once against its reference, (3) time the kernel, (4) time
``dst.copy_(src)`` of ``bytes // 2`` on each side, so that its reads plus writes equal the
kernel's bytes (the measured ceiling), (5) for attention, time SDPA on K/V gathered once
beforehand (the gather is not timed).
Times are ``triton.testing.do_bench`` medians (warmup 25 ms, rep 100 ms, L2 flushed between
calls); the timer is an argument so that the runner can be tested without a GPU.

Goals: 80% of the copy for reshape_and_cache, rotary and fused add + RMSNorm, 70%
for paged attention. Exit status 1 when a kernel disagrees with its reference or a point
errors (e.g. out of memory); missed goals are results, not failures.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import sys
from collections.abc import Callable
from typing import Any

import torch

from ..passes.report import format_bytes
from .kernel_cases import GOALS, SERVING, SWEEPS, Case, Geometry, kv_cache_bytes, plan

__all__ = ["Row", "bandwidth", "do_bench_ms", "format_rows", "main", "measure", "run"]

Timer = Callable[[Callable[[], Any]], float]  # fn -> milliseconds per call


def bandwidth(nbytes: int, ms: float, copy_ms: float) -> tuple[float, float, float]:
    """``(kernel GB/s, copy GB/s, fraction)``; the copy moved ``nbytes // 2`` each way."""
    gbps = nbytes / ms / 1e6
    copy_gbps = 2 * (nbytes // 2) / copy_ms / 1e6
    return gbps, copy_gbps, gbps / copy_gbps


# -- measuring --------------------------------------------------------------------------------


def do_bench_ms(fn: Callable[[], Any]) -> float:
    """Median ms per call from ``triton.testing.do_bench`` (warmup 25 ms, rep 100 ms)."""
    from triton.testing import do_bench

    if "return_mode" in inspect.signature(do_bench).parameters:
        return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))
    return float(do_bench(fn, warmup=25, rep=100, quantiles=[0.5])[0])


def _time_copy(nbytes: int, device: str, timer: Timer) -> float:
    """ms per ``dst.copy_(src)`` of ``nbytes``; the buffers are freed on return (before (5))."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return timer(lambda: dst.copy_(src))


@dataclasses.dataclass
class Row:
    kernel: str
    shape: dict[str, int]
    goal: float
    bytes: int = 0  # what the kernel must move (module docstring)
    ms: float | None = None
    gbps: float | None = None  # bytes / ms
    copy_ms: float | None = None  # dst.copy_(src) of bytes // 2
    copy_gbps: float | None = None
    fraction: float | None = None  # gbps / copy_gbps
    meets_goal: bool | None = None  # fraction >= goal
    checked: bool | None = None  # agrees with its reference (None: not reached)
    sdpa_ms: float | None = None  # attention: SDPA on K/V gathered beforehand
    sdpa_speedup: float | None = None  # sdpa_ms / ms: above 1, the kernel is faster
    error: str = ""


def measure(case: Case, device: str, timer: Timer = do_bench_ms) -> Row:
    """Steps (1)-(5) of the module docstring for one case; an exception becomes ``error``."""
    row = Row(case.kernel, dict(case.shape), GOALS[case.kernel])
    try:
        built = case.build(device)  # (1)
        row.bytes = built.nbytes
        row.checked = bool(built.check())  # (2)
        row.ms = timer(built.run)  # (3)
        row.copy_ms = _time_copy(built.nbytes // 2, device, timer)  # (4)
        row.gbps, row.copy_gbps, row.fraction = bandwidth(row.bytes, row.ms, row.copy_ms)
        row.meets_goal = row.fraction >= row.goal
        if built.baseline is not None:  # (5)
            row.sdpa_ms = timer(built.baseline())
            row.sdpa_speedup = row.sdpa_ms / row.ms
    except Exception as e:  # noqa: BLE001 - a failing point is a result (e.g. out of memory)
        lines = str(e).strip().splitlines()
        row.error = f"{type(e).__name__}: {lines[0][:200] if lines else ''}"
    return row


def run(
    cases: list[Case],
    device: str,
    timer: Timer = do_bench_ms,
    progress: Callable[[Row], Any] = lambda row: None,
) -> list[Row]:
    """Measure ``cases`` in order, calling ``progress`` after each."""
    rows = []
    for case in cases:
        rows.append(measure(case, device, timer))
        if device.startswith("cuda"):
            torch.cuda.empty_cache()  # points differ by orders of magnitude in size
        progress(rows[-1])
    return rows


# -- presenting -------------------------------------------------------------------------------


def _cell(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def format_rows(rows: list[Row]) -> list[str]:
    """The results table: one line per row, then each row's error."""
    from .report import format_columns

    header = ["kernel", "shape", "bytes", "ms", "GB/s", "copy GB/s", "of copy", "goal", "pass"]
    header += ["ref", "sdpa ms", "sdpa/kernel"]
    body = []
    for r in rows:
        body.append(
            [
                r.kernel,
                " ".join(f"{k}={v}" for k, v in r.shape.items()),
                format_bytes(r.bytes),
                _cell(r.ms, ".3f"),
                _cell(r.gbps, ".0f"),
                _cell(r.copy_gbps, ".0f"),
                "-" if r.fraction is None else f"{100 * r.fraction:.1f}%",
                f"{100 * r.goal:.0f}%",
                {None: "-", True: "yes", False: "NO"}[r.meets_goal],
                {None: "-", True: "ok", False: "MISMATCH"}[r.checked] if not r.error else "ERROR",
                _cell(r.sdpa_ms, ".3f"),
                "-" if r.sdpa_speedup is None else f"{r.sdpa_speedup:.2f}x",
            ]
        )
    out = format_columns(header, body)
    out += [f"  {r.kernel} {r.shape}: {r.error}" for r in rows if r.error]
    out.append(
        "bytes: what the kernel must read and write; of copy: its GB/s over dst.copy_(src) of "
        "bytes/2 in the same run; ref: kernel vs its reference; sdpa/kernel: SDPA's time over "
        "the kernel's (above 1: the kernel is faster)"
    )
    return out


def main(args: argparse.Namespace, timer: Timer = do_bench_ms, geometry: Geometry = SERVING) -> int:
    """``autofunc bench-kernels``, its arguments parsed and checked by :mod:`autofunc.cli`:
    ``kernels`` (names of ``GOALS``, or empty for all), ``quick``, ``max_gib``, ``device``,
    ``json``. Returns the exit status (module docstring)."""
    kernels = args.kernels or list(GOALS)
    sweep = "quick" if args.quick else "full"
    cases, skipped = plan(SWEEPS[sweep], kernels, args.max_gib, geometry)
    for c in skipped:
        gib = kv_cache_bytes(geometry, **c.shape) / 2**30
        print(f"skipped {c.kernel} {c.shape}: {gib:.0f} GiB of K/V > --max-gib", file=sys.stderr)

    done: list[Row] = []

    def save(rows: list[Row]) -> None:
        from .report import write_json

        write_json(
            args.json,
            rows,
            sweep={"name": sweep, **SWEEPS[sweep], "kernels": kernels},
            geometry={**vars(geometry), "dtype": str(geometry.dtype)},
            device=args.device,
            max_gib=args.max_gib,
            goals=GOALS,
            skipped=[c.shape for c in skipped],
        )

    def progress(r: Row) -> None:  # the JSON after every point: a run stopped part-way keeps them
        done.append(r)
        print(f"[{len(done)}/{len(cases)}] {format_rows([r])[2]}", file=sys.stderr, flush=True)
        if args.json:
            save(done)

    rows = run(cases, args.device, timer, progress)
    print("\n".join(format_rows(rows)))
    if args.json:
        save(rows)
    return 0 if all(r.checked and not r.error for r in rows) else 1


if __name__ == "__main__":
    sys.exit("use `autofunc bench-kernels` (or python -m autofunc bench-kernels)")
