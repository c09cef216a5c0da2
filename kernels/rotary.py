"""In-place rotary position embedding of query and key (vLLM ``rotary_embedding``).

Shapes:
    positions       [num_tokens] int64 (or int32): position of each token
    query           [num_tokens, num_q_heads * head_dim], rotated in place
    key             [num_tokens, num_kv_heads * head_dim], rotated in place; in practice query
                    and key are views from ``qkv.split([q, k, v], dim=-1)``, so their row stride
                    is the width of the whole qkv row, not their own
    cos_sin_cache   [max_position, head_dim]: cos in the first half, sin in the second half

Semantics for one head ``x`` of one token at position ``p``, with ``half = head_dim // 2``,
``cos = cos_sin_cache[p, :half]`` and ``sin = cos_sin_cache[p, half:]`` (computed in fp32)::

    if is_neox:
        i1, i2 = arange(half), arange(half) + half     # halves
    else:
        i1, i2 = arange(half) * 2, arange(half) * 2 + 1  # interleaved pairs
    x[i1], x[i2] = x[i1] * cos - x[i2] * sin, x[i2] * cos + x[i1] * sin

NeoX style rotates the two halves of the head against each other; GPT-J style
(``is_neox=False``) rotates interleaved pairs. The whole head is rotated (rot_dim == head_dim).

Contract: ``0 <= positions[t] < max_position`` (there is no padding value: a padding token takes
any valid position, e.g. 0). An invalid position raises ValueError naming its index before
anything is written, whenever the indices are checked (Note [Index checks] in ``_checks.py``);
unchecked, the kernel reads nothing outside ``cos_sin_cache`` and writes NaN to that token's
query and key rows. NaN/inf in the inputs propagate as in the reference.

Provenance: semantics and cache layout follow vLLM's ``rotary_embedding`` CUDA kernel
(csrc/pos_encoding_kernels.cu); the Triton kernel is written from scratch.
Changes: no partial rotary (rot_dim < head_dim) and no 3-D ``[tokens, heads, head_dim]`` inputs;
every stride is a kernel argument; invalid inputs raise ValueError/TypeError; positions are
range-masked.
"""

from __future__ import annotations

import torch

from ._checks import (
    check_index_values,
    check_no_internal_overlap,
    check_one_device,
    check_tensors,
    index_checks_enabled,
)
from ._triton import require_triton, tl, triton, use_triton

__all__ = ["rotary_embedding", "rotary_embedding_op", "rotary_embedding_ref"]


def rotary_embedding_ref(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_dim: int,
    is_neox: bool,
) -> None:
    """PyTorch reference: rotates ``query`` and ``key`` in place (see module).
    Trusts its inputs: the custom op validates them first (:func:`_check_args`)."""
    cos, sin = cos_sin_cache[positions.long()].float().chunk(2, dim=-1)  # [num_tokens, half]
    cos, sin = cos[:, None, :], sin[:, None, :]
    for x in (query, key):
        heads = x.float().unflatten(-1, (-1, head_dim))  # [num_tokens, num_heads, head_dim]
        if is_neox:
            x1, x2 = heads.chunk(2, dim=-1)
        else:
            x1, x2 = heads[..., 0::2], heads[..., 1::2]
        o1, o2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
        if is_neox:
            rotated = torch.cat([o1, o2], dim=-1)
        else:
            rotated = torch.stack([o1, o2], dim=-1).flatten(-2)
        x.copy_(rotated.flatten(1))  # copy_ writes through views (e.g. into qkv)


