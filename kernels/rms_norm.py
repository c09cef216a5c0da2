"""Fused residual add + RMSNorm, in place on both inputs (vLLM ``fused_add_rms_norm``).

Shapes:
    x, residual  [num_tokens, hidden]; either may have a row stride != hidden (a view)
    weight       [hidden]

Semantics, as plain Python (all arithmetic in fp32)::

    residual[:] = (x + residual).to(residual.dtype)
    r = residual.float()                 # the stored (rounded) sum, as vLLM normalises it
    x[:] = (r * rsqrt(mean(r * r, dim=-1, keepdim=True) + eps) * weight).to(x.dtype)

``x`` and ``residual`` must have the same dtype; ``weight`` may have any floating dtype.
A row is one tile, so ``hidden`` is limited to ``_MAX_HIDDEN`` elements. ``x`` and ``residual``
are written, so neither may have internal overlap (an ``expand``-ed tensor would get several
rows written into one), as for PyTorch's in-place ops. No index arguments: every address is a
row and column inside the given shapes. NaN/inf propagate as in the reference.

Provenance: semantics follow vLLM's ``fused_add_rms_norm`` CUDA kernel
(csrc/layernorm_kernels.cu); the one-row-per-program structure follows the Triton tutorial
``python/tutorials/05-layer-norm.py``. Written from scratch. Changes: row and column strides for
``x``/``residual``/``weight`` are kernel arguments; no multi-tile loop for very wide rows.
"""

from __future__ import annotations

import torch

from ._checks import check_no_internal_overlap, check_one_device, check_tensors
from ._triton import require_triton, tl, triton, use_triton

__all__ = ["fused_add_rms_norm", "fused_add_rms_norm_op", "fused_add_rms_norm_ref"]


def fused_add_rms_norm_ref(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
) -> None:
    """PyTorch reference: updates ``residual`` and ``x`` in place (see module).
    Trusts its inputs: the custom op validates them first (:func:`_check_args`)."""
    residual.copy_(x.float() + residual.float())
    r = residual.float()
    inv_rms = torch.rsqrt(r.pow(2).mean(dim=-1, keepdim=True) + eps)
    x.copy_(r * inv_rms * weight.float())


@triton.jit
def _fused_add_rms_norm_kernel(
    # pointers
    x_ptr,  # [num_tokens, hidden]
    residual_ptr,  # [num_tokens, hidden]
    weight_ptr,  # [hidden]
    # scalars and sizes
    hidden,
    eps,  # fp32
    # strides
    stride_x_token: tl.int64,
    stride_x_hidden: tl.int64,
    stride_residual_token: tl.int64,
    stride_residual_hidden: tl.int64,
    stride_weight_hidden: tl.int64,
    # meta-parameters
    BLOCK_HIDDEN: tl.constexpr,  # next power of 2 >= hidden: one row is one tile
):
    # --- program id -> row ----------------------------------------------------------------------
    token = tl.program_id(0)
    cols = tl.arange(0, BLOCK_HIDDEN)
    mask = cols < hidden
    x_ptrs = x_ptr + token * stride_x_token + cols * stride_x_hidden
    r_ptrs = residual_ptr + token * stride_residual_token + cols * stride_residual_hidden

    # --- residual <- x + residual; keep the rounded sum, as it is what later layers read -------
    x = tl.load(x_ptrs, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptrs, mask=mask, other=0.0).to(tl.float32)
    r = (x + r).to(residual_ptr.dtype.element_ty)
    tl.store(r_ptrs, r, mask=mask)
    r = r.to(tl.float32)

    # --- x <- r * rsqrt(mean(r^2) + eps) * weight, in fp32; masked columns are 0 --------------
    inv_rms = tl.rsqrt(tl.sum(r * r, axis=0) / hidden + eps)
    w = tl.load(weight_ptr + cols * stride_weight_hidden, mask=mask, other=0.0).to(tl.float32)
    tl.store(x_ptrs, (r * inv_rms * w).to(x_ptr.dtype.element_ty), mask=mask)


