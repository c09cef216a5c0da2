"""rotary_embedding: Triton launcher vs the PyTorch reference, on qkv.split views."""

import itertools

import pytest
import torch

from autofunc.kernels.rotary import rotary_embedding, rotary_embedding_op, rotary_embedding_ref

NUM_TOKENS = [1, 5]
HEAD_CONFIGS = [(4, 4), (4, 1)]  # (num_q_heads, num_kv_heads): MHA and MQA
HEAD_SIZES = [16, 24]  # 24: half = 12, HALF_PAD = 16, masked tail
IS_NEOX = [True, False]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
MAX_POSITION = 64
BASE = 10000.0


def _angles(head_size):
    """``[MAX_POSITION, head_size // 2]`` rotation angles ``pos * base^(-2i / head_size)``."""
    inv_freq = BASE ** -(torch.arange(0, head_size, 2, dtype=torch.float64) / head_size)
    return torch.arange(MAX_POSITION, dtype=torch.float64)[:, None] * inv_freq[None, :]


def _make_case(num_tokens, num_q_heads, num_kv_heads, head_size, dtype):
    """A fused qkv projection (split later into views), positions and a vLLM-style cache."""
    angles = _angles(head_size)
    cos_sin_cache = torch.cat([angles.cos(), angles.sin()], dim=-1).to(dtype)
    qkv = torch.randn(num_tokens, (num_q_heads + 2 * num_kv_heads) * head_size).to(dtype)
    positions = torch.randint(0, MAX_POSITION, (num_tokens,))
    positions[-1] = MAX_POSITION - 1
    return positions, qkv, cos_sin_cache


def _split(qkv, num_q_heads, num_kv_heads, head_size):
    sizes = [num_q_heads * head_size, num_kv_heads * head_size, num_kv_heads * head_size]
    return qkv.split(sizes, dim=-1)


@pytest.mark.parametrize(
    "num_tokens, heads, head_size, is_neox, dtype",
    list(itertools.product(NUM_TOKENS, HEAD_CONFIGS, HEAD_SIZES, IS_NEOX, DTYPES)),
    ids=lambda value: str(value).removeprefix("torch."),
)
def test_rotary_embedding(num_tokens, heads, head_size, is_neox, dtype, assert_close):
    num_q_heads, num_kv_heads = heads
    positions, qkv, cos_sin_cache = _make_case(
        num_tokens, num_q_heads, num_kv_heads, head_size, dtype
    )
    actual, expected = qkv.clone(), qkv.clone()
    query, key, value = _split(actual, num_q_heads, num_kv_heads, head_size)
    assert query.stride(0) == qkv.shape[1] != query.shape[1]  # row stride != row width
    ref_query, ref_key, _ = _split(expected, num_q_heads, num_kv_heads, head_size)

    rotary_embedding(positions, query, key, cos_sin_cache, head_size, is_neox)
    rotary_embedding_ref(positions, ref_query, ref_key, cos_sin_cache, head_size, is_neox)

    assert_close(actual, expected)
    assert torch.equal(value, _split(qkv, num_q_heads, num_kv_heads, head_size)[2])


def test_rotary_embedding_separate_query_and_key(assert_close):
    # query is contiguous, key a column slice of a wider tensor: their row strides differ.
    positions, _, cos_sin_cache = _make_case(3, 2, 1, 16, torch.float32)
    query, key_base = torch.randn(3, 2 * 16), torch.randn(3, 40)
    actual_key_base, expected_key_base = key_base.clone(), key_base.clone()
    expected_query = query.clone()

    rotary_embedding(positions, query, actual_key_base[:, 8:24], cos_sin_cache, 16, False)
    rotary_embedding_ref(
        positions, expected_query, expected_key_base[:, 8:24], cos_sin_cache, 16, False
    )

    assert_close(query, expected_query)
    assert_close(actual_key_base, expected_key_base)


