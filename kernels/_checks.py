"""Input checks the kernel launchers share: each raises TypeError/ValueError naming the op, the
argument and what it got (never ``assert``: launchers validate user input)."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["check_tensors", "check_one_device"]


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
