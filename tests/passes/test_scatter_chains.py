"""A call that writes several views of one fresh buffer under a v1 node (vLLM's
``rotary_embedding(positions, query, key)`` with ``query, key = qkv.split(...)``): the write-back
is a chain of ``slice_scatter``s, and no clone is needed (Note [Scatter chains overwrite what
they copy] and Note [A call's value read where it was written] in autofunc/passes/alias.py).

Each program runs under PyTorch's own v1 node (``reinplace_pytorch_nodes()``, nothing
registered) and autofunc's (``register(op, strategy="v1")``), through the pass alone on
AOTAutograd's graph, against eager: outputs and mutated inputs. Where the old value of a written
window *is* read (a graph changed by hand to read it, the functional program being the oracle
then), the clone stays.

The same programs with a symbolic row count (``dynamic=True``, vLLM's token count ``s72``) are
compiled once and checked at two row counts (Note [Shifts with symbolic sizes]).
"""

from __future__ import annotations

import pytest
import torch
import torch._inductor.config as inductor_config

import autofunc
from autofunc import Reason
from autofunc.inductor import collect_reports
from autofunc.testing import compile_capture, run_against_eager, same_result

aten = torch.ops.aten


@torch.library.custom_op("af_scatter_chain::rot", mutates_args={"query", "key"})
def rot(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None) -> None:
    query.mul_(2)
    if key is not None:
        key.add_(positions.unsqueeze(-1).to(key.dtype))


@rot.register_fake
def _(positions, query, key):
    return None


