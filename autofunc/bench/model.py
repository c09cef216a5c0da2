"""A small vLLM-style decoder whose decode step calls the four mutable kernel ops.

Owns ``ModelConfig``, ``TinyDecoder`` and ``make_inputs``: the model the benchmarks, the
example and the tests compile. Per layer the step makes four mutable calls (so ``4 * layers``
HOP nodes once functionalized)::

    fused_add_rms_norm(x, residual, w, eps)                  # mutates x, residual
    q, k, v = (x @ w_qkv).split(...)
    rotary_embedding(positions, q, k, cos_sin, head_dim)     # mutates views q, k of qkv
    reshape_and_cache(k, v, kv_cache[l, 0], kv_cache[l, 1], slots)   # mutates cache views
    paged_decode_attention(out, q, kv_cache[l, 0], kv_cache[l, 1], ...)  # mutates out

The whole paged KV cache is ONE input ``[layers, 2, num_blocks, block_size, kv_heads,
head_dim]``, as in vLLM: v1 has to clone each cache view it mutates, v2 clones the cache once
per call and the re-inplace pass must remove that clone. Imports only torch and the kernels.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from ..kernels import (
    fused_add_rms_norm_op,
    paged_decode_attention_op,
    reshape_and_cache_op,
    rotary_embedding_op,
)

__all__ = ["MUTABLE_OPS", "Inputs", "ModelConfig", "TinyDecoder", "make_inputs"]

# The custom ops the model calls; each mutates some of its arguments.
MUTABLE_OPS = (
    fused_add_rms_norm_op,  # x, residual
    rotary_embedding_op,  # query, key
    reshape_and_cache_op,  # key_cache, value_cache
    paged_decode_attention_op,  # out
)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    layers: int = 2
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    num_blocks: int = 16  # physical cache blocks (the cache size)
    block_size: int = 16
    batch: int = 4  # sequences, one new token each
    intermediate: int = 128  # MLP width
    max_position: int = 4096
    eps: float = 1e-6
    seed: int = 0

    @property
    def max_blocks(self) -> int:
        """Blocks per sequence in the block table (each sequence owns its blocks)."""
        return max(1, self.num_blocks // self.batch)

    def cache_shape(self) -> tuple[int, ...]:
        return (self.layers, 2, self.num_blocks, self.block_size, self.kv_heads, self.head_dim)

    def cache_bytes(self, dtype: torch.dtype = torch.float32) -> int:
        n = 1
        for s in self.cache_shape():
            n *= s
        return n * dtype.itemsize


class TinyDecoder(nn.Module):
    """``forward(hidden, positions, kv_cache, slot_mapping, block_tables, seq_lens) -> hidden``.

    Weights are drawn from a generator seeded with ``config.seed``, so two models with one
    config are identical on every device.
    """

    def __init__(
        self,
        config: ModelConfig,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ):
        super().__init__()
        c = self.config = config
        if c.heads % c.kv_heads or c.head_dim % 2:
            raise ValueError(
                f"TinyDecoder: heads must be a multiple of kv_heads and head_dim even, got {c}"
            )
        gen = torch.Generator().manual_seed(c.seed)

        def weight(*shape: int, scale: float) -> nn.Parameter:
            w = torch.randn(*shape, generator=gen) * scale
            return nn.Parameter(w.to(device=device, dtype=dtype), requires_grad=False)

        q, kv = c.heads * c.head_dim, c.kv_heads * c.head_dim
        self.layers = nn.ModuleList()
        for _ in range(c.layers):
            layer = nn.Module()
            layer.norm = nn.Parameter(
                torch.ones(c.hidden, device=device, dtype=dtype), requires_grad=False
            )
            layer.qkv = weight(c.hidden, q + 2 * kv, scale=c.hidden**-0.5)
            layer.o = weight(q, c.hidden, scale=q**-0.5)
            layer.gate_up = weight(c.hidden, 2 * c.intermediate, scale=c.hidden**-0.5)
            layer.down = weight(c.intermediate, c.hidden, scale=c.intermediate**-0.5)
            self.layers.append(layer)
        self.final_norm = nn.Parameter(
            torch.ones(c.hidden, device=device, dtype=dtype), requires_grad=False
        )
        self.register_buffer(
            "cos_sin_cache", _cos_sin_cache(c.max_position, c.head_dim).to(device, dtype)
        )

    def forward(
        self,
        hidden: torch.Tensor,  # [T, hidden]
        positions: torch.Tensor,  # [T] int64
        kv_cache: torch.Tensor,  # [layers, 2, num_blocks, block_size, kv_heads, head_dim]
        slot_mapping: torch.Tensor,  # [T] int64
        block_tables: torch.Tensor,  # [B, max_blocks] int32
        seq_lens: torch.Tensor,  # [B] int32
    ) -> torch.Tensor:
        c = self.config
        num_tokens = hidden.shape[0]
        q_width, kv_width = c.heads * c.head_dim, c.kv_heads * c.head_dim
        # The step's own activations, so the caller's `hidden` is left alone. Note: Inductor's
        # remove_noop_ops drops this clone before post-grad custom passes run, so under Inductor
        # autofunc's pass sees the first fused_add_rms_norm write the graph input and keeps one
        # clone of it (the bytes eager's clone costs anyway; aot_eager keeps the clone instead).
        x = hidden.clone()
        residual = torch.zeros_like(hidden)
        for index, layer in enumerate(self.layers):
            fused_add_rms_norm_op(x, residual, layer.norm, c.eps)
            qkv = x @ layer.qkv
            q, k, v = qkv.split([q_width, kv_width, kv_width], dim=-1)
            rotary_embedding_op(positions, q, k, self.cos_sin_cache, c.head_dim, True)
            k_cache, v_cache = kv_cache[index, 0], kv_cache[index, 1]
            reshape_and_cache_op(
                k.view(num_tokens, c.kv_heads, c.head_dim),
                v.view(num_tokens, c.kv_heads, c.head_dim),
                k_cache,
                v_cache,
                slot_mapping,
            )
            out = torch.empty(
                num_tokens, c.heads, c.head_dim, device=hidden.device, dtype=hidden.dtype
            )
            paged_decode_attention_op(
                out,
                q.view(num_tokens, c.heads, c.head_dim),
                k_cache,
                v_cache,
                block_tables,
                seq_lens,
                c.head_dim**-0.5,
            )
            x = out.view(num_tokens, q_width) @ layer.o
            gate, up = (x @ layer.gate_up).chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ layer.down
        return _rms_norm(x + residual, self.final_norm, c.eps)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def _cos_sin_cache(max_position: int, head_dim: int, base: float = 10000.0) -> torch.Tensor:
    """``[max_position, head_dim]``: cos in the first half, sin in the second (NeoX layout)."""
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    freqs = torch.outer(torch.arange(max_position, dtype=torch.float32), inv_freq)
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1)


@dataclasses.dataclass
class Inputs:
    """One decode step's inputs, in ``TinyDecoder.forward`` order (see ``args()``)."""

    hidden: torch.Tensor
    positions: torch.Tensor
    kv_cache: torch.Tensor
    slot_mapping: torch.Tensor
    block_tables: torch.Tensor
    seq_lens: torch.Tensor

    def args(self) -> tuple[torch.Tensor, ...]:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))

    def clone(self) -> Inputs:
        return Inputs(*(t.clone() for t in self.args()))


