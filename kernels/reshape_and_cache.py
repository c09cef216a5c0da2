"""Scatter this step's keys and values into a paged KV cache (vLLM ``reshape_and_cache``).

Shapes:
    key, value              [num_tokens, num_heads, head_dim]
    key_cache, value_cache  [num_blocks, block_size, num_heads, head_dim]; in practice the
                            non-contiguous views ``kv_cache[layer, 0]`` / ``kv_cache[layer, 1]`` of
                            one ``[num_layers, 2, num_blocks, block_size, num_heads, head_dim]``
    slot_mapping            [num_tokens] int64, ``slot = block * block_size + offset``

Semantics, as plain Python::

    for t, slot in enumerate(slot_mapping):
        if slot == -1:                    # padding token (e.g. CUDA-graph padding): skipped
            continue
        key_cache[slot // block_size, slot % block_size] = key[t]
        value_cache[slot // block_size, slot % block_size] = value[t]

Contract: a slot is ``-1`` (padding) or ``0 <= slot < num_blocks * block_size``; valid slots
should be distinct (duplicates race on a GPU). An invalid slot raises ValueError naming its
position before anything is written, whenever the indices are checked (Note [Index checks] in
``_checks.py``); unchecked, the kernel skips it. Nothing outside the addressed cache rows is
ever written, whatever ``slot_mapping`` holds.

Provenance: layout and padding rule follow vLLM ``triton_reshape_and_cache_flash.py`` @
https://github.com/vllm-project/vllm/blob/3c482f952d9f1484a0ed12ccf772725972ad659d/vllm/attention/ops/triton_reshape_and_cache_flash.py
Changes:
    - every stride (token/head/dim, block/offset/head/dim) is a kernel argument, so heads need
      not be contiguous and key/value may be views with different strides;
    - a 2-D [heads, head_dim] tile per program instead of a flat tile over num_heads * head_dim;
    - no fp8 path (no k_scale/v_scale, no kv_cache_dtype string);
    - inputs are validated with ValueError/TypeError instead of ``assert``, on every path;
    - slots past the cache are masked (vLLM trusts them), not only negative ones.
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

__all__ = ["launch_args", "reshape_and_cache", "reshape_and_cache_op", "reshape_and_cache_ref"]


def reshape_and_cache_ref(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """PyTorch reference: writes ``key``/``value`` rows into the caches in place (see module).
    Follows the kernel's contract on any ``slot_mapping``: a slot outside
    ``[0, num_blocks * block_size)`` (``-1`` padding or invalid) is skipped, as the unchecked
    kernel skips it; the other inputs are trusted (the custom op validates them first,
    :func:`_check_args`)."""
    block_size = key_cache.shape[1]
    num_slots = key_cache.shape[0] * block_size
    valid = (slot_mapping >= 0) & (slot_mapping < num_slots)
    slots = slot_mapping[valid].long()
    blocks, offsets = slots // block_size, slots % block_size
    # Advanced-index assignment is index_put_ on the view: it writes through to the base tensor.
    key_cache[blocks, offsets] = key[valid].to(key_cache.dtype)
    value_cache[blocks, offsets] = value[valid].to(value_cache.dtype)


@triton.jit
def _reshape_and_cache_kernel(
    # pointers
    key_ptr,  # [num_tokens, num_heads, head_dim]
    value_ptr,  # [num_tokens, num_heads, head_dim]
    key_cache_ptr,  # [num_blocks, block_size, num_heads, head_dim]
    value_cache_ptr,  # [num_blocks, block_size, num_heads, head_dim]
    slot_mapping_ptr,  # [num_tokens] int64
    # sizes
    num_tokens,
    num_heads,
    head_dim,
    block_size,
    num_slots,  # num_blocks * block_size: valid slots are [0, num_slots)
    # strides
    stride_key_token: tl.int64,
    stride_key_head: tl.int64,
    stride_key_dim: tl.int64,
    stride_value_token: tl.int64,
    stride_value_head: tl.int64,
    stride_value_dim: tl.int64,
    stride_key_cache_block: tl.int64,
    stride_key_cache_offset: tl.int64,
    stride_key_cache_head: tl.int64,
    stride_key_cache_dim: tl.int64,
    stride_value_cache_block: tl.int64,
    stride_value_cache_offset: tl.int64,
    stride_value_cache_head: tl.int64,
    stride_value_cache_dim: tl.int64,
    stride_slot_mapping_token: tl.int64,
    # meta-parameters
    TOKEN_BLOCK: tl.constexpr,  # tokens per program
    HEAD_BLOCK: tl.constexpr,  # heads per program
    HEAD_DIM_PAD: tl.constexpr,  # next power of 2 >= head_dim
):
    # --- program id -> (TOKEN_BLOCK tokens, head group); the (head, dim) tile is the same for
    # each of them ------------------------------------------------------------------------------
    token_group = tl.program_id(0)
    head_group = tl.program_id(1)
    heads = head_group * HEAD_BLOCK + tl.arange(0, HEAD_BLOCK)
    dims = tl.arange(0, HEAD_DIM_PAD)
    for i in tl.static_range(TOKEN_BLOCK):
        token = token_group * TOKEN_BLOCK + i
        # a token past the end (the last group's tail) is padding: its slot reads as -1
        slot = tl.load(
            slot_mapping_ptr + tl.minimum(token, num_tokens - 1) * stride_slot_mapping_token
        ).to(tl.int64)
        slot = tl.where(token < num_tokens, slot, -1)
        block = slot // block_size
        offset = slot % block_size

        # --- [HEAD_BLOCK, HEAD_DIM_PAD] tile of (head, dim) indices. Padding (-1) and any slot
        # outside the cache copy zero heads: the whole tile is masked, so the cache is never
        # addressed out of bounds. (The scalar check is folded into the bound, not and-ed with
        # the tile mask: the interpreter turns a scalar & tile of booleans into integers.) ------
        heads_to_copy = tl.where((slot >= 0) & (slot < num_slots), num_heads, 0)
        mask = (heads[:, None] < heads_to_copy) & (dims[None, :] < head_dim)

        # --- copy key row -> key_cache[block, offset] -------------------------------------------
        src = key_ptr + token * stride_key_token
        src += heads[:, None] * stride_key_head + dims[None, :] * stride_key_dim
        dst = key_cache_ptr + block * stride_key_cache_block + offset * stride_key_cache_offset
        dst += heads[:, None] * stride_key_cache_head + dims[None, :] * stride_key_cache_dim
        tile = tl.load(src, mask=mask)
        tl.store(dst, tile.to(key_cache_ptr.dtype.element_ty), mask=mask)

        # --- copy value row -> value_cache[block, offset] ---------------------------------------
        src = value_ptr + token * stride_value_token
        src += heads[:, None] * stride_value_head + dims[None, :] * stride_value_dim
        dst = value_cache_ptr + block * stride_value_cache_block
        dst += offset * stride_value_cache_offset
        dst += heads[:, None] * stride_value_cache_head + dims[None, :] * stride_value_cache_dim
        tile = tl.load(src, mask=mask)
        tl.store(dst, tile.to(value_cache_ptr.dtype.element_ty), mask=mask)


# Heuristics instead of autotuning: this is a pure copy (memory bound) launched once per layer per
# step on a few KB, so autotune's first-call benchmarking would cost more than it could save.
# A tile of at most _MAX_TILE elements keeps registers low; 4 warps suffice for that size.
# Note [Tokens per program]
# One token's row is a few KB (8 heads x 128 x 2 B = 2 KB each for key and value), too little
# work for a program once a prefill brings thousands of tokens: a program then moves several
# tokens, one after the other, so there are fewer, longer programs. Up to _TOKENS_ALONE tokens
# each keeps a program of its own, so a decode batch still spreads over every SM (132 on an
# H100); beyond, tokens per program double with the token count, up to _MAX_TOKEN_BLOCK.
# Written from the shape of the fast copy kernels, not measured here (no GPU): the campaign's
# kernel table (scripts/gpu_campaign.sh) is where the numbers will come from.
_MAX_TILE = 2048
_TOKENS_ALONE = 512
_MAX_TOKEN_BLOCK = 8


def _launch_config(num_tokens: int, num_heads: int, head_dim: int) -> dict[str, int]:
    head_dim_pad = triton.next_power_of_2(head_dim)
    head_block = max(1, min(triton.next_power_of_2(num_heads), _MAX_TILE // head_dim_pad))
    token_block = min(_MAX_TOKEN_BLOCK, triton.next_power_of_2(max(1, num_tokens // _TOKENS_ALONE)))
    return {
        "TOKEN_BLOCK": token_block,
        "HEAD_BLOCK": head_block,
        "HEAD_DIM_PAD": head_dim_pad,
        "num_warps": 4,
    }


def _check_args(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    *,
    check_values: bool,
) -> None:
    """The one validation of reshape_and_cache's inputs, run by the launcher, the custom op's
    reference path and the fake (``check_values=False``: shapes and dtypes only). Raises
    ValueError/TypeError naming the offending argument, its shape, stride and dtype; with
    ``check_values``, also the first invalid slot (a device sync on a GPU)."""
    args = {"key": key, "value": value, "key_cache": key_cache, "value_cache": value_cache}
    check_tensors(
        "reshape_and_cache",
        {
            "key": (key, 3),
            "value": (value, 3),
            "key_cache": (key_cache, 4),
            "value_cache": (value_cache, 4),
            "slot_mapping": (slot_mapping, 1),
        },
    )
    if key.shape != value.shape:
        raise ValueError(
            f"reshape_and_cache: key {tuple(key.shape)} and value {tuple(value.shape)} must have "
            f"the same shape [num_tokens, num_heads, head_dim]"
        )
    if key_cache.shape != value_cache.shape:
        raise ValueError(
            f"reshape_and_cache: key_cache {tuple(key_cache.shape)} and value_cache "
            f"{tuple(value_cache.shape)} must have the same shape"
        )
    if key.shape[1:] != key_cache.shape[2:]:
        raise ValueError(
            f"reshape_and_cache: (num_heads, head_dim) of key {tuple(key.shape)} does not match "
            f"key_cache [num_blocks, block_size, num_heads, head_dim] {tuple(key_cache.shape)}"
        )
    if slot_mapping.shape[0] != key.shape[0]:
        raise ValueError(
            f"reshape_and_cache: slot_mapping {tuple(slot_mapping.shape)} must have one slot per "
            f"token of key {tuple(key.shape)}"
        )
    if slot_mapping.dtype != torch.int64:
        raise TypeError(f"reshape_and_cache: slot_mapping must be int64, got {slot_mapping.dtype}")
    for name, t in args.items():
        if not t.is_floating_point():
            raise TypeError(f"reshape_and_cache: {name} must be floating point, got {t.dtype}")
    if key.dtype != value.dtype or key_cache.dtype != value_cache.dtype:
        raise TypeError(
            f"reshape_and_cache: dtypes key={key.dtype} value={value.dtype} must match, and "
            f"key_cache={key_cache.dtype} value_cache={value_cache.dtype} must match"
        )
    check_one_device("reshape_and_cache", {**args, "slot_mapping": slot_mapping})
    check_no_internal_overlap(
        "reshape_and_cache", {"key_cache": key_cache, "value_cache": value_cache}
    )
    if check_values:
        num_slots = key_cache.shape[0] * key_cache.shape[1]
        check_index_values(
            "reshape_and_cache",
            "slot_mapping",
            slot_mapping,
            (slot_mapping != -1) & ((slot_mapping < 0) | (slot_mapping >= num_slots)),
            f"a slot is -1 (padding) or in [0, num_blocks * block_size = {num_slots}) for "
            f"key_cache {tuple(key_cache.shape)}",
        )


def reshape_and_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Launch :func:`_reshape_and_cache_kernel`; writes ``key_cache``/``value_cache`` in place.

    Args:
        key, value: ``[num_tokens, num_heads, head_dim]``, any strides.
        key_cache, value_cache: ``[num_blocks, block_size, num_heads, head_dim]``, any strides
            (typically ``kv_cache[layer, 0]`` / ``kv_cache[layer, 1]``).
        slot_mapping: ``[num_tokens]`` int64; ``-1`` is padding and skipped.

    Raises:
        TypeError: a non-tensor argument, non-int64 ``slot_mapping`` or mismatched dtypes.
        ValueError: mismatched shapes or devices, an overlapping cache, or (when indices are
            checked, Note [Index checks]) a slot that is neither -1 nor inside the cache.
        RuntimeError: Triton is not installed.
    """
    require_triton("reshape_and_cache")
    _check_args(
        key,
        value,
        key_cache,
        value_cache,
        slot_mapping,
        check_values=index_checks_enabled(slot_mapping),
    )
    if key.shape[0] == 0:
        return
    grid, kwargs = launch_args(key, value, key_cache, value_cache, slot_mapping)
    _reshape_and_cache_kernel[grid](**kwargs)


