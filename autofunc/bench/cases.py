"""What the benchmarks run: the decoder step and each of its four mutable ops alone.

A :class:`Case` turns a :class:`~autofunc.bench.model.ModelConfig` into a :class:`Program`:
a function, a factory of fresh inputs, and the ops to register with autofunc. The op-alone
programs take the same paged cache as the model (``[layers, 2, blocks, block_size, heads,
head_dim]``) and mutate views of it, so their memory scales with the cache size like the model's.
How the programs are measured lives in ``measure``/``run``, how they are shown in ``report``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from ..kernels import (
    fused_add_rms_norm_op,
    paged_decode_attention_op,
    reshape_and_cache_op,
    rotary_embedding_op,
)
from .model import MUTABLE_OPS, ModelConfig, TinyDecoder, make_inputs

__all__ = ["CASES", "Case", "Program", "build", "example_kv"]


@dataclasses.dataclass(frozen=True)
class Program:
    fn: Callable
    make_args: Callable[[], tuple]  # fresh inputs on every call (the programs mutate them)
    ops: tuple  # the mutable custom ops the program calls
    cache_bytes: int  # the point's KV cache size: the x axis, even for a program without one
    # The program launches user Triton kernels (no custom op): autofunc's configurations turn
    # on ``autofunc.reinplace_triton_kernels()``, the built-in's leave them to PyTorch. On CPU
    # such a program is measured on Inductor's post-grad graph (``run._measure_graph``).
    triton: bool = False
    eager_fn: Callable | None = None  # ``fn`` as eager runs it, where that differs (CPU kernels)


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[ModelConfig, str, torch.dtype], Program]
    note: str


def _model(c: ModelConfig, device: str, dtype: torch.dtype) -> Program:
    model = TinyDecoder(c, device, dtype)
    return Program(
        model, lambda: make_inputs(c, device, dtype).args(), MUTABLE_OPS, c.cache_bytes(dtype)
    )


def _layer(c: ModelConfig) -> int:
    return min(1, c.layers - 1)  # a layer other than the first when there is one


def _reshape_and_cache(c: ModelConfig, device: str, dtype: torch.dtype) -> Program:
    layer = _layer(c)

    def reshape_and_cache(kv_cache, k, v, slots):
        reshape_and_cache_op(k, v, kv_cache[layer, 0], kv_cache[layer, 1], slots)

    def make_args() -> tuple:
        i = make_inputs(c, device, dtype)
        k, v = _randn(c, device, dtype, 2, c.batch, c.kv_heads, c.head_dim)
        return i.kv_cache, k, v, i.slot_mapping

    return Program(reshape_and_cache, make_args, (reshape_and_cache_op,), c.cache_bytes(dtype))


def _cache_viewed(view: Callable[[torch.Tensor], torch.Tensor], stored: torch.dtype | None):
    """reshape_and_cache into ``view(kv_cache[l, i])`` of every layer, the cache stored as
    ``stored`` (default: the model's dtype)."""

    def make(c: ModelConfig, device: str, dtype: torch.dtype) -> Program:
        def write_every_layer(kv_cache, k, v, slots):
            for layer in range(kv_cache.shape[0]):
                key_cache, value_cache = view(kv_cache[layer, 0]), view(kv_cache[layer, 1])
                reshape_and_cache_op(k, v, key_cache, value_cache, slots)
            return k.sum()

        def make_args() -> tuple:
            i = make_inputs(c, device, dtype)
            kv = i.kv_cache if stored is None else torch.zeros_like(i.kv_cache, dtype=stored)
            k, v = _randn(c, device, dtype, 2, c.batch, c.kv_heads, c.head_dim)
            return kv, k, v, i.slot_mapping

        nbytes = c.cache_bytes(stored or dtype)
        return Program(write_every_layer, make_args, (reshape_and_cache_op,), nbytes)

    return make


def _paged_decode_attention(c: ModelConfig, device: str, dtype: torch.dtype) -> Program:
    layer, scale = _layer(c), c.head_dim**-0.5

    def paged_decode_attention(kv_cache, q, block_tables, seq_lens):
        out = torch.empty_like(q)
        paged_decode_attention_op(
            out, q, kv_cache[layer, 0], kv_cache[layer, 1], block_tables, seq_lens, scale
        )
        return out

    def make_args() -> tuple:
        i = make_inputs(c, device, dtype)
        (q,) = _randn(c, device, dtype, 1, c.batch, c.heads, c.head_dim)
        return i.kv_cache, q, i.block_tables, i.seq_lens

    return Program(
        paged_decode_attention, make_args, (paged_decode_attention_op,), c.cache_bytes(dtype)
    )


def _rotary_embedding(c: ModelConfig, device: str, dtype: torch.dtype) -> Program:
    widths = [c.heads * c.head_dim, c.kv_heads * c.head_dim, c.kv_heads * c.head_dim]
    model = TinyDecoder(dataclasses.replace(c, layers=0), device, dtype)  # for its cos/sin cache

    def rotary_embedding(positions, qkv, cos_sin_cache):
        q, k, _ = qkv.split(widths, dim=-1)
        rotary_embedding_op(positions, q, k, cos_sin_cache, c.head_dim, True)

    def make_args() -> tuple:
        i = make_inputs(c, device, dtype)
        (qkv,) = _randn(c, device, dtype, 1, c.batch, sum(widths))
        return i.positions, qkv, model.cos_sin_cache

    return Program(rotary_embedding, make_args, (rotary_embedding_op,), c.cache_bytes(dtype))


def _fused_add_rms_norm(c: ModelConfig, device: str, dtype: torch.dtype) -> Program:
    eps = c.eps

    def fused_add_rms_norm(x, residual, weight):
        fused_add_rms_norm_op(x, residual, weight, eps)

    def make_args() -> tuple:
        x, residual, weight = _randn(c, device, dtype, 3, c.batch, c.hidden)
        return x, residual, weight[0]

    return Program(fused_add_rms_norm, make_args, (fused_add_rms_norm_op,), c.cache_bytes(dtype))


def _user_triton(c: ModelConfig, device: str, dtype: torch.dtype) -> Program:
    """The project's reshape_and_cache kernel launched as a user Triton kernel
    (``torch.library.wrap_triton``) on ``kv[l, 0]``/``kv[l, 1]`` of every layer."""
    from torch.library import wrap_triton

    from ..kernels.reshape_and_cache import _reshape_and_cache_kernel, launch_args

    def step(launch: Callable, kernel: Any) -> Callable:
        def user_triton_kernel(kv_cache, k, v, slots):
            for layer in range(kv_cache.shape[0]):
                grid, kwargs = launch_args(k, v, kv_cache[layer, 0], kv_cache[layer, 1], slots)
                launch(kernel)[grid](**kwargs)
            return k.sum()

        return user_triton_kernel

    kernel, eager_fn = _reshape_and_cache_kernel, None
    if not device.startswith("cuda"):  # traced as a JITFunction, run by Triton's interpreter
        from . import user_triton

        kernel = user_triton.jit(getattr(kernel, "fn", kernel))
        user_triton.preload(kernel)
        eager_fn = step(user_triton.eager, kernel)

    def make_args() -> tuple:
        i = make_inputs(c, device, dtype)
        k, v = _randn(c, device, dtype, 2, c.batch, c.kv_heads, c.head_dim)
        return i.kv_cache, k, v, i.slot_mapping

    fn = step(wrap_triton, kernel)
    return Program(fn, make_args, (), c.cache_bytes(dtype), triton=True, eager_fn=eager_fn)


def _randn(
    c: ModelConfig, device: str, dtype: torch.dtype, n: int, *shape: int
) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(c.seed + 2)
    return [torch.randn(*shape, generator=gen).to(device, dtype) for _ in range(n)]


CASES: dict[str, Case] = {
    case.name: case
    for case in (
        Case("model", _model, "the decode step: 4 mutable calls per layer"),
        Case("reshape_and_cache", _reshape_and_cache, "writes kv_cache[l, 0] and kv_cache[l, 1]"),
        Case(
            "paged_decode_attention", _paged_decode_attention, "writes a fresh out; reads the cache"
        ),
        Case("rotary_embedding", _rotary_embedding, "rotates views q, k of an input qkv"),
        Case("fused_add_rms_norm", _fused_add_rms_norm, "updates inputs x and residual"),
        Case(
            "fp8_cache",
            _cache_viewed(lambda t: t.view(torch.float8_e4m3fn), torch.uint8),
            "an fp8 cache stored as uint8, written through kv[l, i].view(float8_e4m3fn)",
        ),
        Case(
            "same_dtype_view",
            _cache_viewed(lambda t: t.view(t.dtype), None),
            "the cache written through kv[l, i].view(its own dtype)",
        ),
        Case(
            "user_triton",
            _user_triton,
            "reshape_and_cache as a user Triton kernel (wrap_triton) into every layer, no "
            "custom op; on CPU measured on Inductor's post-grad graph",
        ),
    )
}


def build(
    case: str, config: ModelConfig, device: str = "cpu", dtype: torch.dtype = torch.float32
) -> Program:
    """The program of ``case`` at ``config``.

    Raises:
        KeyError: unknown case (the message lists the known ones).
    """
    if case not in CASES:
        raise KeyError(f"unknown bench case {case!r}; known: {', '.join(CASES)}")
    return CASES[case].make(config, device, dtype)


def example_kv() -> tuple[Any, tuple, tuple]:
    """``(fn, args, ops)`` of a 2-layer decode step, for
    ``autofunc explain autofunc.bench.cases:example_kv``: ``explain`` registers ``ops`` (the
    model's four mutable ops) with the requested strategy (default v2) for that call only.
    """
    program = build("model", ModelConfig(layers=2))
    return program.fn, program.make_args(), program.ops
