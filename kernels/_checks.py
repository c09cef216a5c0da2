"""Input checks the kernels share: each raises TypeError/ValueError naming the op, the argument
and what it got (never ``assert``: kernels validate user input).

Also owns the index-check policy (``AUTOFUNC_KERNEL_CHECKS``, see Note [Index checks]). Must not
import anything from ``autofunc`` (the kernels package is a leaf).
"""

from __future__ import annotations

import os
from typing import Any

import torch

__all__ = [
    "CHECKS_ENV",
    "check_index_values",
    "check_no_internal_overlap",
    "check_one_device",
    "check_tensors",
    "index_checks_enabled",
]

# Note [Index checks]
# ~~~~~~~~~~~~~~~~~~~
# Index tensors (slot mappings, block tables, sequence lengths, positions) are computed elsewhere
# and may be wrong. Two layers keep a bad index from corrupting memory or passing silently:
#
# 1. Every kernel masks every address it computes from an index, so it never reads or writes
#    outside the tensors it was given, whatever the index values. Where an output depends on a
#    bad index it is poisoned with NaN (attention rows, rotated rows); a cache write to a bad
#    slot is skipped.
# 2. The index *values* are checked on the host before anything is written, raising ValueError
#    naming the argument and the first bad position. Reading the values costs a device sync on a
#    GPU, so the launchers do it when the indices live on the CPU (always free) and otherwise
#    only in checked mode. The custom ops' reference path (CPU, or CUDA without Triton) always
#    checks: plain PyTorch indexing would wrap -1 or raise half-way through.
#
# ``AUTOFUNC_KERNEL_CHECKS`` selects the launchers' mode, read at each call:
#     unset / "auto"  check when the index tensors are on the CPU (the default)
#     "1"             always check (GPU: one device sync per call)
#     "0"             never check in the launchers; rely on 1. (tests use it to reach the masks)

CHECKS_ENV = "AUTOFUNC_KERNEL_CHECKS"
_CHECK_MODES = {"": None, "auto": None, "1": True, "0": False}  # None: "when on the CPU"


def index_checks_enabled(index: torch.Tensor) -> bool:
    """Whether a launcher checks the values of ``index`` on the host (Note [Index checks])."""
    raw = os.environ.get(CHECKS_ENV, "")
    if raw.strip().lower() not in _CHECK_MODES:
        raise ValueError(
            f"{CHECKS_ENV}={raw!r} is not a valid mode; use 'auto' (or unset), '1' or '0'"
        )
    mode = _CHECK_MODES[raw.strip().lower()]
    return index.device.type == "cpu" if mode is None else mode


def check_tensors(op: str, spec: dict[str, tuple[Any, int]]) -> None:
    """Each ``name: (value, ndim)`` of ``spec`` is a tensor with ``ndim`` dimensions."""
    for name, (t, ndim) in spec.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t)}")
        if t.dim() != ndim:
            raise ValueError(f"{op}: {name} must be {ndim}-D, got shape {tuple(t.shape)}")


def check_one_device(op: str, tensors: dict[str, torch.Tensor]) -> None:
    """All ``tensors`` live on one device."""
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) != 1:
        raise ValueError(f"{op}: all tensors must be on one device, got {devices}")


def check_no_internal_overlap(op: str, outputs: dict[str, torch.Tensor]) -> None:
    """No tensor the kernel writes has elements sharing memory (e.g. an ``expand``-ed tensor):
    writing one would land several results on one element. Same rule as PyTorch's in-place
    ops: only a definite overlap (a stride-0 dim of size > 1) is rejected."""
    for name, t in outputs.items():
        if torch._debug_has_internal_overlap(t) == 1:  # MemOverlap::Yes
            raise ValueError(
                f"{op}: {name} (shape {tuple(t.shape)}, stride {t.stride()}) is written in place "
                f"but has internal overlap (several elements share memory, e.g. from expand); "
                f"pass a tensor without overlap, e.g. {name}.clone()"
            )


def check_index_values(op: str, name: str, index: torch.Tensor, bad: torch.Tensor, rule: str):
    """Raise ValueError at the first ``True`` of ``bad`` (same shape as ``index``), naming
    ``name``, the position and the value found there, and the ``rule`` the values must obey.
    Reads ``bad`` on the host: a device sync on a GPU."""
    if not bool(bad.any()):
        return
    position = tuple(int(i) for i in bad.nonzero()[0])
    where = ", ".join(map(str, position))
    raise ValueError(f"{op}: {name}[{where}] = {index[position].item()} is invalid: {rule}")