@triton.jit
def _rotate_heads(
    x_ptr,  # [num_heads * head_dim] row of one token
    stride_x_dim: tl.int64,
    num_heads,
    cos,  # [1, HALF_PAD] fp32
    sin,  # [1, HALF_PAD] fp32
    pair_mask,  # [1, HALF_PAD]
    HEAD_DIM: tl.constexpr,
    HEADS_PAD: tl.constexpr,
    HALF_PAD: tl.constexpr,
    IS_NEOX: tl.constexpr,
):
    """Rotate every head of one token row: a [HEADS_PAD, HALF_PAD] tile of (x1, x2) pairs."""
    heads = tl.arange(0, HEADS_PAD)[:, None]
    pairs = tl.arange(0, HALF_PAD)[None, :]
    if IS_NEOX:
        first = pairs
        second = pairs + HEAD_DIM // 2
    else:
        first = pairs * 2
        second = pairs * 2 + 1
    mask = (heads < num_heads) & pair_mask
    ptrs1 = x_ptr + (heads * HEAD_DIM + first) * stride_x_dim
    ptrs2 = x_ptr + (heads * HEAD_DIM + second) * stride_x_dim
    x1 = tl.load(ptrs1, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(ptrs2, mask=mask, other=0.0).to(tl.float32)
    tl.store(ptrs1, (x1 * cos - x2 * sin).to(x_ptr.dtype.element_ty), mask=mask)
    tl.store(ptrs2, (x2 * cos + x1 * sin).to(x_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rotary_embedding_kernel(
    # pointers
    positions_ptr,  # [num_tokens] int64 / int32
    query_ptr,  # [num_tokens, num_q_heads * head_dim]
    key_ptr,  # [num_tokens, num_kv_heads * head_dim]
    cos_sin_cache_ptr,  # [max_position, head_dim]
    # sizes
    num_q_heads,
    num_kv_heads,
    max_position,  # rows of cos_sin_cache: valid positions are [0, max_position)
    # strides
    stride_positions_token: tl.int64,
    stride_query_token: tl.int64,
    stride_query_dim: tl.int64,
    stride_key_token: tl.int64,
    stride_key_dim: tl.int64,
    stride_cos_sin_cache_pos: tl.int64,
    stride_cos_sin_cache_dim: tl.int64,
    # meta-parameters
    HEAD_DIM: tl.constexpr,  # even
    Q_HEADS_PAD: tl.constexpr,  # next power of 2 >= num_q_heads
    KV_HEADS_PAD: tl.constexpr,  # next power of 2 >= num_kv_heads
    HALF_PAD: tl.constexpr,  # next power of 2 >= HEAD_DIM // 2
    IS_NEOX: tl.constexpr,
):
    # --- program id -> token; its position's cos/sin row, shared by every head. A position
    # outside the table loads nothing: cos = sin = NaN poisons the token's rows instead ---------
    token = tl.program_id(0)
    pos = tl.load(positions_ptr + token * stride_positions_token).to(tl.int64)
    pairs = tl.arange(0, HALF_PAD)[None, :]
    pair_mask = pairs < HEAD_DIM // 2
    # folded into the bound: the interpreter turns a scalar & tile of booleans into integers
    cs_mask = pairs < tl.where((pos >= 0) & (pos < max_position), HEAD_DIM // 2, 0)
    cs_ptrs = cos_sin_cache_ptr + pos * stride_cos_sin_cache_pos
    cos = tl.load(cs_ptrs + pairs * stride_cos_sin_cache_dim, mask=cs_mask, other=float("nan"))
    sin = tl.load(
        cs_ptrs + (pairs + HEAD_DIM // 2) * stride_cos_sin_cache_dim,
        mask=cs_mask,
        other=float("nan"),
    )
    cos = cos.to(tl.float32)
    sin = sin.to(tl.float32)

    # --- rotate all query heads, then all key heads, of this token ------------------------------
    _rotate_heads(
        query_ptr + token * stride_query_token,
        stride_query_dim,
        num_q_heads,
        cos,
        sin,
        pair_mask,
        HEAD_DIM,
        Q_HEADS_PAD,
        HALF_PAD,
        IS_NEOX,
    )
    _rotate_heads(
        key_ptr + token * stride_key_token,
        stride_key_dim,
        num_kv_heads,
        cos,
        sin,
        pair_mask,
        HEAD_DIM,
        KV_HEADS_PAD,
        HALF_PAD,
        IS_NEOX,
    )


# Heuristics instead of autotuning: one program per token rotates all of its heads, so cos/sin
# are loaded once per token; the kernel is memory bound and the tile is fixed by the model
# (heads x head_dim / 2). 4 warps cover tiles up to 4096 pairs (32 heads x 128), 8 beyond.
def _launch_config(num_q_heads: int, num_kv_heads: int, head_dim: int) -> dict[str, int]:
    q_heads_pad = triton.next_power_of_2(num_q_heads)
    half_pad = triton.next_power_of_2(head_dim // 2)
    return {
        "Q_HEADS_PAD": q_heads_pad,
        "KV_HEADS_PAD": triton.next_power_of_2(num_kv_heads),
        "HALF_PAD": half_pad,
        "num_warps": 4 if q_heads_pad * half_pad <= 4096 else 8,
    }


def _check_args(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_dim: int,
    *,
    check_values: bool,
) -> None:
    """The one validation of rotary_embedding's inputs, run by the launcher, the custom op's
    reference path and the fake (``check_values=False``: shapes and dtypes only). Raises
    ValueError/TypeError naming the offending argument, its shape and dtype; with
    ``check_values``, also the first position outside ``cos_sin_cache`` (a device sync on a
    GPU)."""
    named = {"positions": positions, "query": query, "key": key, "cos_sin_cache": cos_sin_cache}
    ndims = {"positions": 1, "query": 2, "key": 2, "cos_sin_cache": 2}
    check_tensors("rotary_embedding", {n: (t, ndims[n]) for n, t in named.items()})
    if not isinstance(head_dim, int) or head_dim <= 0 or head_dim % 2:
        raise ValueError(f"rotary_embedding: head_dim must be a positive even int, got {head_dim}")
    for name in ("query", "key"):
        t = named[name]
        if t.shape[1] % head_dim:
            raise ValueError(
                f"rotary_embedding: {name} {tuple(t.shape)} last dim is not a multiple of "
                f"head_dim={head_dim}"
            )
        if t.shape[0] != positions.shape[0]:
            raise ValueError(
                f"rotary_embedding: {name} {tuple(t.shape)} must have one row per position "
                f"(positions {tuple(positions.shape)})"
            )
    if cos_sin_cache.shape[1] != head_dim:
        raise ValueError(
            f"rotary_embedding: cos_sin_cache [max_position, rot_dim] {tuple(cos_sin_cache.shape)}"
            f" must have rot_dim == head_dim={head_dim} (partial rotary is not supported)"
        )
    if positions.dtype not in (torch.int64, torch.int32):
        raise TypeError(
            f"rotary_embedding: positions must be int64 or int32, got {positions.dtype}"
        )
    for name in ("query", "key", "cos_sin_cache"):
        if not named[name].is_floating_point():
            raise TypeError(
                f"rotary_embedding: {name} must be floating point, got {named[name].dtype}"
            )
    check_one_device("rotary_embedding", named)
    check_no_internal_overlap("rotary_embedding", {"query": query, "key": key})
    if check_values:
        max_position = cos_sin_cache.shape[0]
        check_index_values(
            "rotary_embedding",
            "positions",
            positions,
            (positions < 0) | (positions >= max_position),
            f"a position is in [0, max_position = {max_position}) for cos_sin_cache "
            f"{tuple(cos_sin_cache.shape)}",
        )


def rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_dim: int,
    is_neox: bool,
) -> None:
    """Launch :func:`_rotary_embedding_kernel`; rotates ``query`` and ``key`` in place.

    Args:
        positions: ``[num_tokens]`` int64 or int32.
        query: ``[num_tokens, num_q_heads * head_dim]``, any strides (e.g. a qkv split view).
        key: ``[num_tokens, num_kv_heads * head_dim]``, any strides.
        cos_sin_cache: ``[max_position, head_dim]``, cos then sin.
        head_dim: size of one head, even.
        is_neox: rotate halves (NeoX) if true, interleaved pairs (GPT-J) if false.

    Raises:
        TypeError: non-tensor arguments or wrong dtypes.
        ValueError: mismatched shapes, an odd ``head_dim``, an overlapping ``query``/``key``, or
            (when indices are checked, Note [Index checks]) a position outside the table.
        RuntimeError: Triton is not installed.
    """
    require_triton("rotary_embedding")
    _check_args(
        positions,
        query,
        key,
        cos_sin_cache,
        head_dim,
        check_values=index_checks_enabled(positions),
    )
    num_q_heads, num_kv_heads = query.shape[1] // head_dim, key.shape[1] // head_dim
    _rotary_embedding_kernel[(positions.shape[0],)](
        positions_ptr=positions,
        query_ptr=query,
        key_ptr=key,
        cos_sin_cache_ptr=cos_sin_cache,
        num_q_heads=num_q_heads,
        num_kv_heads=num_kv_heads,
        max_position=cos_sin_cache.shape[0],
        stride_positions_token=positions.stride(0),
        stride_query_token=query.stride(0),
        stride_query_dim=query.stride(1),
        stride_key_token=key.stride(0),
        stride_key_dim=key.stride(1),
        stride_cos_sin_cache_pos=cos_sin_cache.stride(0),
        stride_cos_sin_cache_dim=cos_sin_cache.stride(1),
        HEAD_DIM=head_dim,
        IS_NEOX=bool(is_neox),
        **_launch_config(num_q_heads, num_kv_heads, head_dim),
    )


@torch.library.custom_op("autofunc_kernels::rotary_embedding", mutates_args=("query", "key"))
def rotary_embedding_op(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_dim: int,
    is_neox: bool,
) -> None:
    """Custom op: the Triton launcher on CUDA when Triton is installed, else the reference
    (after the same validation, positions included)."""
    if use_triton(query):
        rotary_embedding(positions, query, key, cos_sin_cache, head_dim, is_neox)
    else:
        _check_args(positions, query, key, cos_sin_cache, head_dim, check_values=True)
        rotary_embedding_ref(positions, query, key, cos_sin_cache, head_dim, is_neox)


@rotary_embedding_op.register_fake
def _rotary_embedding_fake(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_dim: int,
    is_neox: bool,
) -> None:
    _check_args(positions, query, key, cos_sin_cache, head_dim, check_values=False)
