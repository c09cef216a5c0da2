"""reshape_and_cache: Triton launcher vs the PyTorch reference, on views of a layered cache."""

import itertools

import pytest
import torch

from autofunc.kernels.reshape_and_cache import (
    reshape_and_cache,
    reshape_and_cache_op,
    reshape_and_cache_ref,
)

NUM_TOKENS = [1, 7]
NUM_HEADS = [1, 3]
HEAD_SIZES = [16, 24]  # 24: not a power of 2, exercises the masked tail
BLOCK_SIZES = [4, 16]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Physical order of the big cache. "kv_first" stores [layers, 2, blocks, ...] (vLLM), where
# kv_cache[layer, 0] is contiguous at an offset; "block_first" stores [layers, blocks, 2, ...]
# (FlashInfer-like), where the same logical view is non-contiguous.
LAYOUTS = ["kv_first", "block_first"]
NUM_LAYERS = 3
NUM_BLOCKS = 5
LAYER = 1


def _make_case(num_tokens, num_heads, head_size, block_size, dtype):
    """A big ``[layers, 2, blocks, block_size, heads, head]`` cache, inputs and a slot mapping
    with distinct slots where every third token is padding (-1)."""
    kv_cache = torch.randn(NUM_LAYERS, 2, NUM_BLOCKS, block_size, num_heads, head_size).to(dtype)
    key = torch.randn(num_tokens, num_heads, head_size).to(dtype)
    value = torch.randn(num_tokens, num_heads, head_size).to(dtype)
    slot_mapping = torch.randperm(NUM_BLOCKS * block_size)[:num_tokens]
    slot_mapping[1::3] = -1
    return kv_cache, key, value, slot_mapping


def _relayout(kv_cache, layout):
    """The same logical ``[layers, 2, blocks, ...]`` cache, stored kv-first or block-first."""
    if layout == "kv_first":
        return kv_cache.clone()
    return kv_cache.transpose(1, 2).contiguous().transpose(1, 2)


def _param_id(value):
    return str(value).removeprefix("torch.")


@pytest.mark.parametrize(
    "num_tokens, num_heads, head_size, block_size, dtype, layout",
    list(itertools.product(NUM_TOKENS, NUM_HEADS, HEAD_SIZES, BLOCK_SIZES, DTYPES, LAYOUTS)),
    ids=_param_id,
)
def test_reshape_and_cache(num_tokens, num_heads, head_size, block_size, dtype, layout):
    kv_cache, key, value, slot_mapping = _make_case(
        num_tokens, num_heads, head_size, block_size, dtype
    )
    actual, expected = _relayout(kv_cache, layout), kv_cache.clone()
    key_cache, value_cache = actual[LAYER, 0], actual[LAYER, 1]
    assert key_cache.storage_offset() > 0  # a view into the middle of the big cache
    assert key_cache.is_contiguous() == (layout == "kv_first")

    reshape_and_cache(key, value, key_cache, value_cache, slot_mapping)
    reshape_and_cache_ref(key, value, expected[LAYER, 0], expected[LAYER, 1], slot_mapping)

    torch.testing.assert_close(actual, expected, rtol=0, atol=0)  # a copy: bit exact
    # Only the rows of valid slots changed: other layers, and unaddressed rows of this layer.
    written = torch.zeros(NUM_BLOCKS * block_size, dtype=torch.bool)
    written[slot_mapping[slot_mapping >= 0]] = True
    written = written.view(NUM_BLOCKS, block_size)
    for layer in range(NUM_LAYERS):
        if layer != LAYER:
            assert torch.equal(actual[layer], kv_cache[layer])
    assert torch.equal(actual[LAYER][:, ~written], kv_cache[LAYER][:, ~written])


def test_reshape_and_cache_strided_inputs():
    # key is a view of a fused [tokens, 2, heads, head] projection, value is contiguous; the key
    # cache stores heads with a non-unit dim stride, the value cache is a separate plain tensor.
    # Every stride therefore differs between the four tensors.
    num_tokens, num_heads, head_size, block_size = 5, 2, 8, 4
    key = torch.randn(num_tokens, 2, num_heads, head_size)[:, 1]
    value = torch.randn(num_tokens, num_heads, head_size)
    key_base = torch.randn(NUM_BLOCKS, block_size, head_size, num_heads)
    value_base = torch.randn(NUM_BLOCKS, block_size, num_heads, head_size)
    actual = (key_base.clone(), value_base.clone())
    expected = (key_base.clone(), value_base.clone())
    slot_mapping = torch.tensor([3, -1, 17, 0, 9])

    reshape_and_cache(key, value, actual[0].transpose(-1, -2), actual[1], slot_mapping)
    reshape_and_cache_ref(key, value, expected[0].transpose(-1, -2), expected[1], slot_mapping)

    assert torch.equal(actual[0], expected[0]) and torch.equal(actual[1], expected[1])


def test_reshape_and_cache_ref_matches_loop():
    kv_cache, key, value, slot_mapping = _make_case(7, 3, 16, 4, torch.float32)
    expected = kv_cache.clone()
    for token, slot in enumerate(slot_mapping.tolist()):
        if slot >= 0:
            expected[LAYER, 0, slot // 4, slot % 4] = key[token]
            expected[LAYER, 1, slot // 4, slot % 4] = value[token]

    reshape_and_cache_ref(key, value, kv_cache[LAYER, 0], kv_cache[LAYER, 1], slot_mapping)

    assert torch.equal(kv_cache, expected)


def test_reshape_and_cache_op_cpu():
    kv_cache, key, value, slot_mapping = _make_case(7, 3, 16, 4, torch.float32)
    expected = kv_cache.clone()
    reshape_and_cache_ref(key, value, expected[LAYER, 0], expected[LAYER, 1], slot_mapping)

    # On CPU the op runs the reference; the result lands in the big cache through the views.
    reshape_and_cache_op(key, value, kv_cache[LAYER, 0], kv_cache[LAYER, 1], slot_mapping)

    assert torch.equal(kv_cache, expected)
    torch.library.opcheck(
        reshape_and_cache_op, (key, value, kv_cache[LAYER, 0], kv_cache[LAYER, 1], slot_mapping)
    )


def _bad_inputs():
    kv_cache, key, value, slot_mapping = _make_case(4, 2, 16, 4, torch.float32)
    good = (key, value, kv_cache[0, 0], kv_cache[0, 1], slot_mapping)
    yield "slot_mapping int32", (*good[:4], slot_mapping.int()), TypeError, "must be int64"
    yield "head_dim mismatch", (key[..., :8], value[..., :8], *good[2:]), ValueError, "head_dim"
    yield "key vs value", (key, value[:, :1], *good[2:]), ValueError, "same shape"
    yield "dtype", (key.half(), value, *good[2:]), TypeError, "dtypes"
    yield "slot count", (*good[:4], slot_mapping[:2]), ValueError, "one slot per token"


@pytest.mark.parametrize("case", list(_bad_inputs()), ids=lambda case: case[0])
def test_reshape_and_cache_rejects_bad_inputs(case):
    _, args, error, message = case
    with pytest.raises(error, match=message):
        reshape_and_cache(*args)
