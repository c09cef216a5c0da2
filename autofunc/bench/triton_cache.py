"""Bench case: a user Triton kernel writing ``kv[l]`` of an L-layer KV cache, no custom op.

One decode step calls the project's own ``reshape_and_cache`` kernel through
``torch.library.wrap_triton`` once per layer, on ``kv[l, 0]`` / ``kv[l, 1]`` of one
``[L, 2, blocks, block_size, heads, head_dim]`` cache. PyTorch copies each written view's
storage from element 0 to the view's end (``clone_preserve_strides``) and removes that copy
only for a whole graph input, so layer ``l`` costs ``(l + 1) / L`` of the cache and a step
about ``(L + 1) / 2`` caches; with ``autofunc.reinplace_triton_kernels()`` the kernel writes
the cache itself.

Bytes per step, for PyTorch's handling ("builtin") and autofunc's:

* on CPU, what Inductor's post-grad graph allocates (its code cannot be generated without a
  GPU; ``user_triton.post_grad_graph`` under a stub sm90 target);
* on CUDA, the peak a compiled step allocates above its inputs, measured.

``autofunc bench-triton [--layers 2,4,8,16,32] [--device cpu|cuda] [--cases] [--json P]``
prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..kernels._triton import tl
from .report import format_columns

__all__ = ["Row", "main", "measure", "step"]

# A small cache per layer (the ratio, not the size, is the point on CPU): 16 blocks of 16 slots,
# 2 heads of 32 -> 64 KiB per layer in float32 (keys and values).
SHAPE = {"blocks": 16, "block_size": 16, "heads": 2, "head_dim": 32, "tokens": 4}


def step(launch: Callable[[Any], Any], kernel: Any) -> Callable:
    """One decode step: the kernel writes this step's keys and values into every layer."""
    from ..kernels.reshape_and_cache import launch_args

    def f(kv: torch.Tensor, key: torch.Tensor, value: torch.Tensor, slots: torch.Tensor) -> None:
        for layer in range(kv.shape[0]):
            grid, kwargs = launch_args(key, value, kv[layer, 0], kv[layer, 1], slots)
            launch(kernel)[grid](**kwargs)

    return f


def inputs(layers: int, device: str = "cpu") -> list[torch.Tensor]:
    s = SHAPE
    kv = torch.zeros(
        layers, 2, s["blocks"], s["block_size"], s["heads"], s["head_dim"], device=device
    )
    key = torch.randn(s["tokens"], s["heads"], s["head_dim"], device=device)
    value = torch.randn_like(key)
    slots = torch.arange(s["tokens"], device=device, dtype=torch.int64) * 3
    return [kv, key, value, slots]


class Row(dict):
    """``layers``, ``cache_bytes``, ``builtin_bytes``, ``autofunc_bytes``, ``how``."""


def measure(layers: int, device: str = "cpu") -> Row:
    """Bytes per step for PyTorch's handling and for autofunc's at ``layers`` layers."""
    from torch.library import wrap_triton

    from ..kernels.reshape_and_cache import _reshape_and_cache_kernel as kernel

    args = inputs(layers, device)
    out = Row(layers=layers, cache_bytes=args[0].numel() * args[0].element_size())
    if device == "cpu":
        from . import user_triton

        traced = user_triton.jit(getattr(kernel, "fn", kernel))  # a JITFunction, as traced
        out.update(_builtin_and_autofunc(lambda: _graph_bytes(step(wrap_triton, traced), args)))
        out["how"] = "post-grad graph allocations"
    else:
        out.update(_builtin_and_autofunc(lambda: _peak(step(wrap_triton, kernel), args, device)))
        out["how"] = "measured peak"
    return out


def _builtin_and_autofunc(bytes_of: Callable[[], int]) -> dict[str, int]:
    """``bytes_of()`` under PyTorch's handling of the kernels, then under autofunc's; the
    switch is left as it was."""
    from .triton_point import TritonSwitch

    out = {}
    for label, on in (("builtin", False), ("autofunc", True)):
        with TritonSwitch(on):
            out[f"{label}_bytes"] = bytes_of()
    return out


def _graph_bytes(fn: Callable, args: list) -> int:
    """What Inductor's post-grad graph of ``fn(*args)`` allocates (CPU, stub sm90 target)."""
    from . import user_triton

    with user_triton.gpu_target():
        return user_triton.allocated_bytes(user_triton.post_grad_graph(fn, args))


def _peak(fn: Callable, args: list, device: str) -> int:
    """The measured peak of one compiled call of ``fn(*args)`` (a GPU)."""
    from .measure import measure_memory

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="inductor", fullgraph=True)
    compiled(*args)  # compile and warm up
    return measure_memory(lambda: compiled(*args), device).peak


# -- the cases, each a program of one or two launches: bytes beside the built-in's ----


