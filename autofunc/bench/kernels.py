"""Kernel bandwidth on a GPU: each Triton kernel beside a device copy of the same bytes.

    python -m autofunc.bench.kernels [--quick] [--kernels a,b] [--max-gib G] [--json PATH]

For every point the kernel and ``dst.copy_(src)`` of half its bytes (so the copy reads and
writes as many bytes as the kernel moves) are timed with ``triton.testing.do_bench`` (median)
in the same run: the copy is the measured ceiling, and ``fraction`` is the kernel's bandwidth
over the copy's. Paged decode attention is also timed against PyTorch's
``scaled_dot_product_attention`` on K/V gathered beforehand (the gather is not timed). Each
kernel is first checked once against its PyTorch reference at its smallest point.

Bytes counted (bf16 activations, int64/int32 indices):
    reshape_and_cache   K and V read, the same bytes written into the cache, slot_mapping
    rotary_embedding    the rotated q and k read and written, a cos/sin row and position per token
    fused_add_rms_norm  x and residual read and written, the weight read
    paged_attention     the K and V of every valid token read once, query read, out written,
                        block tables and seq_lens
Serving shapes: hidden 4096, 32 query / 8 KV heads, head size 128, block size 16.
Goals (issue 11): 80% of the copy for the first three, 70% for attention.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from typing import Any, Callable

import torch
import torch.nn.functional as F

from ..kernels import (
    fused_add_rms_norm,
    fused_add_rms_norm_ref,
    paged_decode_attention,
    paged_decode_attention_ref,
    reshape_and_cache,
    reshape_and_cache_ref,
    rotary_embedding,
    rotary_embedding_ref,
)

__all__ = ["GOALS", "Point", "points", "run", "main"]

Q_HEADS, KV_HEADS, HEAD, BLOCK, HIDDEN, MAX_POS = 32, 8, 128, 16, 4096, 8192
GOALS = {
    "reshape_and_cache": 0.8,
    "rotary_embedding": 0.8,
    "fused_add_rms_norm": 0.8,
    "paged_attention": 0.7,
}


@dataclasses.dataclass
class Point:
    kernel: str
    shape: dict[str, int]
    bytes: int = 0
    ms: float | None = None
    gbps: float | None = None
    copy_gbps: float | None = None
    fraction: float | None = None
    goal: float = 0.0
    meets_goal: bool | None = None
    checked: bool | None = None  # equal to the reference (checked at the first point only)
    sdpa_ms: float | None = None  # attention: SDPA on gathered K/V
    error: str = ""


# -- cases: (kernel call, reference check, bytes) -------------------------------------------


def _tokens_case(kernel: str, tokens: int, dev: str, dt: torch.dtype) -> tuple:
    g = torch.Generator(dev).manual_seed(0)

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=g, device=dev, dtype=dt)

    if kernel == "reshape_and_cache":
        k, v = rnd(tokens, KV_HEADS, HEAD), rnd(tokens, KV_HEADS, HEAD)
        blocks = 2 * math.ceil(tokens / BLOCK)
        kc, vc = rnd(blocks, BLOCK, KV_HEADS, HEAD), rnd(blocks, BLOCK, KV_HEADS, HEAD)
        slots = torch.randperm(blocks * BLOCK, generator=g, device=dev)[:tokens]
        args = (k, v, kc, vc, slots)
        nbytes = 4 * k.numel() * k.element_size() + slots.numel() * 8
        return reshape_and_cache, reshape_and_cache_ref, args, (2, 3), nbytes
    if kernel == "rotary_embedding":
        qkv = rnd(tokens, (Q_HEADS + 2 * KV_HEADS) * HEAD)
        q, k = qkv[:, : Q_HEADS * HEAD], qkv[:, Q_HEADS * HEAD : (Q_HEADS + KV_HEADS) * HEAD]
        cos_sin = rnd(MAX_POS, HEAD)
        pos = torch.randint(0, MAX_POS, (tokens,), generator=g, device=dev)
        args = (pos, q, k, cos_sin, HEAD, True)
        nbytes = 2 * (q.numel() + k.numel()) * qkv.element_size()
        nbytes += tokens * (HEAD * cos_sin.element_size() + 8)
        return rotary_embedding, rotary_embedding_ref, args, (1, 2), nbytes
    x, res, w = rnd(tokens, HIDDEN), rnd(tokens, HIDDEN), rnd(HIDDEN)
    nbytes = 4 * x.numel() * x.element_size() + w.numel() * w.element_size()
    return fused_add_rms_norm, fused_add_rms_norm_ref, (x, res, w, 1e-6), (0, 1), nbytes


def _attention_case(batch: int, ctx: int, dev: str, dt: torch.dtype) -> tuple:
    g = torch.Generator(dev).manual_seed(0)
    per_seq = math.ceil(ctx / BLOCK)
    blocks = batch * per_seq
    kc = torch.randn((blocks, BLOCK, KV_HEADS, HEAD), generator=g, device=dev, dtype=dt)
    vc = torch.randn((blocks, BLOCK, KV_HEADS, HEAD), generator=g, device=dev, dtype=dt)
    q = torch.randn((batch, Q_HEADS, HEAD), generator=g, device=dev, dtype=dt)
    out = torch.empty_like(q)
    perm = torch.randperm(blocks, generator=g, device=dev)
    tables = perm.view(batch, per_seq).to(torch.int32)
    lens = torch.full((batch,), ctx, dtype=torch.int32, device=dev)
    args = (out, q, kc, vc, tables, lens, HEAD**-0.5)
    nbytes = 2 * batch * ctx * KV_HEADS * HEAD * dt.itemsize + 2 * q.numel() * dt.itemsize
    nbytes += tables.numel() * 4 + batch * 4
    return paged_decode_attention, paged_decode_attention_ref, args, (0,), nbytes


def points(quick: bool, max_gib: float) -> list[tuple[str, dict[str, int]]]:
    """The points measured, in order: tokens for the three token kernels, (batch, context) for
    attention, leaving out attention points whose K/V would exceed ``max_gib``."""
    tokens = (1024, 8192) if quick else (1024, 4096, 8192)
    out = [(k, {"tokens": t}) for k in list(GOALS)[:3] for t in tokens]
    batches = (1, 32, 256) if quick else (1, 8, 32, 64, 128, 256)
    ctxs = (1024, 32768) if quick else (1024, 4096, 16384, 32768)
    for b in batches:
        for c in ctxs:
            if 2 * b * c * KV_HEADS * HEAD * 2 <= max_gib * 2**30:
                out.append(("paged_attention", {"batch": b, "context": c}))
    return out


# -- measuring ---------------------------------------------------------------------------------


def _do_bench(fn: Callable[[], Any]) -> float:
    import triton.testing

    try:
        return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))
    except TypeError:  # older triton: no return_mode
        return float(triton.testing.do_bench(fn, warmup=25, rep=100, quantiles=[0.5])[0])


def _check(kernel: Callable, ref: Callable, args: tuple, outs: tuple[int, ...]) -> bool:
    got = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    want = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    kernel(*got)
    ref(*want)
    return all(
        torch.allclose(got[i].float(), want[i].float(), atol=1e-2, rtol=1.6e-2) for i in outs
    )


def measure(kernel: str, shape: dict[str, int], *, check: bool, dev: str, timer=_do_bench) -> Point:
    point = Point(kernel, dict(shape), goal=GOALS[kernel])
    try:
        dt = torch.bfloat16
        if kernel == "paged_attention":
            fn, ref, args, outs, nbytes = _attention_case(shape["batch"], shape["context"], dev, dt)
        else:
            fn, ref, args, outs, nbytes = _tokens_case(kernel, shape["tokens"], dev, dt)
        point.bytes = nbytes
        if check:
            point.checked = _check(fn, ref, args, outs)
        point.ms = timer(lambda: fn(*args))
        src = torch.empty(nbytes // 2, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)
        copy_ms = timer(lambda: dst.copy_(src))
        point.gbps = nbytes / point.ms / 1e6
        point.copy_gbps = 2 * src.numel() / copy_ms / 1e6
        point.fraction = point.gbps / point.copy_gbps
        point.meets_goal = point.fraction >= point.goal
        if kernel == "paged_attention":
            point.sdpa_ms = timer(_sdpa_call(args))
    except Exception as e:  # noqa: BLE001 - a failing point is a result
        point.error = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    return point


def _sdpa_call(args: tuple) -> Callable[[], Any]:
    """SDPA of the same query over K/V gathered once (``[batch, kv_heads, ctx, head]``)."""
    _, q, kc, vc, tables, lens, scale = args
    batch, ctx = q.shape[0], int(lens[0])

    def gather(cache: torch.Tensor) -> torch.Tensor:
        t = cache[tables.long()].reshape(batch, -1, KV_HEADS, HEAD)[:, :ctx]
        return t.transpose(1, 2).contiguous()

    k, v, q4 = gather(kc), gather(vc), q.unsqueeze(2)
    try:
        F.scaled_dot_product_attention(q4, k, v, scale=scale, enable_gqa=True)
        return lambda: F.scaled_dot_product_attention(q4, k, v, scale=scale, enable_gqa=True)
    except TypeError:  # no enable_gqa: repeat the KV heads up front
        k = k.repeat_interleave(Q_HEADS // KV_HEADS, 1)
        v = v.repeat_interleave(Q_HEADS // KV_HEADS, 1)
        return lambda: F.scaled_dot_product_attention(q4, k, v, scale=scale)


def run(todo: list[tuple[str, dict[str, int]]], dev: str, timer=_do_bench, progress=print):
    seen: set[str] = set()
    results = []
    for kernel, shape in todo:
        results.append(measure(kernel, shape, check=kernel not in seen, dev=dev, timer=timer))
        seen.add(kernel)
        progress(format_row(results[-1]))
    return results


def format_row(p: Point) -> str:
    shape = " ".join(f"{k}={v}" for k, v in p.shape.items())
    if p.error:
        return f"{p.kernel:19s} {shape:24s} ERROR {p.error}"
    sdpa = "" if p.sdpa_ms is None else f"  sdpa {p.sdpa_ms:.3f} ms ({p.sdpa_ms / p.ms:.2f}x)"
    check = {None: "", True: "  ref ok", False: "  REF MISMATCH"}[p.checked]
    return (
        f"{p.kernel:19s} {shape:24s} {p.ms:8.3f} ms {p.gbps:7.0f} GB/s  copy {p.copy_gbps:5.0f}"
        f"  {100 * p.fraction:5.1f}% (goal {100 * p.goal:.0f}%: "
        f"{'met' if p.meets_goal else 'MISSED'}){sdpa}{check}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--kernels", default=",".join(GOALS))
    ap.add_argument("--max-gib", type=float, default=24.0, help="attention K/V cap")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    wanted = args.kernels.split(",")
    unknown = [k for k in wanted if k not in GOALS]
    if unknown:
        ap.error(f"unknown kernels {unknown}; known: {list(GOALS)}")
    todo = [(k, s) for k, s in points(args.quick, args.max_gib) if k in wanted]
    results = run(todo, args.device)
    if args.json:
        from .env import environment

        with open(args.json, "w") as f:
            json.dump(
                {"env": environment(), "points": [dataclasses.asdict(p) for p in results]},
                f,
                indent=1,
            )
    return 0 if all(p.checked is not False and not p.error for p in results) else 1


if __name__ == "__main__":
    sys.exit(main())
