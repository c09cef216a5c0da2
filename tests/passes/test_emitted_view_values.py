"""Fake values of the views the pass emits (Note [Fake values of emitted views]): computed by
the meta kernel directly, with the Python dispatcher off where everything is a plain int, they
have exactly the geometry the op gives eager tensors and the geometry the fake mode's own
dispatch (under the Python dispatcher, as inside Inductor) gives."""

from __future__ import annotations

import pytest
import torch
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from autofunc.passes.emit import _plain_view, _view_val

aten = torch.ops.aten

# (op, arguments after the base) over a base of shape (4, 6, 8), offset 5 in its storage
CASES = [
    (aten.select.int, (0, 2)),
    (aten.select.int, (2, -1)),
    (aten.slice.Tensor, (1, 1, 5, 1)),
    (aten.slice.Tensor, (1, 1, 6, 2)),
    (aten.slice.Tensor, (2, -3, 100, 1)),  # negative start, end past the size: clamped
    (aten.slice.Tensor, (0, None, None, 3)),
    (aten.slice.Tensor, (1, 7, 9, 1)),  # empty
    (aten.as_strided.default, ([2, 3], [8, 1], 9)),
    (aten.as_strided.default, ([3, 2], [1, 8], None)),
    (aten.view.default, ([24, 8],)),
    (aten.view.dtype, (torch.int32,)),
    (aten.alias.default, ()),
]


def _geometry(t: torch.Tensor) -> tuple:
    return tuple(t.shape), t.stride(), t.storage_offset(), t.dtype


@pytest.mark.parametrize("python_dispatcher", [False, True])
@pytest.mark.parametrize("op,args", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_plain_view_values_match_eager_and_the_fake_mode(op, args, python_dispatcher):
    real = torch.arange(4 * 6 * 8 + 5, dtype=torch.float32)[5:].view(4, 6, 8)
    mode = FakeTensorMode()
    base = mode.from_tensor(real)
    assert _plain_view(base, [base, *args])
    with enable_python_dispatcher() if python_dispatcher else torch._C._DisablePythonDispatcher():
        val = _view_val(mode, op, [base, *args])
        with mode:
            dispatched = op(base, *args)
    assert type(val) is FakeTensor and val.fake_mode is mode
    assert _geometry(val) == _geometry(op(real, *args)) == _geometry(dispatched)
    assert val.untyped_storage()._cdata == base.untyped_storage()._cdata  # a view of the base


def test_symbolic_values_keep_the_python_dispatcher():
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    plain = mode.from_tensor(torch.empty(4, 6), static_shapes=True)
    u = env.create_unbacked_symint()
    assert _plain_view(plain, [plain, 0, 1])
    assert _plain_view(plain, [plain, [2, 3], [6, 1], None])
    assert not _plain_view(plain, [plain, 0, u])
    assert not _plain_view(plain, [plain, [2, u], [6, 1], 0])
    dynamic = mode.from_tensor(torch.empty(4, 6))  # sizes s0, s1
    assert not _plain_view(dynamic, [dynamic, 0, 1])
