"""Paged decode attention: one query token per sequence attends over its paged KV cache.

Shapes:
    out, query              [num_seqs, num_q_heads, head_dim]; ``out`` is written in place
    key_cache, value_cache  [num_blocks, block_size, num_kv_heads, head_dim] (read only; in practice
                            views ``kv_cache[layer, 0]`` / ``kv_cache[layer, 1]``)
    block_tables            [num_seqs, max_blocks_per_seq] int32: logical -> physical block
    seq_lens                [num_seqs] int32: tokens of context per sequence

Semantics, as plain Python (GQA: ``num_q_heads`` is a multiple of ``num_kv_heads``)::

    for s in range(num_seqs):
        n = seq_lens[s]; pos = range(n)
        k = key_cache[block_tables[s, pos // block_size], pos % block_size]   # [n, kv_heads, d]
        v = value_cache[...same indices...]
        for h in range(num_q_heads):
            kv_h = h // (num_q_heads // num_kv_heads)
            p = softmax(scale * k[:, kv_h] @ query[s, h])                     # fp32
            out[s, h] = (p @ v[:, kv_h]).to(out.dtype)

A sequence with ``seq_lens[s] == 0`` gets zeros. NaN and inf propagate as in the reference
(a NaN query, key or value of a valid token gives NaN; a +inf score gives NaN).

Contract: ``0 <= seq_lens[s] <= max_blocks_per_seq * block_size``; the blocks a sequence uses
(``block_tables[s, :cdiv(seq_lens[s], block_size)]``) are in ``[0, num_blocks)``; the unused
tail of a row is never read and may hold anything (``-1`` by convention). An invalid entry raises
ValueError naming its position whenever the indices are checked (Note [Index checks] in
``_checks.py``); unchecked, the kernel never reads outside the cache and writes NaN to that
sequence's rows of ``out``.

Provenance: online-softmax loop over cache blocks follows ``kernel_paged_attention_2d`` in vLLM
https://github.com/vllm-project/vllm/blob/ecb91d2bca57a30d00bd1baac4a108a07b2bdc63/vllm/attention/ops/chunked_prefill_paged_decode.py
Changes:
    - one program per (sequence, KV head, context partition): the program holds all query heads
      of the GQA group (padded to a power of 2, masked), so each K/V tile is read once per group,
      with broadcast-and-``tl.sum`` dot products (decode: a few query rows, below ``tl.dot``'s
      minimum tile of 16);
    - the context is split into partitions when ``num_seqs * num_kv_heads`` is too small to fill
      the GPU (flash-decoding): each partition writes its running max, sum and accumulator to
      fp32 scratch and a second kernel combines them; unsplit, the first kernel writes ``out``.
      The grid depends on the block table's capacity, never on ``seq_lens`` (no device sync);
    - flash layout ``[num_blocks, block_size, num_kv_heads, head_dim]``; every stride is an int64
      argument (query/out head and dim strides, block table stride, cache dim stride);
    - K/V loads are masked past ``seq_len``, so stale or NaN cache slots cannot leak in;
    - block ids and ``seq_len`` are range-masked (a bad one poisons the rows with NaN, through
      the partition's sum when split);
    - ``seq_len == 0`` yields zeros instead of 0/0, while NaN/inf still propagate (the running
      max is made finite only when it is -inf); no ALiBi, sliding window, fp8 or prefill.
The GQA grouping and the split were written after the H100 run of 2026-11-24 measured the
one-program-per-query-head kernel at 1-10% of copy bandwidth; they are checked under the Triton
interpreter only, and their speed on a GPU is not measured yet.
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

__all__ = ["paged_decode_attention", "paged_decode_attention_op", "paged_decode_attention_ref"]


def paged_decode_attention_ref(
    out: torch.Tensor,
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> None:
    """PyTorch reference: writes the attention output into ``out`` in place (see module).
    Trusts its inputs: the custom op validates them first (:func:`_check_args`)."""
    block_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
    group = query.shape[1] // num_kv_heads
    for s, seq_len in enumerate(seq_lens.tolist()):
        if seq_len == 0:
            out[s] = 0
            continue
        pos = torch.arange(seq_len, device=query.device)
        blocks = block_tables[s, pos // block_size].long()
        # [seq_len, num_q_heads, head_dim]: gather, then repeat each kv head for its query group.
        k = key_cache[blocks, pos % block_size].float().repeat_interleave(group, dim=1)
        v = value_cache[blocks, pos % block_size].float().repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,thd->ht", query[s].float(), k) * scale
        out[s] = torch.einsum("ht,thd->hd", scores.softmax(dim=-1), v).to(out.dtype)


@triton.jit
def _paged_decode_attention_kernel(
    # pointers
    out_ptr,  # [num_seqs, num_q_heads, head_dim] (written when NUM_PARTS == 1)
    query_ptr,  # [num_seqs, num_q_heads, head_dim]
    key_cache_ptr,  # [num_blocks, BLOCK_SIZE, num_kv_heads, head_dim]
    value_cache_ptr,  # [num_blocks, BLOCK_SIZE, num_kv_heads, head_dim]
    block_tables_ptr,  # [num_seqs, max_blocks_per_seq] int32
    seq_lens_ptr,  # [num_seqs] int32
    part_max_ptr,  # [num_seqs, num_q_heads, NUM_PARTS] fp32 (written when NUM_PARTS > 1)
    part_sum_ptr,  # [num_seqs, num_q_heads, NUM_PARTS] fp32
    part_acc_ptr,  # [num_seqs, num_q_heads, NUM_PARTS, HEAD_DIM_PAD] fp32
    # scalars and sizes
    scale,  # fp32 softmax scale
    head_dim,
    num_queries_per_kv,  # num_q_heads // num_kv_heads
    num_q_heads,
    num_blocks,  # valid block ids are [0, num_blocks)
    max_blocks_per_seq,  # columns of block_tables
    # strides
    stride_out_seq: tl.int64,
    stride_out_head: tl.int64,
    stride_out_dim: tl.int64,
    stride_query_seq: tl.int64,
    stride_query_head: tl.int64,
    stride_query_dim: tl.int64,
    stride_key_cache_block: tl.int64,
    stride_key_cache_offset: tl.int64,
    stride_key_cache_head: tl.int64,
    stride_key_cache_dim: tl.int64,
    stride_value_cache_block: tl.int64,
    stride_value_cache_offset: tl.int64,
    stride_value_cache_head: tl.int64,
    stride_value_cache_dim: tl.int64,
    stride_block_tables_seq: tl.int64,
    stride_block_tables_block: tl.int64,
    stride_seq_lens_seq: tl.int64,
    # meta-parameters
    BLOCK_SIZE: tl.constexpr,  # cache block size: one KV block per loop iteration
    HEAD_DIM_PAD: tl.constexpr,  # next power of 2 >= head_dim
    GROUP_PAD: tl.constexpr,  # next power of 2 >= num_queries_per_kv
    BLOCKS_PER_PART: tl.constexpr,  # cache blocks one program walks
    NUM_PARTS: tl.constexpr,  # context partitions (1: no split, out written here)
):
    # --- program id -> (sequence, kv head, partition); the group's query heads -----------------
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    part = tl.program_id(2)
    group = tl.arange(0, GROUP_PAD)
    head_mask = group < num_queries_per_kv
    q_heads = kv_head * num_queries_per_kv + group
    seq_len = tl.load(seq_lens_ptr + seq * stride_seq_lens_seq)
    # A seq_len outside [0, capacity] reads nothing and poisons the rows (Note [Index checks]).
    invalid = (seq_len < 0) | (seq_len > max_blocks_per_seq * BLOCK_SIZE)
    seq_len = tl.where(invalid, 0, seq_len)

    # --- the group's query rows in fp32, pre-multiplied by the softmax scale: [GROUP, DIM] -----
    dims = tl.arange(0, HEAD_DIM_PAD)
    dim_mask = dims < head_dim
    q_ptrs = query_ptr + seq * stride_query_seq + q_heads[:, None] * stride_query_head
    q_mask = head_mask[:, None] & dim_mask[None, :]
    q = tl.load(q_ptrs + dims[None, :] * stride_query_dim, mask=q_mask, other=0.0)
    q = q.to(tl.float32) * scale

    # --- online softmax over this partition's cache blocks: per head m, l, acc ----------------
    # Each K/V tile is loaded once and used by every query head of the group (GQA).
    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM_PAD], tl.float32)
    offsets = tl.arange(0, BLOCK_SIZE)
    k_base = key_cache_ptr + kv_head * stride_key_cache_head
    v_base = value_cache_ptr + kv_head * stride_value_cache_head
    table_ptr = block_tables_ptr + seq * stride_block_tables_seq
    first = part * BLOCKS_PER_PART
    last = tl.minimum(first + BLOCKS_PER_PART, tl.cdiv(seq_len, BLOCK_SIZE))
    for logical in range(first, last):
        # logical < max_blocks_per_seq here (seq_len was clamped), and a block id outside the
        # cache masks the whole tile: no load leaves the cache, and the rows are poisoned.
        physical = tl.load(table_ptr + logical * stride_block_tables_block).to(tl.int64)
        block_ok = (physical >= 0) & (physical < num_blocks)
        invalid = invalid | ~block_ok
        token_mask = logical * BLOCK_SIZE + offsets < seq_len
        # folded into the bound: the interpreter turns a scalar & tile of booleans into ints
        tile_mask = (logical * BLOCK_SIZE + offsets < tl.where(block_ok, seq_len, 0))[:, None]
        tile_mask = tile_mask & dim_mask[None, :]

        # [BLOCK_SIZE, HEAD_DIM_PAD] key tile -> [GROUP_PAD, BLOCK_SIZE] scores, -inf past seq_len
        k_ptrs = k_base + physical * stride_key_cache_block
        k_ptrs += offsets[:, None] * stride_key_cache_offset + dims[None, :] * stride_key_cache_dim
        k = tl.load(k_ptrs, mask=tile_mask, other=0.0).to(tl.float32)
        scores = tl.sum(q[:, None, :] * k[None, :, :], axis=2)
        scores = tl.where(token_mask[None, :], scores, float("-inf"))

        # rescale what was accumulated so far to the new running max. While every score so far
        # is -inf, subtract 0 instead of -inf (-inf - -inf is NaN): p and alpha are then exactly
        # 0, as softmax gives them. NaN and +inf scores are left to propagate, as in the ref.
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(scores - m_safe[:, None])

        v_ptrs = v_base + physical * stride_value_cache_block
        v_ptrs += offsets[:, None] * stride_value_cache_offset
        v_ptrs += dims[None, :] * stride_value_cache_dim
        v = tl.load(v_ptrs, mask=tile_mask, other=0.0).to(tl.float32)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        m_i = m_new

    if NUM_PARTS == 1:
        # --- normalise and store in out's dtype: an empty sequence gets zeros, an invalid one
        # NaN. Decided on seq_len, not on l: l is NaN after a NaN score, and NaN must reach out.
        result = tl.where(seq_len > 0, acc / tl.where(seq_len > 0, l_i, 1.0)[:, None], 0.0)
        result = tl.where(invalid, float("nan"), result)
        o_ptrs = out_ptr + seq * stride_out_seq + q_heads[:, None] * stride_out_head
        o_ptrs += dims[None, :] * stride_out_dim
        tl.store(o_ptrs, result.to(out_ptr.dtype.element_ty), mask=q_mask)
    else:
        # --- this partition's (m, l, acc) for the reduce; an invalid sequence poisons l -------
        row = (seq * num_q_heads + q_heads) * NUM_PARTS + part
        tl.store(part_max_ptr + row, m_i, mask=head_mask)
        tl.store(part_sum_ptr + row, tl.where(invalid, float("nan"), l_i), mask=head_mask)
        acc_ptrs = part_acc_ptr + row[:, None] * HEAD_DIM_PAD + dims[None, :]
        tl.store(acc_ptrs, acc, mask=head_mask[:, None])


@triton.jit
def _paged_decode_attention_reduce_kernel(
    out_ptr,  # [num_seqs, num_q_heads, head_dim]
    seq_lens_ptr,  # [num_seqs] int32
    part_max_ptr,  # [num_seqs, num_q_heads, NUM_PARTS] fp32
    part_sum_ptr,  # [num_seqs, num_q_heads, NUM_PARTS] fp32
    part_acc_ptr,  # [num_seqs, num_q_heads, NUM_PARTS, HEAD_DIM_PAD] fp32
    head_dim,
    num_q_heads,
    capacity,  # max_blocks_per_seq * block_size
    stride_out_seq: tl.int64,
    stride_out_head: tl.int64,
    stride_out_dim: tl.int64,
    stride_seq_lens_seq: tl.int64,
    HEAD_DIM_PAD: tl.constexpr,
    NUM_PARTS: tl.constexpr,
    NUM_PARTS_PAD: tl.constexpr,  # next power of 2 >= NUM_PARTS
):
    """One program per (sequence, query head): the partitions' softmax pieces, rescaled to their
    common max and summed (flash-decoding). Empty partitions hold m = -inf, l = 0, acc = 0."""
    seq = tl.program_id(0)
    head = tl.program_id(1)
    parts = tl.arange(0, NUM_PARTS_PAD)
    part_mask = parts < NUM_PARTS
    dims = tl.arange(0, HEAD_DIM_PAD)
    row = (seq * num_q_heads + head) * NUM_PARTS + parts
    m = tl.load(part_max_ptr + row, mask=part_mask, other=float("-inf"))
    l = tl.load(part_sum_ptr + row, mask=part_mask, other=0.0)
    acc = tl.load(
        part_acc_ptr + row[:, None] * HEAD_DIM_PAD + dims[None, :],
        mask=part_mask[:, None],
        other=0.0,
    )
    m_all = tl.max(m, axis=0)
    weight = tl.exp(m - tl.where(m_all == float("-inf"), 0.0, m_all))
    total = tl.sum(weight * l, axis=0)
    out = tl.sum(weight[:, None] * acc, axis=0)
    seq_len = tl.load(seq_lens_ptr + seq * stride_seq_lens_seq)
    valid_len = (seq_len >= 0) & (seq_len <= capacity)
    nonempty = valid_len & (seq_len > 0)
    # A NaN total is an invalid sequence (a partition poisoned it) or a NaN score: NaN out.
    result = tl.where(nonempty, out / tl.where(nonempty, total, 1.0), 0.0)
    result = tl.where((total != total) | ~valid_len, float("nan"), result)
    o_ptrs = out_ptr + seq * stride_out_seq + head * stride_out_head + dims * stride_out_dim
    tl.store(o_ptrs, result.to(out_ptr.dtype.element_ty), mask=dims < head_dim)


# Heuristics instead of autotuning: decode is memory bound and the tile is fixed by the cache
# layout (BLOCK_SIZE rows of HEAD_DIM_PAD, times the GQA group for the scores), so the knobs
# left are warps and the split. Autotuning would key on seq_lens, which change every step.
#
# Note [What still limits the decode kernel]
# A review against the structure of vLLM's Triton paged/unified attention and FlashInfer's
# decode kernels (read, not copied), written before any GPU measurement of this kernel:
# 1. One cache block per iteration, behind a dependent load: each step loads one block-table
#    entry and only then its K tile, so with 16-token blocks the loop is mostly waiting on
#    that scalar. The fast kernels take a tile of several blocks per step (32-128 tokens: a
#    vector load of that many table entries, then one gathered K/V load) and let the compiler
#    pipeline the next step's loads (``tl.range(..., num_stages=2..3)`` on a GPU). Expected to
#    matter most; the first change to try once a GPU can measure it.
# 2. Scores and P @ V by broadcast-and-``tl.sum`` in fp32: a [GROUP_PAD, BLOCK_SIZE,
#    HEAD_DIM_PAD] product (8 x 16 x 128 = 16 K values for an 8-way GQA group) lives in
#    registers and may spill. ``tl.dot`` needs 16 rows: padding the group's query rows to 16
#    (as the unified kernel pads BLOCK_M) wastes tensor-core work that is idle in decode anyway
#    and replaces the reductions with two MMAs. Worth it from a group of 4 up, and with tiles
#    of several blocks (1.) the MMA's N grows to the tile.
# 3. The split (_TARGET_PROGRAMS, _PARTITION_TOKENS) is decided on the block table's capacity,
#    never on seq_lens (no device sync): a table much longer than the live sequences launches
#    partitions that find no block and exit. FlashInfer sizes the split from the real lengths
#    in a planning step on the host; here the cost is empty programs, bounded by capacity / 512
#    per (sequence, KV head). A cap of about two waves of partitions (2 x SMs / programs) would
#    bound it too.
# 4. K/V are converted to fp32 as loaded; bf16 operands with fp32 accumulation (what ``tl.dot``
#    does) halve the registers they take.
# Heuristics kept until then: 4 warps up to a 4096-element score tile, 8 above; split when
# fewer than 256 (sequence, KV head) programs; 512 tokens per partition.
_TARGET_PROGRAMS = 256  # about two waves on a 132-SM GPU: below it, the context is split
_PARTITION_TOKENS = 512  # tokens per partition when split (flash-decoding)


def _launch_config(
    block_size: int, head_dim: int, group: int, programs: int, capacity: int, part: int | None
) -> dict[str, int]:
    """Tiles, warps and the context split. ``programs`` is num_seqs * num_kv_heads, the grid
    without a split; ``capacity`` the block table's tokens per sequence (not seq_lens: the
    grid must not depend on device values); ``part`` forces the partition size in tokens."""
    head_dim_pad = triton.next_power_of_2(head_dim)
    group_pad = triton.next_power_of_2(group)
    tile = group_pad * block_size * head_dim_pad
    if part is None:
        part = capacity if programs >= _TARGET_PROGRAMS else max(_PARTITION_TOKENS, block_size)
    blocks_per_part = max(1, part // block_size)
    num_parts = max(1, -(-capacity // (blocks_per_part * block_size)))
    return {
        "BLOCK_SIZE": block_size,
        "HEAD_DIM_PAD": head_dim_pad,
        "GROUP_PAD": group_pad,
        "BLOCKS_PER_PART": blocks_per_part,
        "NUM_PARTS": num_parts,
        "num_warps": 4 if tile <= 4096 else 8,
    }


def _check_args(
    out: torch.Tensor,
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    check_values: bool,
) -> None:
    """The one validation of paged_decode_attention's inputs, run by the launcher, the custom
    op's reference path and the fake (``check_values=False``: shapes and dtypes only). Raises
    ValueError/TypeError naming the offending argument, its shape and dtype; with
    ``check_values``, also the first invalid seq_len or used block id (a device sync on a GPU)."""
    named = {
        "out": out,
        "query": query,
        "key_cache": key_cache,
        "value_cache": value_cache,
        "block_tables": block_tables,
        "seq_lens": seq_lens,
    }
    ndims = {
        "out": 3,
        "query": 3,
        "key_cache": 4,
        "value_cache": 4,
        "block_tables": 2,
        "seq_lens": 1,
    }
    check_tensors("paged_decode_attention", {n: (t, ndims[n]) for n, t in named.items()})
    if out.shape != query.shape:
        raise ValueError(
            f"paged_decode_attention: out {tuple(out.shape)} must have query's shape "
            f"{tuple(query.shape)}"
        )
    if key_cache.shape != value_cache.shape:
        raise ValueError(
            f"paged_decode_attention: key_cache {tuple(key_cache.shape)} and value_cache "
            f"{tuple(value_cache.shape)} must have the same shape"
        )
    num_seqs, num_q_heads, head_dim = query.shape
    num_kv_heads = key_cache.shape[2]
    if key_cache.shape[3] != head_dim:
        raise ValueError(
            f"paged_decode_attention: head_dim of query {tuple(query.shape)} does not match "
            f"key_cache [num_blocks, block_size, num_kv_heads, head_dim] {tuple(key_cache.shape)}"
        )
    if num_kv_heads == 0 or num_q_heads % num_kv_heads != 0:
        raise ValueError(
            f"paged_decode_attention: num_q_heads={num_q_heads} (query {tuple(query.shape)}) must "
            f"be a multiple of num_kv_heads={num_kv_heads} (key_cache {tuple(key_cache.shape)})"
        )
    if block_tables.shape[0] != num_seqs or seq_lens.shape[0] != num_seqs:
        raise ValueError(
            f"paged_decode_attention: block_tables {tuple(block_tables.shape)} and seq_lens "
            f"{tuple(seq_lens.shape)} must have num_seqs={num_seqs} rows (query "
            f"{tuple(query.shape)})"
        )
    block_size = key_cache.shape[1]
    if block_size & (block_size - 1) or block_size == 0:
        raise ValueError(
            f"paged_decode_attention: block_size must be a power of 2, got {block_size} "
            f"(key_cache {tuple(key_cache.shape)})"
        )
    for name in ("block_tables", "seq_lens"):
        if named[name].dtype != torch.int32:
            raise TypeError(
                f"paged_decode_attention: {name} must be int32, got {named[name].dtype}"
            )
    # the inputs first: an ``out`` made like ``query`` shares its dtype, and the cause is query
    for name in ("query", "key_cache", "value_cache", "out"):
        if not named[name].is_floating_point():
            raise TypeError(
                f"paged_decode_attention: {name} must be floating point, got {named[name].dtype}"
            )
    if key_cache.dtype != value_cache.dtype:
        raise TypeError(
            f"paged_decode_attention: key_cache {key_cache.dtype} and value_cache "
            f"{value_cache.dtype} must have the same dtype"
        )
    check_one_device("paged_decode_attention", named)
    check_no_internal_overlap("paged_decode_attention", {"out": out})
    if check_values:
        _check_index_values(key_cache, block_tables, seq_lens)


def _check_index_values(
    key_cache: torch.Tensor, block_tables: torch.Tensor, seq_lens: torch.Tensor
) -> None:
    """seq_lens within the block table's capacity, then the used block ids within the cache."""
    num_blocks, block_size = key_cache.shape[0], key_cache.shape[1]
    capacity = block_tables.shape[1] * block_size
    check_index_values(
        "paged_decode_attention",
        "seq_lens",
        seq_lens,
        (seq_lens < 0) | (seq_lens > capacity),
        f"a seq_len is in [0, max_blocks_per_seq * block_size = {capacity}] for block_tables "
        f"{tuple(block_tables.shape)} and key_cache {tuple(key_cache.shape)}",
    )
    # Block j of sequence s is used iff j * block_size < seq_lens[s]; the rest is never read.
    used = torch.arange(block_tables.shape[1], device=block_tables.device) * block_size
    used = used[None, :] < seq_lens[:, None]
    check_index_values(
        "paged_decode_attention",
        "block_tables",
        block_tables,
        used & ((block_tables < 0) | (block_tables >= num_blocks)),
        f"a block id used by its sequence (the first cdiv(seq_len, block_size) of its row) is "
        f"in [0, num_blocks = {num_blocks}) for key_cache {tuple(key_cache.shape)}",
    )