@pytest.mark.parametrize("is_neox", IS_NEOX)
def test_rotary_embedding_ref_matches_complex_rotation(is_neox):
    # Independent formula: each (x1, x2) pair is a complex number multiplied by exp(i * angle).
    num_q_heads, num_kv_heads, head_size = 2, 1, 16
    positions, qkv, cos_sin_cache = _make_case(
        6, num_q_heads, num_kv_heads, head_size, torch.float64
    )
    query, key, _ = _split(qkv.clone(), num_q_heads, num_kv_heads, head_size)
    angles = _angles(head_size)[positions][:, None, :]  # [tokens, 1, head_size // 2]
    rotation = torch.polar(torch.ones_like(angles), angles)
    expected = []
    for x in (query, key):
        heads = x.unflatten(-1, (-1, head_size))
        if is_neox:
            pairs = torch.complex(heads[..., : head_size // 2], heads[..., head_size // 2 :])
            rotated = pairs * rotation
            expected.append(torch.cat([rotated.real, rotated.imag], dim=-1).flatten(1))
        else:
            rotated = torch.view_as_complex(heads.unflatten(-1, (-1, 2)).contiguous()) * rotation
            expected.append(torch.view_as_real(rotated).flatten(1))

    rotary_embedding_ref(positions, query, key, cos_sin_cache, head_size, is_neox)

    torch.testing.assert_close(query, expected[0])
    torch.testing.assert_close(key, expected[1])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda value: str(value).removeprefix("torch."))
@pytest.mark.parametrize("is_neox", IS_NEOX)
def test_rotary_embedding_op_cpu(dtype, is_neox):
    positions, qkv, cos_sin_cache = _make_case(5, 4, 2, 24, dtype)
    expected = qkv.clone()
    ref_query, ref_key, _ = _split(expected, 4, 2, 24)
    rotary_embedding_ref(positions, ref_query, ref_key, cos_sin_cache, 24, is_neox)
    query, key, _ = _split(qkv, 4, 2, 24)

    rotary_embedding_op(positions, query, key, cos_sin_cache, 24, is_neox)  # CPU: the reference

    torch.testing.assert_close(qkv, expected, rtol=0, atol=0)
    torch.library.opcheck(rotary_embedding_op, (positions, query, key, cos_sin_cache, 24, is_neox))


def _bad_inputs():
    positions, qkv, cos_sin_cache = _make_case(3, 4, 2, 16, torch.float32)
    query, key, _ = _split(qkv, 4, 2, 16)
    good = (positions, query, key, cos_sin_cache, 16, True)
    yield "positions float", (positions + 0.5, *good[1:]), TypeError, "positions"
    yield "positions int16", (positions.short(), *good[1:]), TypeError, "positions"
    yield "rot_dim != head_dim", (*good[:3], cos_sin_cache[:, :8], 16, True), ValueError, "rot_dim"
    yield "head_dim mismatch", (*good[:4], 24, True), ValueError, "multiple of"
    yield "key heads", (*good[:2], qkv[:, 64:88], *good[3:]), ValueError, "key .* multiple of"
    yield "odd head_dim", (*good[:4], 15, True), ValueError, "even"
    yield "token count", (positions[:2], *good[1:]), ValueError, "one row per position"
    expanded = query[:1].expand_as(query)
    yield "overlapping query", (positions, expanded, *good[2:]), ValueError, "internal overlap"


BAD_INPUTS = list(_bad_inputs())


# Every path runs the same validation: the launcher, the custom op (its CPU reference path) and
# the op's fake implementation (what torch.compile traces with). A failed call writes nothing:
# with "key heads", the reference used to rotate query before failing on key.
@pytest.mark.parametrize("case", BAD_INPUTS, ids=lambda case: case[0])
@pytest.mark.parametrize("path", ["launcher", "op", "fake"])
def test_rotary_embedding_rejects_bad_inputs(case, path, call_fake):
    _, args, error, message = case
    before = [a.clone() for a in args[1:3]]
    with pytest.raises(error, match=message):
        if path == "launcher":
            rotary_embedding(*args)
        elif path == "op":
            rotary_embedding_op(*args)
        else:
            call_fake(rotary_embedding_op, *args)
    assert torch.equal(args[1], before[0]) and torch.equal(args[2], before[1])


# --- out-of-range positions (Note [Index checks] in kernels/_checks.py) ------------------------
BAD_POSITIONS = [MAX_POSITION, 10**6, -1, -(2**40)]


def _guarded_case(guarded, bad_position):
    """5 tokens whose token 2 has ``bad_position``; qkv and cos_sin_cache are guarded."""
    positions, qkv, cos_sin_cache = _make_case(5, 4, 2, 16, torch.float32)
    positions[2] = bad_position
    qkv_g, cache_g = guarded(tuple(qkv.shape)), guarded(tuple(cos_sin_cache.shape))
    qkv_g.tensor.copy_(qkv)
    cache_g.tensor.copy_(cos_sin_cache)
    return qkv_g, cache_g, positions


@pytest.mark.parametrize("bad_position", BAD_POSITIONS)
def test_rotary_embedding_kernel_masks_bad_positions(bad_position, guarded, unchecked):
    # Unchecked (the GPU default): nothing is read outside cos_sin_cache, the bad token's query
    # and key become NaN (not silently unrotated or zero), the other tokens are exact, and
    # value and the guards are untouched.
    qkv, cache, positions = _guarded_case(guarded, bad_position)
    query, key, value = _split(qkv.tensor, 4, 2, 16)
    good = [0, 1, 3, 4]
    expected_query, expected_key, value_before = query[good], key[good], value.clone()  # copies
    rotary_embedding_ref(positions[good], expected_query, expected_key, cache.tensor, 16, True)

    rotary_embedding(positions, query, key, cache.tensor, 16, True)

    assert qkv.guards_intact() and cache.guards_intact()
    assert query[2].isnan().all() and key[2].isnan().all() and torch.equal(value, value_before)
    torch.testing.assert_close(query[good], expected_query)
    torch.testing.assert_close(key[good], expected_key)


@pytest.mark.parametrize("bad_position", BAD_POSITIONS)
@pytest.mark.parametrize("fn", [rotary_embedding, rotary_embedding_op], ids=["launcher", "op"])
def test_rotary_embedding_reports_first_bad_position(fn, bad_position, guarded, checked):
    # Checked (CPU tensors, or AUTOFUNC_KERNEL_CHECKS=1 on a GPU): a ValueError naming the first
    # bad position, raised before query or key is written. (-1 used to wrap to the last row.)
    qkv, cache, positions = _guarded_case(guarded, bad_position)
    before = qkv.buffer.clone()
    query, key, _ = _split(qkv.tensor, 4, 2, 16)

    with pytest.raises(ValueError, match=rf"positions\[2\] = {bad_position} is invalid"):
        fn(positions, query, key, cache.tensor, 16, True)

    assert torch.equal(qkv.buffer, before)