@torch.library.custom_op("af_scatter_chain::rot3", mutates_args={"a", "b", "c"})
def rot3(positions: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
    a.mul_(2)
    b.add_(positions.unsqueeze(-1).to(b.dtype))
    c.sub_(a[..., : c.shape[-1]])  # reads what a wrote: the views must be the caller's


@rot3.register_fake
def _(positions, a, b, c):
    return None


def rope(x, w, pos):
    qkv = x @ w
    q, k, v = qkv.split([8, 4, 4], -1)
    rot(pos, q, k)
    return qkv.sum(-1), v * 2


def rope_copy_after(x, w, pos):
    qkv = x @ w
    q, k, v = qkv.split([8, 4, 4], -1)
    rot(pos, q, k)
    k2 = qkv[..., 8:12].clone()  # the new key: taken after the call
    return qkv.sum(-1), v * 2, k2


def rope_old_key_kept(x, w, pos):
    qkv = x @ w
    q, k, v = qkv.split([8, 4, 4], -1)
    kk = qkv[..., 8:12]  # an alias taken before the call: eager sees the new key through it
    old = k * 1  # the old key, computed before the call, used after it
    rot(pos, q, k)
    return qkv.sum(-1), v * 2, old + kk


def rope_three(x, w, pos):
    qkv = x @ w
    q, k, v = qkv.split([8, 4, 4], -1)
    rot3(pos, q, k, v)
    return qkv.sum(-1), qkv * 1


def rope_overlapping(x, w, pos):
    qkv = x @ w
    rot(pos, qkv[..., 0:10], qkv[..., 8:12])  # the windows share columns 8 and 9
    return qkv.sum(-1), qkv[..., 12:] * 2


def _inputs():
    g = torch.Generator().manual_seed(0)  # equal inputs for every run of one test
    return [torch.randn(3, 5, generator=g), torch.randn(5, 16, generator=g), torch.arange(3.0)]


@pytest.fixture(params=["pytorch_v1", "autofunc_v1"])
def flavour(request):
    """PyTorch's v1 node (nothing registered) or autofunc's own v1 HOP."""
    if request.param == "pytorch_v1":
        autofunc.reinplace_pytorch_nodes()
        try:
            with inductor_config.patch(enable_auto_functionalized_v2=False):
                yield request.param
        finally:
            autofunc.reinplace_pytorch_nodes(False)
    else:
        regs = [autofunc.register(op, strategy="v1") for op in (rot, rot3)]
        try:
            yield request.param
        finally:
            for r in regs:
                r.remove()


def _through_pass(fn, flavour, before_pass=None):
    compiled, captured = compile_capture(fn, before_pass=before_pass)
    check = run_against_eager(fn, compiled, _inputs())
    strategy = "pytorch_v1" if flavour == "pytorch_v1" else "v1"
    assert {c.strategy for c in captured.report.calls} == {strategy}
    return check, captured


@pytest.mark.parametrize("fn", [rope, rope_copy_after, rope_old_key_kept, rope_three])
def test_views_of_one_buffer_no_clone(flavour, fn):
    check, captured = _through_pass(fn, flavour)
    assert check.correct, check.mismatch
    report = captured.report
    assert [d.reason for d in report.decisions] == [Reason.INPLACE] * len(report.decisions)
    assert report.num_clones == 0 and report.bytes_cloned == 0
    assert len(report.decisions) == (3 if fn is rope_three else 2)
    (gm,) = captured.modules
    assert not any(n.meta.get("autofunc.clone") for n in gm.graph.nodes)


def test_overlapping_windows_as_before(flavour):
    # Overlapping windows: PyTorch's v1 node clones each alone, which is wrong before any pass
    # (Note [PyTorch's nodes as mutations]), and the pass keeps that; autofunc's v1 hands the
    # call to v2, which clones the common base once and writes it in place. Both as before
    # the scatter-chain reasoning.
    compiled, captured = compile_capture(rope_overlapping)
    check = run_against_eager(rope_overlapping, compiled, _inputs())
    decisions = [d.reason for d in captured.report.decisions]
    if flavour == "pytorch_v1":
        baseline, _ = compile_capture(rope_overlapping, reinplace_pass=False)
        base = run_against_eager(rope_overlapping, baseline, _inputs())
        assert not base.correct  # PyTorch's node itself
        assert [same_result(a, b) for a, b in zip(check.got, base.got)] == [True, True]
        # the second window overlaps the first, written in place: one memory, two buffers
        assert decisions == [Reason.INPLACE, Reason.SAME_BUFFER_TWICE]
    else:
        assert check.correct, check.mismatch
        assert {c.strategy for c in captured.report.calls} == {"v2"}
        assert decisions == [Reason.INPLACE]


# -- where the old key IS read: the clone stays --------------------------------------------


def _scatters(gm):
    return [n for n in gm.graph.nodes if n.target is aten.slice_scatter.default]


def _read_first_scatter(gm):
    """Make the ``sum`` read the first scatter's result (``qkv2``, whose key window holds the
    old key) instead of the last one's."""
    first = _scatters(gm)[0]
    (s,) = [n for n in gm.graph.nodes if n.target is aten.sum.dim_IntList]
    s.replace_input_with(s.args[0], first)


def _read_first_scatter_key(gm):
    """Return ``qkv2[..., 8:12] * 1`` in place of the ``sum``: only the old key window."""
    first = _scatters(gm)[0]
    (s,) = [n for n in gm.graph.nodes if n.target is aten.sum.dim_IntList]
    with gm.graph.inserting_before(s):
        key = gm.graph.call_function(aten.slice.Tensor, (first, 1, 8, 12))
        key.meta["val"] = first.meta["val"][:, 8:12]
        mul = gm.graph.call_function(aten.mul.Tensor, (key, 1))
        mul.meta["val"] = key.meta["val"] * 1
    s.replace_all_uses_with(mul)
    gm.graph.erase_node(s)


def _read_old_qkv(gm):
    """Make the ``sum`` read ``qkv1`` (the buffer before the call) after the call."""
    (s,) = [n for n in gm.graph.nodes if n.target is aten.sum.dim_IntList]
    base = _scatters(gm)[0].args[0]
    s.replace_input_with(s.args[0], base)


@pytest.mark.parametrize(
    "change, clones",
    [
        # qkv2 read whole: its key window holds the old key, its query window the new one
        (_read_first_scatter, [Reason.INPLACE, Reason.READ_LATER]),
        (_read_first_scatter_key, [Reason.INPLACE, Reason.READ_LATER]),
        # qkv1 read after the call: the old query and the old key
        (_read_old_qkv, [Reason.READ_LATER, Reason.READ_LATER]),
    ],
)
def test_old_key_read_keeps_the_clone(flavour, change, clones):
    # The graph is changed before the pass, so eager is no oracle: the functional graph,
    # run without the pass, is.
    functional, _ = compile_capture(rope, reinplace_pass=False, before_pass=change)
    torch._dynamo.reset()
    compiled, captured = compile_capture(rope, before_pass=change)
    inputs = _inputs()
    expected = functional(*[t.clone() for t in inputs])
    got = compiled(*inputs)
    assert all(same_result(a, b) for a, b in zip(got, expected))
    assert [d.reason for d in captured.report.decisions] == clones


# -- under Inductor --------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [rope, rope_old_key_kept])
def test_under_inductor(flavour, fn):
    with collect_reports() as reports, inductor_config.patch(fx_graph_cache=False):
        compiled = torch.compile(fn, backend="inductor", fullgraph=True)
        check = run_against_eager(fn, compiled, _inputs())
    assert check.correct, check.mismatch
    (report,) = reports
    assert len(report.decisions) == 2
    if fn is rope:
        assert report.num_clones == 0 and report.bytes_cloned == 0, str(report)


# -- a symbolic token count (Note [Shifts with symbolic sizes]) ------------------------------
#
# vLLM's graph has ``qkv: f32[s72, 256]``: the rows are symbolic, the column windows static.
# Each program is compiled once with ``dynamic=True`` and checked at two row counts.


@torch.library.custom_op("af_scatter_chain::mm_into", mutates_args={"out"})
def mm_into(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> None:
    torch.mm(x, w, out=out)  # vLLM's _C::onednn_mm(c(a!), ...) into a fresh empty


@mm_into.register_fake
def _(out, x, w):
    return None


def rope_split_with_sizes(x, w, pos):
    qkv = x @ w
    q, k, v = aten.split_with_sizes(qkv, [8, 4, 4], -1)
    rot(pos, q, k)
    return qkv.sum(-1), v * 2


def rope_into_empty(x, w, pos):
    # as vLLM: qkv is the new value of an empty written by a matmul op
    qkv = torch.empty(x.shape[0], w.shape[1], dtype=x.dtype)
    mm_into(qkv, x, w)
    q, k, _ = qkv.split([8, 4, 4], -1)
    rot(pos, q, k)
    q2, k2, v2 = aten.split_with_sizes(qkv, [8, 4, 4], -1)  # the attention's views
    return q2 * 1, k2 * 1, v2 * 2


def _dyn_inputs(n):
    g = torch.Generator().manual_seed(n)
    return [torch.randn(n, 5, generator=g), torch.randn(5, 16, generator=g), torch.arange(n * 1.0)]


_ROW_COUNTS = (3, 7)


@pytest.fixture
def flavour_mm(flavour):
    """``flavour`` with ``mm_into`` under the same node kind."""
    if flavour == "autofunc_v1":
        reg = autofunc.register(mm_into, strategy="v1")
        try:
            yield flavour
        finally:
            reg.remove()
    else:
        yield flavour


def _symbolic_rows(captured) -> bool:
    (gm,) = captured.modules
    return any(
        isinstance(n.meta.get("val"), torch.Tensor)
        and isinstance(n.meta["val"].shape[0], torch.SymInt)
        for n in gm.graph.nodes
    )


def _check_dynamic(fn, compiled):
    for n in _ROW_COUNTS:
        check = run_against_eager(fn, compiled, _dyn_inputs(n))
        assert check.correct, (n, check.mismatch)


@pytest.mark.parametrize(
    "fn", [rope, rope_split_with_sizes, rope_copy_after, rope_old_key_kept, rope_three]
)
def test_symbolic_rows_no_clone(flavour, fn):
    compiled, captured = compile_capture(fn, dynamic=True)
    _check_dynamic(fn, compiled)
    assert len(captured.modules) == 1 and _symbolic_rows(captured)  # one graph for both sizes
    report = captured.report
    strategy = "pytorch_v1" if flavour == "pytorch_v1" else "v1"
    assert {c.strategy for c in report.calls} == {strategy}
    assert [d.reason for d in report.decisions] == [Reason.INPLACE] * len(report.decisions)
    assert len(report.decisions) == (3 if fn is rope_three else 2)
    assert report.num_clones == 0 and report.bytes_cloned == 0, str(report)


def test_symbolic_rows_into_empty_no_clone(flavour_mm):
    compiled, captured = compile_capture(rope_into_empty, dynamic=True)
    _check_dynamic(rope_into_empty, compiled)
    assert _symbolic_rows(captured)
    report = captured.report
    assert len(report.decisions) == 3  # the matmul's out, the query, the key
    assert report.num_clones == 0 and report.bytes_cloned == 0, str(report)


@pytest.mark.parametrize(
    "change, clones",
    [
        (_read_first_scatter, [Reason.INPLACE, Reason.READ_LATER]),
        (_read_first_scatter_key, [Reason.INPLACE, Reason.READ_LATER]),
        (_read_old_qkv, [Reason.READ_LATER, Reason.READ_LATER]),
    ],
)
def test_symbolic_rows_old_key_read_keeps_the_clone(flavour, change, clones):
    functional, _ = compile_capture(rope, dynamic=True, reinplace_pass=False, before_pass=change)
    torch._dynamo.reset()
    compiled, captured = compile_capture(rope, dynamic=True, before_pass=change)
    for n in _ROW_COUNTS:
        inputs = _dyn_inputs(n)
        expected = functional(*[t.clone() for t in inputs])
        got = compiled(*inputs)
        assert all(same_result(a, b) for a, b in zip(got, expected)), n
    assert _symbolic_rows(captured)
    assert [d.reason for d in captured.report.decisions] == clones


def test_symbolic_rows_overlapping_windows_as_before(flavour):
    # As test_overlapping_windows_as_before (PyTorch's v1 node is wrong here before any pass).
    compiled, captured = compile_capture(rope_overlapping, dynamic=True)
    if flavour == "pytorch_v1":
        for n in _ROW_COUNTS:
            compiled(*_dyn_inputs(n))
    else:
        _check_dynamic(rope_overlapping, compiled)
    assert _symbolic_rows(captured)
    decisions = [d.reason for d in captured.report.decisions]
    if flavour == "pytorch_v1":
        assert decisions == [Reason.INPLACE, Reason.SAME_BUFFER_TWICE]
    else:
        assert decisions == [Reason.INPLACE]


@pytest.mark.parametrize("fn", [rope_split_with_sizes, rope_old_key_kept, rope_into_empty])
def test_symbolic_rows_under_inductor(flavour_mm, fn):
    with collect_reports() as reports, inductor_config.patch(fx_graph_cache=False):
        compiled = torch.compile(fn, backend="inductor", fullgraph=True, dynamic=True)
        _check_dynamic(fn, compiled)
    (report,) = reports  # one graph for both sizes
    assert len(report.decisions) == (3 if fn is rope_into_empty else 2)
    if fn is not rope_old_key_kept:  # its old key is read late: as test_under_inductor
        assert report.num_clones == 0 and report.bytes_cloned == 0, str(report)


def test_static_shift_decides_without_guards():
    # Note [Shifts with symbolic sizes]: provably equal sizes and strides and a constant offset
    # difference give a shift; anything else (other sizes, another symbol, a symbolic offset)
    # gives none; and no question installs a guard.
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import (
        DimDynamic,
        ShapeEnv,
        StatelessSymbolicContext,
    )

    from autofunc.passes.alias_shifts import static_shift

    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)

    def rows(n):
        ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.STATIC])
        return mode.from_tensor(torch.empty(n, 16), symbolic_context=ctx)

    qkv, other = rows(4), rows(5)
    guards = len(env.guards)
    with mode:
        q, k, v = aten.split_with_sizes(qkv, [8, 4, 4], -1)
        value = torch.empty_strided(k.shape, k.stride())  # a v1 node's value for the key
        assert static_shift(value, k) == 8
        assert static_shift(value, v) == 12
        assert static_shift(q, k) is None  # other column count
        assert static_shift(other[:, 8:12], k) is None  # another symbol
        assert static_shift(value, qkv[1:, 8:12]) is None  # s - 1 rows
        n = qkv.shape[0]
        at_n = qkv.view(-1).as_strided(k.shape, k.stride(), n)  # a symbolic offset
        assert static_shift(value, at_n) is None
    assert len(env.guards) == guards


