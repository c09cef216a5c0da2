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

``python -m autofunc.bench.triton_cache [--layers 2,4,8,16,32] [--device cpu|cuda] [--json P]``
prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

import torch

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
    import autofunc
    from ..kernels.reshape_and_cache import _reshape_and_cache_kernel

    args = inputs(layers, device)
    cache = args[0].numel() * args[0].element_size()
    out = Row(layers=layers, cache_bytes=cache)
    for name, on in (("builtin", False), ("autofunc", True)):
        autofunc.reinplace_triton_kernels(on)
        out[f"{name}_bytes"] = _bytes(_reshape_and_cache_kernel, args, device)
    autofunc.reinplace_triton_kernels(False)
    out["how"] = "post-grad graph allocations" if device == "cpu" else "measured peak"
    return out


def _bytes(kernel: Any, args: list, device: str) -> int:
    from torch.library import wrap_triton

    if device == "cpu":
        from . import user_triton

        with user_triton.gpu_target():
            fn = user_triton.jit(getattr(kernel, "fn", kernel))  # a JITFunction, as traced
            return user_triton.allocated_bytes(
                user_triton.post_grad_graph(step(wrap_triton, fn), args)
            )
    from .measure import measure_memory

    torch._dynamo.reset()
    compiled = torch.compile(step(wrap_triton, kernel), backend="inductor", fullgraph=True)
    compiled(*args)  # compile and warm up
    return measure_memory(lambda: compiled(*args), device).peak


def format_table(rows: list[Row]) -> str:
    head = f"{'layers':>6}  {'cache':>10}  {'builtin/step':>13}  {'caches':>6}  {'autofunc/step':>13}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['layers']:>6}  {r['cache_bytes']:>10}  {r['builtin_bytes']:>13}  "
            f"{r['builtin_bytes'] / r['cache_bytes']:>6.2f}  {r['autofunc_bytes']:>13}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m autofunc.bench.triton_cache",
        description="bytes per decode step of a user Triton kernel writing kv[l] of an L-layer "
        "cache: PyTorch's handling vs autofunc.reinplace_triton_kernels()",
    )
    ap.add_argument("--layers", default="2,4,8,16,32", help="comma-separated layer counts")
    ap.add_argument("--device", default="cpu", help="cpu (graph allocations) or cuda (measured)")
    ap.add_argument("--json", type=Path, help="write the rows here")
    ns = ap.parse_args(argv)
    if ns.json is not None:
        ns.json.parent.mkdir(parents=True, exist_ok=True)
        ns.json.write_text("[]")  # fail on an unwritable path before the work
    rows = []
    for layers in (int(x) for x in ns.layers.split(",")):
        rows.append(measure(layers, ns.device))
        if ns.json is not None:
            ns.json.write_text(json.dumps({"device": ns.device, "rows": rows}, indent=1))
    print(format_table(rows))
    worst = max(r["autofunc_bytes"] for r in rows)
    print(
        f"autofunc copies at most {worst} B per step; the built-in "
        f"{min(r['builtin_bytes'] / r['cache_bytes'] for r in rows):.1f} to "
        f"{max(r['builtin_bytes'] / r['cache_bytes'] for r in rows):.1f} caches"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
