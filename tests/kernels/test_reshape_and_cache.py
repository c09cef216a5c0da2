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


@pytest.mark.parametrize("dtype", DTYPES, ids=_param_id)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_reshape_and_cache_op_cpu(dtype, layout):
    kv_cache, key, value, slot_mapping = _make_case(7, 3, 24, 4, dtype)
    kv_cache = _relayout(kv_cache, layout)
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
    yield "slot_mapping float", (*good[:4], slot_mapping + 0.5), TypeError, "must be int64"
    yield "head_dim mismatch", (key[..., :8], value[..., :8], *good[2:]), ValueError, "head_dim"
    yield "num_heads mismatch", (key[:, :1], value[:, :1], *good[2:]), ValueError, "num_heads"
    yield "key vs value", (key, value[:, :1], *good[2:]), ValueError, "same shape"
    yield "dtype", (key.half(), value, *good[2:]), TypeError, "dtypes"
    yield "slot count", (*good[:4], slot_mapping[:2]), ValueError, "one slot per token"
    expanded = kv_cache[0, 0, :1].expand_as(kv_cache[0, 0])
    yield "overlapping cache", (*good[:2], expanded, *good[3:]), ValueError, "internal overlap"


BAD_INPUTS = list(_bad_inputs())


# Every path runs the same validation: the launcher, the custom op (its CPU reference path) and
# the op's fake implementation (what torch.compile traces with).
@pytest.mark.parametrize("case", BAD_INPUTS, ids=lambda case: case[0])
@pytest.mark.parametrize("path", ["launcher", "op", "fake"])
def test_reshape_and_cache_rejects_bad_inputs(case, path, call_fake):
    _, args, error, message = case
    before = [a.clone() for a in args]
    with pytest.raises(error, match=message):
        if path == "launcher":
            reshape_and_cache(*args)
        elif path == "op":
            reshape_and_cache_op(*args)
        else:
            call_fake(reshape_and_cache_op, *args)
    assert all(torch.equal(a, b) for a, b in zip(args, before))  # nothing written


# --- out-of-range slots (Note [Index checks] in kernels/_checks.py) ----------------------------
SMALL = {"num_heads": 2, "head_size": 8, "block_size": 4}  # NUM_BLOCKS * 4 = 20 slots
NUM_SLOTS = NUM_BLOCKS * SMALL["block_size"]
# num_slots is the first slot past key_cache: in the vLLM layout it is value_cache[0, 0].
BAD_SLOTS = [NUM_SLOTS, NUM_SLOTS + 3, 2**40, -2, -(2**40)]


def _guarded_case(guarded, bad_slot):
    """Key and value caches as kv[0] and kv[1] of one guarded [2, blocks, ...] buffer (vLLM
    layout: value_cache starts where key_cache ends), 4 tokens with slot mapping
    [3, bad_slot, -1, 17]."""
    heads, head_size, block_size = SMALL["num_heads"], SMALL["head_size"], SMALL["block_size"]
    kv = guarded((2, NUM_BLOCKS, block_size, heads, head_size))
    key, value = torch.randn(2, 4, heads, head_size)
    slot_mapping = torch.tensor([3, bad_slot, -1, 17])
    return kv, (key, value, kv.tensor[0], kv.tensor[1], slot_mapping)


@pytest.mark.parametrize("bad_slot", BAD_SLOTS)
def test_reshape_and_cache_kernel_masks_out_of_range_slots(bad_slot, guarded, unchecked):
    # Unchecked (the GPU default): the bad token is skipped, the valid ones are written, and
    # nothing outside the two caches changes, not even the value cache behind slot num_slots.
    kv, args = _guarded_case(guarded, bad_slot)
    expected = kv.tensor.clone()
    valid_slots = args[4].masked_fill(args[4] == bad_slot, -1)
    reshape_and_cache_ref(*args[:2], expected[0], expected[1], valid_slots)

    reshape_and_cache(*args)

    assert kv.guards_intact()
    assert torch.equal(kv.tensor, expected)