def paged_decode_attention(
    out: torch.Tensor,
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    *,
    partition_size: int | None = None,
) -> None:
    """Launch :func:`_paged_decode_attention_kernel` (and, when the context is split, the
    reduce); writes ``out`` in place.

    Args:
        out: ``[num_seqs, num_q_heads, head_dim]``, written (any strides).
        query: ``[num_seqs, num_q_heads, head_dim]``, any strides.
        key_cache, value_cache: ``[num_blocks, block_size, num_kv_heads, head_dim]``, any strides;
            ``block_size`` must be a power of 2.
        block_tables: ``[num_seqs, max_blocks_per_seq]`` int32.
        seq_lens: ``[num_seqs]`` int32.
        scale: softmax scale, usually ``head_dim ** -0.5``.
        partition_size: tokens per program (a positive multiple of the block size); default:
            the whole context when ``num_seqs * num_kv_heads`` fills the GPU, else 512.

    Raises:
        TypeError: non-tensor arguments or wrong dtypes (int32 tables, float activations).
        ValueError: mismatched shapes (head_dim, GQA ratio, num_seqs), non-power-of-2 block size,
            a bad ``partition_size``, an overlapping ``out``, or (when indices are checked,
            Note [Index checks]) a seq_len or used block id out of range.
        RuntimeError: Triton is not installed.
    """
    require_triton("paged_decode_attention")
    _check_args(
        out,
        query,
        key_cache,
        value_cache,
        block_tables,
        seq_lens,
        check_values=index_checks_enabled(block_tables),
    )
    # bool is an int subclass, but no size.
    if partition_size is not None and (
        not isinstance(partition_size, int)
        or isinstance(partition_size, bool)
        or partition_size <= 0
        or partition_size % key_cache.shape[1]
    ):
        raise ValueError(
            f"paged_decode_attention: partition_size must be a positive multiple of the block "
            f"size {key_cache.shape[1]}, got {partition_size!r}"
        )
    num_seqs, num_q_heads, head_dim = query.shape
    num_kv_heads, block_size = key_cache.shape[2], key_cache.shape[1]
    group = num_q_heads // num_kv_heads
    capacity = block_tables.shape[1] * block_size
    config = _launch_config(
        block_size, head_dim, group, num_seqs * num_kv_heads, capacity, partition_size
    )
    num_parts = config["NUM_PARTS"]
    if num_parts > 1:
        part_max = torch.empty((num_seqs, num_q_heads, num_parts), dtype=torch.float32,
                               device=query.device)
        part_sum = torch.empty_like(part_max)
        part_acc = torch.empty((num_seqs, num_q_heads, num_parts, config["HEAD_DIM_PAD"]),
                               dtype=torch.float32, device=query.device)
    else:  # never read: the kernel writes out itself
        part_max = part_sum = part_acc = out
    _paged_decode_attention_kernel[(num_seqs, num_kv_heads, num_parts)](
        out_ptr=out,
        query_ptr=query,
        key_cache_ptr=key_cache,
        value_cache_ptr=value_cache,
        block_tables_ptr=block_tables,
        seq_lens_ptr=seq_lens,
        part_max_ptr=part_max,
        part_sum_ptr=part_sum,
        part_acc_ptr=part_acc,
        scale=float(scale),
        head_dim=head_dim,
        num_queries_per_kv=group,
        num_q_heads=num_q_heads,
        num_blocks=key_cache.shape[0],
        max_blocks_per_seq=block_tables.shape[1],
        stride_out_seq=out.stride(0),
        stride_out_head=out.stride(1),
        stride_out_dim=out.stride(2),
        stride_query_seq=query.stride(0),
        stride_query_head=query.stride(1),
        stride_query_dim=query.stride(2),
        stride_key_cache_block=key_cache.stride(0),
        stride_key_cache_offset=key_cache.stride(1),
        stride_key_cache_head=key_cache.stride(2),
        stride_key_cache_dim=key_cache.stride(3),
        stride_value_cache_block=value_cache.stride(0),
        stride_value_cache_offset=value_cache.stride(1),
        stride_value_cache_head=value_cache.stride(2),
        stride_value_cache_dim=value_cache.stride(3),
        stride_block_tables_seq=block_tables.stride(0),
        stride_block_tables_block=block_tables.stride(1),
        stride_seq_lens_seq=seq_lens.stride(0),
        **config,
    )
    if num_parts > 1:
        _paged_decode_attention_reduce_kernel[(num_seqs, num_q_heads)](
            out_ptr=out,
            seq_lens_ptr=seq_lens,
            part_max_ptr=part_max,
            part_sum_ptr=part_sum,
            part_acc_ptr=part_acc,
            head_dim=head_dim,
            num_q_heads=num_q_heads,
            capacity=capacity,
            stride_out_seq=out.stride(0),
            stride_out_head=out.stride(1),
            stride_out_dim=out.stride(2),
            stride_seq_lens_seq=seq_lens.stride(0),
            HEAD_DIM_PAD=config["HEAD_DIM_PAD"],
            NUM_PARTS=num_parts,
            NUM_PARTS_PAD=triton.next_power_of_2(num_parts),
        )


@torch.library.custom_op("autofunc_kernels::paged_decode_attention", mutates_args=("out",))
def paged_decode_attention_op(
    out: torch.Tensor,
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> None:
    """Custom op: the Triton launcher on CUDA when Triton is installed, else the reference
    (after the same validation, index values included)."""
    if use_triton(query):
        paged_decode_attention(out, query, key_cache, value_cache, block_tables, seq_lens, scale)
    else:
        _check_args(
            out, query, key_cache, value_cache, block_tables, seq_lens, check_values=True
        )
        paged_decode_attention_ref(
            out, query, key_cache, value_cache, block_tables, seq_lens, scale
        )


@paged_decode_attention_op.register_fake
def _paged_decode_attention_fake(
    out: torch.Tensor,
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> None:
    _check_args(out, query, key_cache, value_cache, block_tables, seq_lens, check_values=False)
