"""fused_add_rms_norm: Triton launcher vs the PyTorch reference, on row-strided views."""

import itertools

import pytest
import torch

from autofunc.kernels.rms_norm import (
    fused_add_rms_norm,
    fused_add_rms_norm_op,
    fused_add_rms_norm_ref,
)

NUM_TOKENS = [1, 7]
HIDDEN_SIZES = [64, 200]  # 200: BLOCK_HIDDEN = 256, masked tail
STRIDED = [False, True]  # x/residual as column-slice views of rows of different widths
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
EPS = 1e-6
PAD = 5


def _make_case(num_tokens, hidden, strided, dtype):
    """(x_base, residual_base, x, residual, weight): x/residual are views into the bases; when
    strided, x starts at column PAD of rows of width hidden + 2 * PAD and residual at column 0
    of rows of width hidden + PAD, so their row strides differ."""
    x_base = torch.randn(num_tokens, hidden + 2 * PAD * strided).to(dtype)
    residual_base = torch.randn(num_tokens, hidden + PAD * strided).to(dtype)
    x = x_base[:, PAD * strided : PAD * strided + hidden]
    residual = residual_base[:, :hidden]
    weight = (1 + 0.1 * torch.randn(hidden)).to(dtype)
    return x_base, residual_base, x, residual, weight


@pytest.mark.parametrize(
    "num_tokens, hidden, strided, dtype",
    list(itertools.product(NUM_TOKENS, HIDDEN_SIZES, STRIDED, DTYPES)),
    ids=lambda value: str(value).removeprefix("torch."),
)
def test_fused_add_rms_norm(num_tokens, hidden, strided, dtype, assert_close):
    x_base, residual_base, x, residual, weight = _make_case(num_tokens, hidden, strided, dtype)
    x_before, residual_before = x_base.clone(), residual_base.clone()
    expected_x, expected_residual = x.clone(), residual.clone()

    fused_add_rms_norm(x, residual, weight, EPS)
    fused_add_rms_norm_ref(expected_x, expected_residual, weight, EPS)

    assert_close(residual, expected_residual)
    assert_close(x, expected_x)
    if strided:  # the row padding around the views is untouched
        assert torch.equal(x_base[:, :PAD], x_before[:, :PAD])
        assert torch.equal(x_base[:, PAD + hidden :], x_before[:, PAD + hidden :])
        assert torch.equal(residual_base[:, hidden:], residual_before[:, hidden:])


def test_fused_add_rms_norm_ref_matches_formula(assert_close):
    # Independent formula, evaluated in float64 on the fp32 inputs.
    _, _, x, residual, weight = _make_case(4, 96, True, torch.float32)
    total = x.double() + residual.double()
    rms = total.pow(2).mean(dim=-1, keepdim=True).add(EPS).sqrt()
    expected_x = total / rms * weight.double()

    fused_add_rms_norm_ref(x, residual, weight, EPS)

    assert_close(residual, total.float())
    assert_close(x, expected_x.float())


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda value: str(value).removeprefix("torch."))
@pytest.mark.parametrize("strided", STRIDED)
def test_fused_add_rms_norm_op_cpu(dtype, strided):
    _, _, x, residual, weight = _make_case(4, 200, strided, dtype)
    expected_x, expected_residual = x.clone(), residual.clone()
    fused_add_rms_norm_ref(expected_x, expected_residual, weight, EPS)

    fused_add_rms_norm_op(x, residual, weight, EPS)  # on CPU the op runs the reference

    torch.testing.assert_close(x, expected_x, rtol=0, atol=0)
    torch.testing.assert_close(residual, expected_residual, rtol=0, atol=0)
    torch.library.opcheck(fused_add_rms_norm_op, (x, residual, weight, EPS))


def _bad_inputs():
    _, _, x, residual, weight = _make_case(3, 64, False, torch.float32)
    yield "residual dtype", (x, residual.half(), weight, EPS), TypeError, "same dtype"
    yield "weight shape", (x, residual, weight[:32], EPS), ValueError, r"\[hidden\]"
    yield "[1] weight", (x, residual, weight[:1], EPS), ValueError, r"\[hidden\]"
    shape_message = r"\[num_tokens, hidden\]"
    yield "residual shape", (x, residual[:, :32], weight, EPS), ValueError, shape_message
    yield "integer x", (x.int(), residual.int(), weight, EPS), TypeError, "floating point"
    # An expanded tensor written in place: every row would land on the same memory.
    overlap = "internal overlap"
    yield "expanded x", (x[:1].expand_as(x), residual, weight, EPS), ValueError, overlap
    yield "expanded residual", (x, residual[:1].expand_as(x), weight, EPS), ValueError, overlap


BAD_INPUTS = list(_bad_inputs())


# Every path runs the same validation: the launcher, the custom op (its CPU reference path) and
# the op's fake implementation (what torch.compile traces with). A failed call writes nothing:
# with "weight shape", the reference used to update residual before failing on weight.
@pytest.mark.parametrize("case", BAD_INPUTS, ids=lambda case: case[0])
@pytest.mark.parametrize("path", ["launcher", "op", "fake"])
def test_fused_add_rms_norm_rejects_bad_inputs(case, path, call_fake):
    _, args, error, message = case
    before = [a.clone() for a in args[:2]]
    with pytest.raises(error, match=message):
        if path == "launcher":
            fused_add_rms_norm(*args)
        elif path == "op":
            fused_add_rms_norm_op(*args)
        else:
            call_fake(fused_add_rms_norm_op, *args)
    assert torch.equal(args[0], before[0]) and torch.equal(args[1], before[1])


def test_fused_add_rms_norm_propagates_nan(assert_close):
    # A NaN in a row poisons that row (its sum of squares), not the others, as in the reference.
    _, _, x, residual, weight = _make_case(3, 64, False, torch.float32)
    x[1, 5] = float("nan")
    expected_x, expected_residual = x.clone(), residual.clone()
    fused_add_rms_norm_ref(expected_x, expected_residual, weight, EPS)

    fused_add_rms_norm(x, residual, weight, EPS)

    assert x[1].isnan().all() and not x[[0, 2]].isnan().any()
    torch.testing.assert_close(x, expected_x, equal_nan=True)
    torch.testing.assert_close(residual, expected_residual, equal_nan=True)