def launch_args(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> tuple[tuple[int, int], dict]:
    """The grid and keyword arguments of one launch of :func:`_reshape_and_cache_kernel` for
    arguments :func:`_check_args` accepted (at least one token); pure, so a caller may launch
    the kernel another way (``torch.library.wrap_triton(kernel)[grid](**kwargs)``)."""
    num_tokens, num_heads, head_dim = key.shape
    config = _launch_config(num_tokens, num_heads, head_dim)
    grid = (
        triton.cdiv(num_tokens, config["TOKEN_BLOCK"]),
        triton.cdiv(num_heads, config["HEAD_BLOCK"]),
    )
    kwargs = dict(
        key_ptr=key,
        value_ptr=value,
        key_cache_ptr=key_cache,
        value_cache_ptr=value_cache,
        slot_mapping_ptr=slot_mapping,
        num_tokens=num_tokens,
        num_heads=num_heads,
        head_dim=head_dim,
        block_size=key_cache.shape[1],
        num_slots=key_cache.shape[0] * key_cache.shape[1],
        stride_key_token=key.stride(0),
        stride_key_head=key.stride(1),
        stride_key_dim=key.stride(2),
        stride_value_token=value.stride(0),
        stride_value_head=value.stride(1),
        stride_value_dim=value.stride(2),
        stride_key_cache_block=key_cache.stride(0),
        stride_key_cache_offset=key_cache.stride(1),
        stride_key_cache_head=key_cache.stride(2),
        stride_key_cache_dim=key_cache.stride(3),
        stride_value_cache_block=value_cache.stride(0),
        stride_value_cache_offset=value_cache.stride(1),
        stride_value_cache_head=value_cache.stride(2),
        stride_value_cache_dim=value_cache.stride(3),
        stride_slot_mapping_token=slot_mapping.stride(0),
        **config,
    )
    return grid, kwargs


@torch.library.custom_op(
    "autofunc_kernels::reshape_and_cache", mutates_args=("key_cache", "value_cache")
)
def reshape_and_cache_op(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Custom op: the Triton launcher on CUDA when Triton is installed, else the reference
    (after the same validation, slot values included)."""
    if use_triton(key):
        reshape_and_cache(key, value, key_cache, value_cache, slot_mapping)
    else:
        _check_args(key, value, key_cache, value_cache, slot_mapping, check_values=True)
        reshape_and_cache_ref(key, value, key_cache, value_cache, slot_mapping)


@reshape_and_cache_op.register_fake
def _reshape_and_cache_fake(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    _check_args(key, value, key_cache, value_cache, slot_mapping, check_values=False)