@pytest.mark.parametrize("bad_slot", BAD_SLOTS)
def test_reference_follows_the_kernel_on_out_of_range_slots(bad_slot, guarded, unchecked):
    # The reference is the kernel's contract on any slot_mapping: a bad slot is skipped, as the
    # unchecked kernel skips it (it used to raise a bare IndexError on -(2**40)).
    kv, args = _guarded_case(guarded, bad_slot)
    expected = kv.tensor.clone()
    reshape_and_cache_ref(*args[:2], expected[0], expected[1], args[4])
    reshape_and_cache(*args)
    assert torch.equal(kv.tensor, expected)


@pytest.mark.parametrize("bad_slot", BAD_SLOTS)
@pytest.mark.parametrize("fn", [reshape_and_cache, reshape_and_cache_op], ids=["launcher", "op"])
def test_reshape_and_cache_reports_first_bad_slot(fn, bad_slot, guarded, checked):
    # Checked (CPU tensors, or AUTOFUNC_KERNEL_CHECKS=1 on a GPU): a ValueError naming the first
    # bad position, raised before anything is written.
    kv, args = _guarded_case(guarded, bad_slot)
    before = kv.buffer.clone()

    with pytest.raises(ValueError, match=rf"slot_mapping\[1\] = {bad_slot} is invalid"):
        fn(*args)

    assert torch.equal(kv.buffer, before)


def test_reshape_and_cache_op_validates_before_first_write():
    # value_cache has fewer blocks than key_cache: slot 17 exists only in key_cache. The call must
    # fail before writing key_cache, not after (a half-written cache).
    kv_cache, key, value, _ = _make_case(2, 2, 16, 4, torch.float32)
    before = kv_cache.clone()
    args = (key, value, kv_cache[0, 0], kv_cache[0, 1, :2], torch.tensor([17, 1]))

    with pytest.raises(ValueError, match="same shape"):
        reshape_and_cache_op(*args)

    assert torch.equal(kv_cache, before)


# --- several tokens per program (Note [Tokens per program]) ------------------------------------


def test_tokens_per_program_grow_with_the_token_count():
    from autofunc.kernels.reshape_and_cache import _launch_config

    blocks = [_launch_config(n, 8, 128)["TOKEN_BLOCK"] for n in (1, 64, 512, 1024, 2048, 10**6)]
    assert blocks == [1, 1, 1, 2, 4, 8]


@pytest.mark.parametrize("token_block", [2, 4])
def test_several_tokens_per_program_with_a_ragged_tail(monkeypatch, token_block):
    # 7 tokens in programs of 2 or 4: the last program's extra tokens must write nothing
    import importlib

    # (the package's ``reshape_and_cache`` attribute is the launcher, not the module)
    rc = importlib.import_module("autofunc.kernels.reshape_and_cache")

    real = rc._launch_config
    monkeypatch.setattr(
        rc, "_launch_config", lambda *a: {**real(*a), "TOKEN_BLOCK": token_block}
    )
    kv = torch.zeros(2, NUM_BLOCKS, 4, 2, 8)
    key, value = torch.randn(2, 7, 2, 8)
    slot_mapping = torch.tensor([3, -1, 17, 0, 9, 12, 5])
    expected = kv.clone()
    reshape_and_cache_ref(key, value, expected[0], expected[1], slot_mapping)
    reshape_and_cache(key, value, kv[0], kv[1], slot_mapping)
    assert torch.equal(kv, expected)


def test_no_tokens_writes_nothing():
    kv = torch.zeros(2, NUM_BLOCKS, 4, 2, 8)
    empty = torch.empty(0, 2, 8)
    reshape_and_cache(empty, empty, kv[0], kv[1], torch.empty(0, dtype=torch.int64))
    assert not kv.any()
