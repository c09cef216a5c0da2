"""paged_decode_attention: Triton launcher vs the PyTorch reference (and the reference vs SDPA)."""

import itertools

import pytest
import torch
import torch.nn.functional as F

from autofunc.kernels.paged_attention import (
    paged_decode_attention,
    paged_decode_attention_op,
    paged_decode_attention_ref,
)

NUM_SEQS = [1, 3]
HEAD_CONFIGS = [(4, 4), (8, 2)]  # (num_q_heads, num_kv_heads): MHA and GQA with 4 q per kv
HEAD_SIZES = [32, 40]  # 40: HEAD_DIM_PAD = 64, masked tail
BLOCK_SIZES = [8, 16]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
NUM_LAYERS = 2
NUM_BLOCKS = 12
MAX_BLOCKS_PER_SEQ = 4
LAYER = 1


def _make_case(num_seqs, num_q_heads, num_kv_heads, head_size, block_size, dtype, disjoint=False):
    """Query as a view of a qkv row, a layered cache whose unused slots hold NaN, shuffled block
    tables, and seq_lens that are not multiples of the block size (plus one full table).
    ``disjoint``: no two sequences share a block (the cache then has a table's worth per
    sequence), so what a test writes into one sequence's tokens reaches no other."""
    num_blocks = num_seqs * MAX_BLOCKS_PER_SEQ if disjoint else NUM_BLOCKS
    kv_cache = torch.full(
        (NUM_LAYERS, 2, num_blocks, block_size, num_kv_heads, head_size), float("nan"), dtype=dtype
    )
    if disjoint:
        block_tables = torch.randperm(num_blocks).view(num_seqs, MAX_BLOCKS_PER_SEQ).int()
    else:
        block_tables = torch.stack(
            [torch.randperm(NUM_BLOCKS)[:MAX_BLOCKS_PER_SEQ] for _ in range(num_seqs)]
        ).int()
    max_len = MAX_BLOCKS_PER_SEQ * block_size
    seq_lens = torch.tensor([max_len - 3, 1, max_len, block_size + 5][:num_seqs], dtype=torch.int32)
    for seq, seq_len in enumerate(seq_lens.tolist()):
        pos = torch.arange(seq_len)
        blocks = block_tables[seq, pos // block_size].long()
        shape = (seq_len, num_kv_heads, head_size)
        kv_cache[LAYER, :, blocks, pos % block_size] = torch.randn(2, *shape).to(dtype)
    q_width = num_q_heads * head_size
    qkv = torch.randn(num_seqs, q_width + 2 * num_kv_heads * head_size).to(dtype)
    query = qkv[:, :q_width].view(num_seqs, num_q_heads, head_size)
    return query, kv_cache, block_tables, seq_lens


# The interpreter runs every program in Python, so the shapes are swept in fp32 and the
# half-precision dtypes run on the GQA/MHA shapes with a masked head tail only.
CASES = [
    *itertools.product(NUM_SEQS, HEAD_CONFIGS, HEAD_SIZES, BLOCK_SIZES, DTYPES[:1]),
    *itertools.product(NUM_SEQS[-1:], HEAD_CONFIGS, HEAD_SIZES[-1:], BLOCK_SIZES[:1], DTYPES[1:]),
]


@pytest.mark.parametrize(
    "num_seqs, heads, head_size, block_size, dtype",
    CASES,
    ids=lambda value: str(value).removeprefix("torch."),
)
def test_paged_decode_attention(num_seqs, heads, head_size, block_size, dtype, assert_close):
    num_q_heads, num_kv_heads = heads
    query, kv_cache, block_tables, seq_lens = _make_case(
        num_seqs, num_q_heads, num_kv_heads, head_size, block_size, dtype
    )
    scale = head_size**-0.5
    # out is a strided view too: the padding columns around it must stay untouched.
    out_base = torch.full((num_seqs, num_q_heads, head_size + 8), -7.0, dtype=dtype)
    out = out_base[..., 4 : 4 + head_size]
    expected = torch.empty_like(query)
    cache_before = kv_cache.clone()

    args = (query, kv_cache[LAYER, 0], kv_cache[LAYER, 1], block_tables, seq_lens, scale)
    paged_decode_attention(out, *args)
    paged_decode_attention_ref(expected, *args)

    assert_close(out, expected)
    assert (out_base[..., :4] == -7).all() and (out_base[..., 4 + head_size :] == -7).all()
    torch.testing.assert_close(kv_cache, cache_before, equal_nan=True, rtol=0, atol=0)


def test_paged_decode_attention_empty_sequence():
    query, kv_cache, block_tables, _ = _make_case(2, 4, 2, 32, 8, torch.float32)
    seq_lens = torch.tensor([0, 1], dtype=torch.int32)  # the cache holds 1 token for seq 1
    out, expected = torch.full_like(query, 5.0), torch.full_like(query, 5.0)
    args = (query, kv_cache[LAYER, 0], kv_cache[LAYER, 1], block_tables, seq_lens, 0.2)

    paged_decode_attention(out, *args)
    paged_decode_attention_ref(expected, *args)

    assert (out[0] == 0).all() and (expected[0] == 0).all()
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("heads", HEAD_CONFIGS)
def test_paged_decode_attention_ref_matches_sdpa(heads):
    num_q_heads, num_kv_heads = heads
    query, kv_cache, block_tables, seq_lens = _make_case(
        3, num_q_heads, num_kv_heads, 32, 8, torch.float32
    )
    key_cache, value_cache = kv_cache[LAYER, 0], kv_cache[LAYER, 1]
    out = torch.empty_like(query)
    paged_decode_attention_ref(out, query, key_cache, value_cache, block_tables, seq_lens, 0.3)

    for seq, seq_len in enumerate(seq_lens.tolist()):
        # Gather this sequence's K/V token by token, then let SDPA handle GQA and the softmax.
        slots = [(block_tables[seq, t // 8].item(), t % 8) for t in range(seq_len)]
        k = torch.stack([key_cache[b, o] for b, o in slots]).transpose(0, 1)  # [kv_heads, n, d]
        v = torch.stack([value_cache[b, o] for b, o in slots]).transpose(0, 1)
        q = query[seq][:, None, :]  # [q_heads, 1, d]
        expected = F.scaled_dot_product_attention(q, k, v, scale=0.3, enable_gqa=True)
        torch.testing.assert_close(out[seq], expected[:, 0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda value: str(value).removeprefix("torch."))
def test_paged_decode_attention_op_cpu(dtype):
    query, kv_cache, block_tables, seq_lens = _make_case(3, 8, 2, 40, 8, dtype)
    block_tables[1, 1:] = -1  # seq 1 has one token: the unused tail of its row is padding
    args = (query, kv_cache[LAYER, 0], kv_cache[LAYER, 1], block_tables, seq_lens, 0.2)
    out, expected = torch.empty_like(query), torch.empty_like(query)
    paged_decode_attention_ref(expected, *args)

    paged_decode_attention_op(out, *args)  # on CPU the op runs the reference

    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    torch.library.opcheck(paged_decode_attention_op, (out, *args))


def _bad_inputs():
    query, kv_cache, block_tables, seq_lens = _make_case(2, 4, 2, 32, 8, torch.float32)
    out = torch.empty_like(query)
    good = (out, query, kv_cache[LAYER, 0], kv_cache[LAYER, 1], block_tables, seq_lens, 0.2)
    yield "block_tables int64", (*good[:4], block_tables.long(), *good[5:]), TypeError, "int32"
    yield "block_tables float", (*good[:4], block_tables + 0.5, *good[5:]), TypeError, "int32"
    yield "seq_lens int64", (*good[:5], seq_lens.long(), 0.2), TypeError, "int32"
    q_bad = query[..., :16]
    yield "head_dim mismatch", (out[..., :16], q_bad, *good[2:]), ValueError, "head_dim"
    q_3 = torch.empty(2, 3, 32)
    yield "gqa ratio", (torch.empty_like(q_3), q_3, *good[2:]), ValueError, "multiple of"
    q_1 = torch.empty(2, 1, 32)  # fewer query heads than kv heads
    yield "fewer q heads", (torch.empty_like(q_1), q_1, *good[2:]), ValueError, "multiple of"
    yield "out shape", (out[:1], *good[1:]), ValueError, "out"
    yield "num_seqs", (*good[:4], block_tables[:1], *good[5:]), ValueError, "num_seqs"
    expanded = out[:, :1].expand_as(out)
    yield "overlapping out", (expanded, *good[1:]), ValueError, "internal overlap"
    q_int = query.to(torch.int32)  # and out made like it: the message names the query
    yield "query int", (torch.empty_like(q_int), q_int, *good[2:]), TypeError, "query must be"


BAD_INPUTS = list(_bad_inputs())


# Every path runs the same validation: the launcher, the custom op (its CPU reference path) and
# the op's fake implementation (what torch.compile traces with).
@pytest.mark.parametrize("case", BAD_INPUTS, ids=lambda case: case[0])
@pytest.mark.parametrize("path", ["launcher", "op", "fake"])
def test_paged_decode_attention_rejects_bad_inputs(case, path, call_fake):
    _, args, error, message = case
    before = args[0].clone()
    with pytest.raises(error, match=message):
        if path == "launcher":
            paged_decode_attention(*args)
        elif path == "op":
            paged_decode_attention_op(*args)
        else:
            call_fake(paged_decode_attention_op, *args)
    torch.testing.assert_close(args[0], before, equal_nan=True, rtol=0, atol=0)


# --- NaN and inf propagate exactly as in the reference -----------------------------------------
def test_paged_decode_attention_propagates_nan_and_inf():
    # One kv head, so each sequence tests one thing. Seq 0: a NaN query element. Seq 1: NaN in a
    # key of a valid token. Seq 2: inf in a value of a valid token. Seq 3: the whole first cache
    # block scores -inf and later blocks are finite: the running max starts at -inf, and the
    # result is finite (the -inf tokens get weight 0), not NaN. Seq 4: every score -inf: NaN
    # (softmax of all -inf). Seq 5: empty: zeros. The cache beyond seq_len holds NaN throughout.
    # The sequences share no block: with shared blocks seq 2's inf value or seq 4's -inf keys
    # land in seq 3's tokens for about one seed in three (on the GPU's generator too).
    block_size, head_size = 8, 16
    query, kv_cache, block_tables, _ = _make_case(
        6, 1, 1, head_size, block_size, torch.float32, disjoint=True
    )
    seq_lens = torch.tensor([20, 20, 20, 20, 12, 0], dtype=torch.int32)
    key_cache, value_cache = kv_cache[LAYER, 0], kv_cache[LAYER, 1]
    for seq in range(5):
        for pos in range(int(seq_lens[seq])):
            block, offset = int(block_tables[seq, pos // block_size]), pos % block_size
            key_cache[block, offset] = torch.randn(1, head_size)
            value_cache[block, offset] = torch.randn(1, head_size)
    query[0, 0, 3] = float("nan")
    key_cache[block_tables[1, 1], 2, 0, 5] = float("nan")
    value_cache[block_tables[2, 0], 4, 0, 1] = float("inf")
    # score = -inf: put -inf * sign(q) in dim 0 of the key, keep q[dim 0] away from 0.
    for seq, tokens in ((3, range(block_size)), (4, range(12))):
        query[seq, 0, 0] = 1.0
        for pos in tokens:
            key_cache[block_tables[seq, pos // block_size], pos % block_size, 0, 0] = -float("inf")
    args = (query, key_cache, value_cache, block_tables, seq_lens, head_size**-0.5)
    out, expected = torch.full_like(query, 7.0), torch.full_like(query, 7.0)

    paged_decode_attention(out, *args)
    paged_decode_attention_ref(expected, *args)

    # An inf value: inf where every weight is positive; a weight that underflows to 0 makes
    # 0 * inf = NaN, which the reference's matmul on CUDA gives (H100 run): not finite either way.
    assert expected[:2].isnan().all() and not expected[2].isfinite().all()
    assert expected[3].isfinite().all() and expected[4].isnan().all() and (expected[5] == 0).all()
    torch.testing.assert_close(out, expected, equal_nan=True)


# --- out-of-range block ids and seq_lens (Note [Index checks] in kernels/_checks.py) -----------
# (row, column or None, value): block_tables[row, column] = value, or seq_lens[row] = value.
BAD_INDICES = {
    "block id == num_blocks": ("block_tables", 1, 1, NUM_BLOCKS),
    "block id -1 in use": ("block_tables", 1, 0, -1),
    "block id 2**31 - 1": ("block_tables", 1, 2, 2**31 - 1),
    "seq_len past table": ("seq_lens", 1, None, MAX_BLOCKS_PER_SEQ * 8 + 1),
    "seq_len -1": ("seq_lens", 1, None, -1),
    "seq_len 2**31 - 1": ("seq_lens", 1, None, 2**31 - 1),
}


def _guarded_case(guarded, bad):
    """3 sequences on a guarded [2, blocks, 8, 2, 32] cache, whose sequence 1 gets index ``bad``
    (the rest of row 1 is padding -1); out is guarded too."""
    query, _, block_tables, seq_lens = _make_case(3, 4, 2, 32, 8, torch.float32)
    kv = guarded((2, NUM_BLOCKS, 8, 2, 32))
    out = guarded(tuple(query.shape))
    seq_lens[1] = 20  # blocks 0..2 of row 1 are in use
    block_tables[1, 3] = -1
    name, row, column, value = bad
    if name == "block_tables":
        block_tables[row, column] = value
    else:
        seq_lens[row] = value
    args = (query, kv.tensor[0], kv.tensor[1], block_tables, seq_lens, 0.2)
    return kv, out, args


@pytest.mark.parametrize("bad", BAD_INDICES.values(), ids=BAD_INDICES)
def test_paged_decode_attention_kernel_masks_bad_indices(bad, guarded, unchecked):
    # Unchecked (the GPU default): no read leaves the cache, the bad sequence's output is NaN
    # (not a silently wrong number), the other sequences are exact, nothing else is written.
    kv, out, args = _guarded_case(guarded, bad)
    cache_before = kv.buffer.clone()
    expected = torch.empty_like(out.tensor)
    good_lens = args[4].clone()
    good_lens[1] = 0
    paged_decode_attention_ref(expected, *args[:4], good_lens, args[5])

    paged_decode_attention(out.tensor, *args)

    assert out.guards_intact() and torch.equal(kv.buffer, cache_before)
    assert out.tensor[1].isnan().all()
    torch.testing.assert_close(out.tensor[[0, 2]], expected[[0, 2]])


@pytest.mark.parametrize("bad", BAD_INDICES.values(), ids=BAD_INDICES)
@pytest.mark.parametrize(
    "fn", [paged_decode_attention, paged_decode_attention_op], ids=["launcher", "op"]
)
def test_paged_decode_attention_reports_first_bad_index(fn, bad, guarded, checked):
    # Checked (CPU tensors, or AUTOFUNC_KERNEL_CHECKS=1 on a GPU): a ValueError naming the
    # argument and the first bad position, raised before out is written.
    kv, out, args = _guarded_case(guarded, bad)
    name, row, column, value = bad
    position = f"{row}, {column}" if column is not None else f"{row}"
    before = out.buffer.clone()

    with pytest.raises(ValueError, match=rf"{name}\[{position}\] = {value} is invalid"):
        fn(out.tensor, *args)

    assert torch.equal(out.buffer, before)


# -- GQA groups and the split context (flash-decoding) ------------------------------------------
# (num_q_heads, num_kv_heads): groups of 1 (MHA), 3 (GROUP_PAD 4, a masked head), 4 and 8.
GROUPS = [(4, 4), (6, 2), (8, 2), (8, 1)]


@pytest.mark.parametrize("partition_size", [None, 8, 16], ids=["whole", "p8", "p16"])
@pytest.mark.parametrize("heads", GROUPS, ids=lambda h: f"{h[0]}q{h[1]}kv")
def test_paged_decode_attention_groups_and_partitions(heads, partition_size, assert_close):
    # Block size 8, 4 blocks per sequence: partitions of 8 or 16 tokens split the context in 4
    # or 2; seq_lens 29, 1, 32, 13 end mid-partition, in the first one, on the last boundary.
    num_q_heads, num_kv_heads = heads
    query, kv_cache, block_tables, seq_lens = _make_case(4, num_q_heads, num_kv_heads, 40, 8,
                                                         torch.float32)
    args = (query, kv_cache[LAYER, 0], kv_cache[LAYER, 1], block_tables, seq_lens, 40**-0.5)
    out, expected = torch.full_like(query, 7.0), torch.empty_like(query)

    paged_decode_attention(out, *args, partition_size=partition_size)
    paged_decode_attention_ref(expected, *args)

    assert_close(out, expected)


@pytest.mark.parametrize("dtype", DTYPES[1:], ids=lambda value: str(value).removeprefix("torch."))
def test_paged_decode_attention_split_half_precision(dtype, assert_close):
    query, kv_cache, block_tables, seq_lens = _make_case(4, 8, 2, 32, 8, dtype)
    args = (query, kv_cache[LAYER, 0], kv_cache[LAYER, 1], block_tables, seq_lens, 32**-0.5)
    out, expected = torch.empty_like(query), torch.empty_like(query)

    paged_decode_attention(out, *args, partition_size=8)
    paged_decode_attention_ref(expected, *args)

    assert_close(out, expected)


def test_paged_decode_attention_split_empty_invalid_and_nan(unchecked):
    # Split in 4: seq 0 empty (zeros), seq 1 uses an out-of-range block in its third partition
    # (NaN rows), seq 2 has a NaN key in its last partition (NaN, as the reference), seq 3 a
    # seq_len past the table (NaN rows); nothing outside out is written.
    query, kv_cache, block_tables, _ = _make_case(4, 8, 2, 32, 8, torch.float32)
    seq_lens = torch.tensor([0, 30, 32, 33], dtype=torch.int32)
    key_cache, value_cache = kv_cache[LAYER, 0], kv_cache[LAYER, 1]
    for seq in (1, 2):
        for pos in range(32):
            block, offset = int(block_tables[seq, pos // 8]), pos % 8
            key_cache[block, offset] = torch.randn(2, 32)
            value_cache[block, offset] = torch.randn(2, 32)
    key_cache[block_tables[2, 3], 5, 1, 7] = float("nan")
    block_tables[1, 2] = NUM_BLOCKS
    out = torch.full_like(query, 7.0)

    paged_decode_attention(out, query, key_cache, value_cache, block_tables, seq_lens, 0.2,
                           partition_size=8)

    assert (out[0] == 0).all()
    assert out[1].isnan().all() and out[3].isnan().all()
    assert out[2, 4:].isnan().all() and out[2, :4].isfinite().all()  # kv head 1: q heads 4-7
    expected = torch.empty_like(query)
    good = block_tables.clone()
    paged_decode_attention_ref(expected[2:3], query[2:3], key_cache, value_cache, good[2:3],
                               seq_lens[2:3], 0.2)
    torch.testing.assert_close(out[2], expected[2], equal_nan=True)


@pytest.mark.parametrize("partition_size", [8, 16, 24], ids=["p8", "p16", "p24"])
def test_paged_decode_attention_split_on_inner_boundaries(partition_size, assert_close):
    # seq_lens that end exactly on an inner partition boundary (8, 16, 24 of 32 tokens): the
    # partitions after it are past the end and must contribute nothing, though the slots there
    # hold the finite values _make_case wrote for the longer seq_lens 29, 1, 32, 13. A
    # 24-token partition (no power of 2) leaves a shorter last partition.
    query, kv_cache, block_tables, _ = _make_case(4, 6, 2, 32, 8, torch.float32)
    seq_lens = torch.tensor([16, 1, 24, 8], dtype=torch.int32)
    args = (query, kv_cache[LAYER, 0], kv_cache[LAYER, 1], block_tables, seq_lens, 32**-0.5)
    out, expected = torch.full_like(query, 7.0), torch.empty_like(query)

    paged_decode_attention(out, *args, partition_size=partition_size)
    paged_decode_attention_ref(expected, *args)

    assert_close(out, expected)


@pytest.mark.parametrize("size", [0, 12, -8, 8.0, True])
def test_paged_decode_attention_rejects_a_bad_partition_size(size):
    # True is an int, but no size.
    query, kv_cache, block_tables, seq_lens = _make_case(1, 4, 2, 32, 8, torch.float32)
    args = (query, kv_cache[LAYER, 0], kv_cache[LAYER, 1], block_tables, seq_lens, 0.2)
    with pytest.raises(ValueError, match="paged_decode_attention: partition_size must be a "
                                         "positive multiple of the block size 8, got"):
        paged_decode_attention(torch.empty_like(query), *args, partition_size=size)


def test_launch_config_splits_only_small_grids():
    from autofunc.kernels.paged_attention import _launch_config

    # Batch 1, 8 KV heads, 32k context: 64 partitions of 512 tokens; batch 256: no split.
    assert _launch_config(16, 128, 4, 8, 32768, None)["NUM_PARTS"] == 64
    assert _launch_config(16, 128, 4, 256 * 8, 32768, None)["NUM_PARTS"] == 1
    assert _launch_config(16, 128, 4, 8, 100, None)["NUM_PARTS"] == 1  # shorter than a part
    config = _launch_config(8, 40, 3, 2, 32, 16)
    assert (config["GROUP_PAD"], config["HEAD_DIM_PAD"], config["NUM_PARTS"]) == (4, 64, 2)