# Heuristics instead of autotuning (as in the layer-norm tutorial): one program per row with the
# whole row in registers, warps scaled with the row width (1 warp per 256 elements, 1..16).
# Autotuning would add per-shape benchmarking for a kernel that is purely memory bound.
_MAX_HIDDEN = 65536


def _launch_config(hidden: int) -> dict[str, int]:
    block_hidden = triton.next_power_of_2(hidden)
    return {"BLOCK_HIDDEN": block_hidden, "num_warps": min(max(block_hidden // 256, 1), 16)}


def _check_args(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> None:
    """The one validation of fused_add_rms_norm's inputs, run by the launcher, the custom op's
    reference path and the fake. Raises ValueError/TypeError naming the offending argument, its
    shape and dtype."""
    named = {"x": x, "residual": residual, "weight": weight}
    ndims = {"x": 2, "residual": 2, "weight": 1}
    check_tensors("fused_add_rms_norm", {n: (t, ndims[n]) for n, t in named.items()})
    for name, t in named.items():
        if not t.is_floating_point():
            raise TypeError(f"fused_add_rms_norm: {name} must be floating point, got {t.dtype}")
    if x.shape != residual.shape or weight.shape[0] != x.shape[1]:
        raise ValueError(
            f"fused_add_rms_norm: x {tuple(x.shape)} and residual {tuple(residual.shape)} must be "
            f"[num_tokens, hidden] and weight {tuple(weight.shape)} must be [hidden]"
        )
    if x.shape[1] > _MAX_HIDDEN:
        raise ValueError(
            f"fused_add_rms_norm: hidden={x.shape[1]} exceeds the single-tile limit {_MAX_HIDDEN}"
        )
    if x.dtype != residual.dtype:
        raise TypeError(
            f"fused_add_rms_norm: x ({x.dtype}) and residual ({residual.dtype}) must have the same "
            f"dtype"
        )
    check_one_device("fused_add_rms_norm", named)
    check_no_internal_overlap("fused_add_rms_norm", {"x": x, "residual": residual})


def fused_add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
) -> None:
    """Launch :func:`_fused_add_rms_norm_kernel`; updates ``residual`` and ``x`` in place.

    Args:
        x: ``[num_tokens, hidden]``, any strides; overwritten with the normalised output.
        residual: ``[num_tokens, hidden]``, any strides; overwritten with ``x + residual``.
        weight: ``[hidden]``.
        eps: added to the mean square before ``rsqrt``.

    Raises:
        TypeError: non-tensor or non-float arguments, or ``x``/``residual`` dtypes differ.
        ValueError: mismatched shapes or devices, ``hidden`` above ``_MAX_HIDDEN``, or ``x``
            or ``residual`` with internal overlap.
        RuntimeError: Triton is not installed.
    """
    require_triton("fused_add_rms_norm")
    _check_args(x, residual, weight)
    num_tokens, hidden = x.shape
    _fused_add_rms_norm_kernel[(num_tokens,)](
        x_ptr=x,
        residual_ptr=residual,
        weight_ptr=weight,
        hidden=hidden,
        eps=float(eps),
        stride_x_token=x.stride(0),
        stride_x_hidden=x.stride(1),
        stride_residual_token=residual.stride(0),
        stride_residual_hidden=residual.stride(1),
        stride_weight_hidden=weight.stride(0),
        **_launch_config(hidden),
    )


@torch.library.custom_op("autofunc_kernels::fused_add_rms_norm", mutates_args=("x", "residual"))
def fused_add_rms_norm_op(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
) -> None:
    """Custom op: the Triton launcher on CUDA when Triton is installed, else the reference
    (after the same validation)."""
    if use_triton(x):
        fused_add_rms_norm(x, residual, weight, eps)
    else:
        _check_args(x, residual, weight)
        fused_add_rms_norm_ref(x, residual, weight, eps)


@fused_add_rms_norm_op.register_fake
def _fused_add_rms_norm_fake(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
) -> None:
    _check_args(x, residual, weight)