def _add_into(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    """dst[i] += src[i] for i < n (reads dst and src, writes dst)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    total = tl.load(dst_ptr + offs, mask=m) + tl.load(src_ptr + offs, mask=m)
    tl.store(dst_ptr + offs, total, mask=m)


def _bump_both(a_ptr, b_ptr, n, BLOCK: tl.constexpr):
    """a[i] += 1 for i < n, then b[i] += 10: writes both pointers."""
    offs = tl.arange(0, BLOCK)
    m = offs < n
    tl.store(a_ptr + offs, tl.load(a_ptr + offs, mask=m) + 1, mask=m)
    tl.store(b_ptr + offs, tl.load(b_ptr + offs, mask=m) + 10, mask=m)


def kernels() -> dict[str, Any]:
    """The case kernels as ``JITFunction`` objects (made once)."""
    global _KERNELS
    if _KERNELS is None:
        from . import user_triton

        _KERNELS = {"add_into": user_triton.jit(_add_into), "bump_both": user_triton.jit(_bump_both)}
    return _KERNELS


_KERNELS: dict[str, Any] | None = None


def _case_programs() -> dict[str, tuple[Callable, Callable[[], list]]]:
    """name -> (program given the launcher and the kernels, its inputs)."""

    def every_layer(K, k):
        def f(kv, x):
            for layer in range(kv.shape[0]):
                K(k["add_into"])[(1,)](x, kv[layer], x.numel(), BLOCK=16)

        return f

    def last_layer(K, k):
        def f(kv, x):
            K(k["add_into"])[(1,)](x, kv[-1], x.numel(), BLOCK=16)

        return f

    def read_other_layer(K, k):
        def f(kv):
            K(k["add_into"])[(1,)](kv[0], kv[1], kv.shape[1], BLOCK=16)

        return f

    def slice_of_intermediate(K, k):
        def f(x, src):
            y = x * 2
            K(k["add_into"])[(1,)](src, y[8:16], 8, BLOCK=8)
            return y

        return f

    def read_overlaps_write(K, k):
        def f(kv):
            K(k["add_into"])[(1,)](kv[1, 0:8], kv[1, 4:12], 8, BLOCK=8)

        return f

    def read_before_used_after(K, k):
        def f(kv, x):
            before = kv[1] * 1
            K(k["add_into"])[(1,)](x, kv[1], x.numel(), BLOCK=16)
            return before + kv[1]

        return f

    def two_pointers(K, k):
        def f(x):
            K(k["bump_both"])[(1,)](x, x, x.numel(), BLOCK=16)

        return f

    cache = lambda: [torch.randn(4, 16), torch.randn(16)]
    return {
        "kv[l] for every layer (4)": (every_layer, cache),
        "the last layer alone": (last_layer, cache),
        "kv[1] written, kv[0] read": (read_other_layer, lambda: [torch.randn(4, 16)]),
        "a slice of an intermediate": (
            slice_of_intermediate, lambda: [torch.randn(16), torch.randn(8)]
        ),
        "a read view overlapping the write": (read_overlaps_write, lambda: [torch.randn(4, 16)]),
        "a read before, used after": (read_before_used_after, cache),
        "one tensor as two written pointers": (two_pointers, lambda: [torch.zeros(16)]),
    }


def compare_cases() -> list[dict]:
    """Per case, the bytes Inductor's post-grad graph allocates under PyTorch's handling and
    under autofunc's (CPU, stub sm90 target)."""
    from torch.library import wrap_triton

    return [
        {
            "case": name,
            **_builtin_and_autofunc(
                lambda p=program, make=make_inputs: _graph_bytes(
                    p(wrap_triton, kernels()), make()
                )
            ),
        }
        for name, (program, make_inputs) in _case_programs().items()
    ]


def format_cases(rows: list[dict]) -> str:
    body = [[r["case"], str(r["builtin_bytes"]), str(r["autofunc_bytes"])] for r in rows]
    return "\n".join(format_columns(["case", "builtin B", "autofunc B"], body))


def format_table(rows: list[Row]) -> str:
    header = ["layers", "cache B", "builtin B/step", "caches", "autofunc B/step"]
    body = [
        [
            str(r["layers"]),
            str(r["cache_bytes"]),
            str(r["builtin_bytes"]),
            f"{r['builtin_bytes'] / r['cache_bytes']:.2f}",
            str(r["autofunc_bytes"]),
        ]
        for r in rows
    ]
    return "\n".join(format_columns(header, body))


def main(args: argparse.Namespace) -> int:
    """``autofunc bench-triton``, its arguments parsed and checked by :mod:`autofunc.cli`:
    ``layers`` (``"2,4"``), ``device``, ``json`` (``""``: none), ``cases``."""
    out = Path(args.json) if args.json else None
    rows: list = []
    result: dict[str, Any] = {"device": args.device, "rows": rows}
    for layers in (int(x) for x in args.layers.split(",")):
        rows.append(measure(layers, args.device))
        if out is not None:
            out.write_text(json.dumps(result, indent=1))
    if args.cases:
        result["cases"] = compare_cases()
        print(format_cases(result["cases"]))
        print()
        if out is not None:
            out.write_text(json.dumps(result, indent=1))
    print(format_table(rows))
    worst = max(r["autofunc_bytes"] for r in rows)
    print(
        f"autofunc copies at most {worst} B per step; the built-in "
        f"{min(r['builtin_bytes'] / r['cache_bytes'] for r in rows):.1f} to "
        f"{max(r['builtin_bytes'] / r['cache_bytes'] for r in rows):.1f} caches"
    )
    return 0


if __name__ == "__main__":
    sys.exit("use `autofunc bench-triton` (or python -m autofunc bench-triton)")
