"""What the kernel benchmark measures: shapes, goals, sweeps, bytes, and each point's inputs.

Pure data and builders; timing and presentation live in ``autofunc.bench.kernels``. Imports the
public launchers and references of ``autofunc.kernels`` only, never their internals (e.g.
attention's ``partition_size``). A builder returns the kernel call to time, a check of the
kernel against its ``_ref`` on fresh copies (compared in fp32 with the bf16 tolerance of the
kernel tests, atol 1e-2 and rtol 1.6e-2; attention: the first two sequences of a full-shape
launch), the bytes the kernel must move, and for attention the SDPA call to compare with.

Bytes counted (bf16 activations; int64 slot_mapping/positions, int32 block tables/seq_lens):
    reshape_and_cache   K and V read, the same bytes written into the cache, slot_mapping
    rotary_embedding    the rotated q and k (qkv.split views) read and written, the cos/sin
                        rows touched (positions 0..tokens-1: one per token), positions
    fused_add_rms_norm  x and residual read and written, weight read
    paged_attention     K and V of every valid token read once, query read, out written,
                        block tables and seq_lens (not the split-K scratch); all sequences
                        have the same context length
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

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

__all__ = [
    "GOALS",
    "SERVING",
    "SWEEPS",
    "Built",
    "Case",
    "Geometry",
    "attention_bytes",
    "kv_cache_bytes",
    "plan",
    "reshape_and_cache_bytes",
    "rms_norm_bytes",
    "rotary_bytes",
]


@dataclasses.dataclass(frozen=True)
class Geometry:
    """Model shapes shared by every case (defaults: a Llama-3-8B-like serving layer)."""

    q_heads: int = 32
    kv_heads: int = 8
    head: int = 128
    block: int = 16  # KV cache block size (tokens)
    hidden: int = 4096
    max_pos: int = 8192  # rows of the cos/sin cache
    dtype: torch.dtype = torch.bfloat16

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize


SERVING = Geometry()
GOALS = {  # fraction of the copy's bandwidth each kernel should reach
    "reshape_and_cache": 0.8,
    "rotary_embedding": 0.8,
    "fused_add_rms_norm": 0.8,
    "paged_attention": 0.7,
}
SWEEPS = {  # named sweeps: tokens for the first three kernels, batch x context for attention
    "full": {
        "tokens": (1024, 4096, 8192),
        "batch": (1, 8, 32, 64, 128, 256),
        "context": (1024, 4096, 16384, 32768),
    },
    "quick": {"tokens": (1024, 4096), "batch": (1, 32), "context": (1024, 4096)},
}
_TOLERANCE = {"atol": 1e-2, "rtol": 1.6e-2}  # bf16, as tests/kernels/conftest.py
_INDEX_BYTES = 8  # int64 slot_mapping and positions
_TABLE_BYTES = 4  # int32 block tables and seq_lens


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# -- bytes: what each kernel must read and write ----------------------------------------------


def reshape_and_cache_bytes(g: Geometry, tokens: int) -> int:
    """K and V read, the same bytes written into the cache, plus slot_mapping."""
    kv = 2 * tokens * g.kv_heads * g.head * g.itemsize
    return 2 * kv + tokens * _INDEX_BYTES


def rotary_bytes(g: Geometry, tokens: int, rows_touched: int) -> int:
    """The q and k parts read and written, ``rows_touched`` cos/sin rows, plus positions."""
    qk = tokens * (g.q_heads + g.kv_heads) * g.head * g.itemsize
    return 2 * qk + rows_touched * g.head * g.itemsize + tokens * _INDEX_BYTES


def rms_norm_bytes(g: Geometry, tokens: int) -> int:
    """x and residual read and written, plus the weight."""
    return 4 * tokens * g.hidden * g.itemsize + g.hidden * g.itemsize


def attention_bytes(g: Geometry, batch: int, context: int) -> int:
    """K and V of ``batch * context`` valid tokens, query and out, block tables and seq_lens."""
    kv = 2 * batch * context * g.kv_heads * g.head * g.itemsize
    query_out = 2 * batch * g.q_heads * g.head * g.itemsize
    return kv + query_out + batch * (_cdiv(context, g.block) + 1) * _TABLE_BYTES


def kv_cache_bytes(g: Geometry, batch: int, context: int) -> int:
    """The K and V cache allocated for an attention point (whole blocks)."""
    return 2 * batch * _cdiv(context, g.block) * g.block * g.kv_heads * g.head * g.itemsize


# -- cases: (kernel call, reference check, bytes) ---------------------------------------------


@dataclasses.dataclass(frozen=True)
class Built:
    """One point's inputs, closed over: ``run`` is what is timed; ``check`` runs the kernel and
    its reference on fresh copies and says whether they agree; ``baseline`` (attention) gathers
    K/V once and returns the SDPA call to time."""

    run: Callable[[], Any]
    check: Callable[[], bool]
    nbytes: int
    baseline: Callable[[], Callable[[], Any]] | None = None


@dataclasses.dataclass(frozen=True)
class Case:
    kernel: str  # a key of GOALS
    shape: dict[str, int]  # {"tokens": n} or {"batch": b, "context": c}
    geometry: Geometry = SERVING

    def build(self, device: str) -> Built:
        return _BUILDERS[self.kernel](self.geometry, device, **self.shape)


def _close(got: torch.Tensor, want: torch.Tensor) -> bool:
    return torch.allclose(got.float(), want.float(), **_TOLERANCE)


def _randn(g: Geometry, device: str) -> Callable[..., torch.Tensor]:
    gen = torch.Generator(device).manual_seed(0)
    return lambda *shape: torch.randn(shape, generator=gen, device=device, dtype=g.dtype)


def _build_reshape_and_cache(g: Geometry, device: str, tokens: int) -> Built:
    rnd = _randn(g, device)
    key, value = rnd(tokens, g.kv_heads, g.head), rnd(tokens, g.kv_heads, g.head)
    blocks = 2 * _cdiv(tokens, g.block)  # room for twice the tokens: slots spread over the cache
    kv_cache = torch.zeros(2, blocks, g.block, g.kv_heads, g.head, device=device, dtype=g.dtype)
    gen = torch.Generator(device).manual_seed(1)
    slots = torch.randperm(blocks * g.block, generator=gen, device=device)[:tokens]

    def check() -> bool:
        got, want = kv_cache.clone(), kv_cache.clone()
        reshape_and_cache(key, value, got[0], got[1], slots)
        reshape_and_cache_ref(key, value, want[0], want[1], slots)
        return _close(got, want)

    return Built(
        run=lambda: reshape_and_cache(key, value, kv_cache[0], kv_cache[1], slots),
        check=check,
        nbytes=reshape_and_cache_bytes(g, tokens),
    )


def _build_rotary(g: Geometry, device: str, tokens: int) -> Built:
    rnd = _randn(g, device)
    qkv = rnd(tokens, (g.q_heads + 2 * g.kv_heads) * g.head)
    cos_sin = rnd(g.max_pos, g.head)
    positions = torch.arange(tokens, device=device) % g.max_pos  # one prefill sequence
    rows = int(positions.unique().numel())
    widths = [g.q_heads * g.head, g.kv_heads * g.head, g.kv_heads * g.head]

    def call(fn: Callable[..., None], t: torch.Tensor) -> None:
        q, k, _ = t.split(widths, dim=-1)  # strided views, as in serving
        fn(positions, q, k, cos_sin, g.head, True)

    def check() -> bool:
        got, want = qkv.clone(), qkv.clone()
        call(rotary_embedding, got)
        call(rotary_embedding_ref, want)
        return _close(got, want)

    return Built(lambda: call(rotary_embedding, qkv), check, rotary_bytes(g, tokens, rows))


def _build_rms_norm(g: Geometry, device: str, tokens: int) -> Built:
    rnd = _randn(g, device)
    x, residual, weight = rnd(tokens, g.hidden), rnd(tokens, g.hidden), rnd(g.hidden)

    def check() -> bool:
        got, want = (x.clone(), residual.clone()), (x.clone(), residual.clone())
        fused_add_rms_norm(*got, weight, 1e-6)
        fused_add_rms_norm_ref(*want, weight, 1e-6)
        return all(_close(a, b) for a, b in zip(got, want))

    return Built(
        run=lambda: fused_add_rms_norm(x, residual, weight, 1e-6),
        check=check,
        nbytes=rms_norm_bytes(g, tokens),
    )


def _build_attention(g: Geometry, device: str, batch: int, context: int) -> Built:
    # Equal context lengths; each sequence's blocks are a random slice of a permutation.
    rnd = _randn(g, device)
    per_seq = _cdiv(context, g.block)
    kv_cache = rnd(2, batch * per_seq, g.block, g.kv_heads, g.head)
    key_cache, value_cache = kv_cache[0], kv_cache[1]
    query = rnd(batch, g.q_heads, g.head)
    out = torch.empty_like(query)
    gen = torch.Generator(device).manual_seed(1)
    perm = torch.randperm(batch * per_seq, generator=gen, device=device)
    tables = perm.view(batch, per_seq).to(torch.int32)
    seq_lens = torch.full((batch,), context, dtype=torch.int32, device=device)
    scale = g.head**-0.5

    def attend(o: torch.Tensor) -> None:
        paged_decode_attention(o, query, key_cache, value_cache, tables, seq_lens, scale)

    def check() -> bool:  # the full launch; the fp32 reference on its first two sequences
        n = min(batch, 2)
        got, want = torch.empty_like(query), torch.empty_like(query[:n])
        attend(got)
        paged_decode_attention_ref(
            want, query[:n], key_cache, value_cache, tables[:n], seq_lens[:n], scale
        )
        return _close(got[:n], want)

    def baseline() -> Callable[[], Any]:
        k, v = (_gather(c, tables, context) for c in (key_cache, value_cache))
        return _sdpa(query.unsqueeze(2), k, v, scale)

    return Built(lambda: attend(out), check, attention_bytes(g, batch, context), baseline)


def _gather(cache: torch.Tensor, tables: torch.Tensor, context: int) -> torch.Tensor:
    """``[batch, kv_heads, context, head]`` contiguous K or V of each sequence, in order."""
    rows = cache[tables.long()].flatten(1, 2)[:, :context]  # [batch, context, kv_heads, head]
    return rows.transpose(1, 2).contiguous()


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> Callable[[], Any]:
    """SDPA of ``q [batch, q_heads, 1, head]`` over ``k``/``v [batch, kv_heads, ctx, head]``:
    with ``enable_gqa`` where this torch has it, else the KV heads repeated beforehand."""
    try:  # a builtin: no signature to inspect, so call it once (outside the timed region)
        F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=True)
        return lambda: F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=True)
    except TypeError:  # torch < 2.5
        pass
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    return lambda: F.scaled_dot_product_attention(q, k, v, scale=scale)


_BUILDERS = {
    "reshape_and_cache": _build_reshape_and_cache,
    "rotary_embedding": _build_rotary,
    "fused_add_rms_norm": _build_rms_norm,
    "paged_attention": _build_attention,
}


def plan(
    sweep: dict[str, tuple[int, ...]],
    kernels: list[str],
    max_gib: float,
    geometry: Geometry = SERVING,
) -> tuple[list[Case], list[Case]]:
    """``(cases to measure, attention cases skipped)``, in table order; an attention point is
    skipped when its K/V cache (:func:`kv_cache_bytes`) would exceed ``max_gib`` GiB."""
    todo, skipped = [], []
    for kernel in (k for k in GOALS if k in kernels):
        if kernel != "paged_attention":
            todo += [Case(kernel, {"tokens": t}, geometry) for t in sweep["tokens"]]
            continue
        for b in sweep["batch"]:
            for c in sweep["context"]:
                case = Case(kernel, {"batch": b, "context": c}, geometry)
                fits = kv_cache_bytes(geometry, b, c) <= max_gib * 2**30
                (todo if fits else skipped).append(case)
    return todo, skipped
