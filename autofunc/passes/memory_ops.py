"""What ATen ops do to memory, as the alias analysis reads them: which ops make views (and
which of those keep offsets relative to their input), what part of its input a scatter
replaces, how each node reads its tensor arguments, and a storage's address.

Tables only (Notes [Facts per target] for the memo); imports nothing of the pass but
``targets``.
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from .targets import per_target

__all__ = [
    "OVERWRITE_OPS",
    "READS_ALL",
    "READS_NOTHING",
    "READS_SOURCE",
    "SCATTERS",
    "SCATTER_VIEWS",
    "SHIFTABLE_VIEWS",
    "VIEW_OPS",
    "read_kind",
    "storage_address",
]

# Ops whose output aliases their first input and which read nothing themselves.
VIEW_OPS = frozenset(
    {
        torch.ops.aten.alias.default,
        torch.ops.aten.as_strided.default,
        torch.ops.aten.detach.default,
        torch.ops.aten.diagonal.default,
        torch.ops.aten.expand.default,
        torch.ops.aten.permute.default,
        torch.ops.aten.select.int,
        torch.ops.aten.slice.Tensor,
        torch.ops.aten.split.Tensor,
        torch.ops.aten.split_with_sizes.default,
        torch.ops.aten.squeeze.dim,
        torch.ops.aten.squeeze.dims,
        torch.ops.aten.t.default,
        torch.ops.aten.transpose.int,
        torch.ops.aten.unbind.int,
        torch.ops.aten.unflatten.int,
        torch.ops.aten.unfold.default,
        torch.ops.aten.unsqueeze.default,
        torch.ops.aten.view.default,
        torch.ops.aten.view.dtype,  # the same bytes as another dtype (Note [Dtype views])
        torch.ops.aten._reshape_alias.default,
        torch.ops.aten._unsafe_view.default,
        operator.getitem,  # of a split/unbind result (a tuple of views)
    }
)

# View ops whose result's storage offset is relative to their input's (as_strided's is
# absolute; a dtype view changes the unit of offsets): Note [A call's value read where it was
# written].
SHIFTABLE_VIEWS = VIEW_OPS - {torch.ops.aten.as_strided.default, torch.ops.aten.view.dtype}

# Scatter -> the view op selecting the part of its first input that it replaces. A scatter reads
# its first input everywhere except there (Note [Scatters read around what they replace]).
SCATTER_VIEWS = {
    torch.ops.aten.select_scatter.default: torch.ops.aten.select.int,
    torch.ops.aten.slice_scatter.default: torch.ops.aten.slice.Tensor,
    torch.ops.aten.diagonal_scatter.default: torch.ops.aten.diagonal.default,
    torch.ops.aten.as_strided_scatter.default: torch.ops.aten.as_strided.default,
}

# In-place ops that only write their first argument (the epilogue of a functional graph).
OVERWRITE_OPS = frozenset({torch.ops.aten.copy_.default})

# How a node reads its tensor arguments (``read_kind``): a view reads nothing (its reads are
# its users'), ``copy_`` only its source, a scatter all of them (of its first input, not the
# part it replaces: ``ScatterReads._mask``), any other node all of them.
READS_NOTHING, READS_SOURCE, SCATTERS, READS_ALL = "view", "copy_", "scatter", "all"


@per_target  # Note [Facts per target]
def read_kind(target: Any) -> str:
    if target in VIEW_OPS:
        return READS_NOTHING
    if target in OVERWRITE_OPS:
        return READS_SOURCE
    return SCATTERS if target in SCATTER_VIEWS else READS_ALL


# The address of a tensor's storage (what ``untyped_storage()._cdata`` is, without making a
# storage object first); a torch without the binding reads it that way.
storage_address = getattr(torch._C, "_storage_address", None) or (
    lambda t: t.untyped_storage()._cdata
)