# -- Note [A split's piece is a slice] (passes/scatters.py) ------------------------------------


@torch.library.custom_op("split_fold::mm_into", mutates_args={"c"})
def _mm_into(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    torch.matmul(a, b, out=c)


@_mm_into.register_fake
def _(c, a, b):
    return None


@torch.library.custom_op("split_fold::rot", mutates_args={"query", "key"})
def _rot(pos: torch.Tensor, query: torch.Tensor, key: torch.Tensor) -> None:
    query.mul_(2)
    key.add_(pos[:, None])


@_rot.register_fake
def _(pos, query, key):
    return None


def _split_rope(x, w, pos):  # vLLM's shape: the matmul into a fresh qkv, rope on its pieces
    qkv = torch.empty(x.shape[0], 16)
    _mm_into(qkv, x, w)
    q, k, v = qkv.split([8, 4, 4], -1)
    _rot(pos, q, k)
    q2, k2, v2 = qkv.split([8, 4, 4], -1)
    return q2 * 1, k2 + v2


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_split_pieces_written_in_place_leave_no_scatter(dynamic):
    # Both pieces written in place: their write-back scatters put back what is there and fold,
    # so the graph copies nothing at all (before: two slice_scatters of the whole qkv).
    from autofunc.testing import copy_nodes

    autofunc.reinplace_pytorch_nodes()
    try:
        with inductor_config.patch(enable_auto_functionalized_v2=False):
            compiled, captured = compile_capture(_split_rope, dynamic=dynamic)
            for rows in (3, 7):
                x, w, pos = torch.randn(rows, 5), torch.randn(5, 16), torch.randn(rows)
                torch.testing.assert_close(compiled(x, w, pos), _split_rope(x, w, pos))
    finally:
        autofunc.reinplace_pytorch_nodes(False)
    assert captured.report.num_clones == 0, str(captured.report)
    assert [copy_nodes(gm) for gm in captured.modules] == [[]] * len(captured.modules)