def make_inputs(
    config: ModelConfig, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
) -> Inputs:
    """Deterministic decode-step inputs: a pre-filled cache, one new token per sequence.

    Sequence ``s`` owns blocks ``[s * max_blocks, (s + 1) * max_blocks)``; its length (after
    this step) is drawn in ``[1, max_blocks * block_size]`` and its new token goes to slot
    ``block_tables[s, p // block_size] * block_size + p % block_size`` with ``p = len - 1``.
    """
    c = config
    if c.batch * c.max_blocks > c.num_blocks:
        raise ValueError(
            f"make_inputs: {c.batch} sequences need at least {c.batch} cache blocks, got {c}"
        )
    gen = torch.Generator().manual_seed(c.seed + 1)
    hidden = torch.randn(c.batch, c.hidden, generator=gen)
    # The cache can be GiBs: drawn where it lives (so its values differ between devices).
    cache_gen = torch.Generator(device).manual_seed(c.seed + 2)
    kv_cache = torch.randn(c.cache_shape(), generator=cache_gen, device=device, dtype=dtype)
    block_tables = torch.arange(c.batch * c.max_blocks, dtype=torch.int32).view(
        c.batch, c.max_blocks
    )
    seq_lens = torch.randint(
        1, c.max_blocks * c.block_size + 1, (c.batch,), generator=gen, dtype=torch.int32
    )
    positions = (seq_lens - 1).long()
    slot_mapping = (
        block_tables[torch.arange(c.batch), positions // c.block_size].long() * c.block_size
    )
    slot_mapping += positions % c.block_size
    return Inputs(
        hidden.to(device, dtype),
        positions.to(device),
        kv_cache,
        slot_mapping.to(device),
        block_tables.to(device),
        seq_lens.to(device),
    )
