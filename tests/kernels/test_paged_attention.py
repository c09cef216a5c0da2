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


def _make_case(num_seqs, num_q_heads, num_kv_heads, head_size, block_size, dtype):
    """Query as a view of a qkv row, a layered cache whose unused slots hold NaN, shuffled block
    tables, and seq_lens that are not multiples of the block size (plus one full table)."""
    kv_cache = torch.full(
        (NUM_LAYERS, 2, NUM_BLOCKS, block_size, num_kv_heads, head_size), float("nan"), dtype=dtype
    )
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


def test_paged_decode_attention_op_cpu():
    query, kv_cache, block_tables, seq_lens = _make_case(3, 8, 2, 32, 8, torch.float32)
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
    yield "seq_lens int64", (*good[:5], seq_lens.long(), 0.2), TypeError, "int32"
    q_bad = query[..., :16]
    yield "head_dim mismatch", (out[..., :16], q_bad, *good[2:]), ValueError, "head_dim"
    q_3 = torch.empty(2, 3, 32)
    yield "gqa ratio", (torch.empty_like(q_3), q_3, *good[2:]), ValueError, "multiple of"
    yield "out shape", (out[:1], *good[1:]), ValueError, "out"
    yield "num_seqs", (*good[:4], block_tables[:1], *good[5:]), ValueError, "num_seqs"


@pytest.mark.parametrize("case", list(_bad_inputs()), ids=lambda case: case[0])
def test_paged_decode_attention_rejects_bad_inputs(case):
    _, args, error, message = case
    with pytest.raises(error, match=message):
        paged_decode_attention(*args)
