"""Views whose fake value lost its base's storage (Note [Views of a removed copy] in
autofunc/passes/stale_views.py): Inductor's ``remove_noop_ops`` replaces a clone by its source
and leaves the clone's views with values over the clone's fake storage. The pass must treat
them as the source's memory: checked on the pass alone (the graph rewritten as Inductor does,
then run on real data) and through Inductor in a ``torch.cond`` branch, where it was found."""

from __future__ import annotations

import contextlib

import expecttest
import pytest
import torch
from torch._inductor.fx_passes.post_grad import remove_noop_ops

import autofunc
from autofunc.passes import stale_views
from autofunc.testing import compile_capture, run_against_eager


@torch.library.custom_op("autofunc_stale::add_", mutates_args={"x"})
def add_(x: torch.Tensor, y: torch.Tensor) -> None:
    x.add_(y)


@contextlib.contextmanager
def _registered(strategy: str):
    reg = autofunc.register(add_, strategy=strategy)
    torch._dynamo.reset()
    try:
        yield strategy
    finally:
        reg.remove()
        torch._dynamo.reset()


@pytest.fixture(params=["v1", "v2"])
def strategy(request):
    with _registered(request.param):
        yield request.param


def _views_of_removed_copies(gm: torch.fx.GraphModule) -> None:
    """What Inductor does before its post-grad custom passes: clones equal to their source
    replaced by it, the values of their users left as they were."""
    before = len(gm.graph.nodes)
    remove_noop_ops(gm.graph)
    assert len(gm.graph.nodes) < before  # the clone is gone: the test sees the hazard


def _capture(fn, *inputs):
    compiled, captured = compile_capture(fn, before_pass=_views_of_removed_copies)
    check = run_against_eager(fn, compiled, inputs)
    assert check.correct, check.mismatch
    return captured


def row_of_a_copy(x):
    buf = x.clone()
    add_(buf[0], x[1])
    return buf.sum(), x.sum()


def test_a_view_of_a_removed_copy_is_the_source_s_memory(strategy):
    captured = _capture(row_of_a_copy, torch.randn(4, 4))
    (decision,) = captured.report.decisions
    assert not decision.inplace  # the source is a graph input that keeps its value
    assert decision.reason is autofunc.Reason.GRAPH_INPUT


def row_of_a_copy_of_a_slice(x):
    s = x[1:]
    buf = s.clone()  # the same size and stride as s, offset 0 where s has 4
    add_(buf[0], x[0])
    return buf * 2, x + 0


def test_the_recomputed_view_has_its_source_s_offset(strategy):
    _capture(row_of_a_copy_of_a_slice, torch.randn(4, 4))


def unbound_rows_of_a_copy(x):
    buf = x.clone()
    a, b = buf.unbind(0)  # a multi-output view: its elements follow the recomputed tuple
    add_(b, a)
    return buf + 0, x + 0


def test_elements_of_a_multi_output_view_follow_it(strategy):
    _capture(unbound_rows_of_a_copy, torch.randn(2, 3))


class TestSnapshot(expecttest.TestCase):
    def test_v1_copies_the_row_of_the_graph_input(self):
        with _registered("v1"):
            captured = _capture(row_of_a_copy, torch.randn(4, 4))
        # Before the fix: add_(select(arg0_1, 0, 0), ...) wrote the graph input.
        self.assertExpectedInline(captured.reinplaced[0], """\
def forward(self, arg0_1):
    select = torch.ops.aten.select.int(arg0_1, 0, 0)
    select_1 = torch.ops.aten.select.int(arg0_1, 0, 1)
    clone_default = torch.ops.aten.clone.default(select)
    add__default = torch.ops.autofunc_stale.add_.default(clone_default, select_1)
    select_scatter = torch.ops.aten.select_scatter.default(arg0_1, clone_default, 0, 0)
    sum_1 = torch.ops.aten.sum.default(select_scatter)
    sum_2 = torch.ops.aten.sum.default(arg0_1)
    return (sum_1, sum_2)""")


def test_refresh_recomputes_only_stale_views():
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    g = torch.fx.Graph()
    x, c = g.placeholder("x"), g.placeholder("c")
    fresh = g.call_function(torch.ops.aten.select.int, (x, 0, 1))
    stale = g.call_function(torch.ops.aten.slice.Tensor, (x, 0, 1, 3))
    g.output((fresh, stale))
    with mode:
        xv, cv = torch.empty(4, 4)[1:], torch.empty(3, 4)
        x.meta["val"], c.meta["val"] = xv, cv
        fresh.meta["val"] = xv.select(0, 1)
        stale.meta["val"] = cv[1:3]  # computed over another storage
    kept = fresh.meta["val"]
    assert stale_views.refresh_stale_views(g) == []
    assert fresh.meta["val"] is kept
    new = stale.meta["val"]
    assert new.untyped_storage()._cdata == xv.untyped_storage()._cdata
    assert (tuple(new.shape), new.stride(), new.storage_offset()) == ((2, 4), (4, 1), 8)


def fails(*args, **kwargs):
    raise RuntimeError("no value")


def test_a_view_that_cannot_be_recomputed_leaves_every_buffer_copied(monkeypatch):
    monkeypatch.setattr(stale_views, "fake_value", fails)
    with _registered("v1"):  # v1: the op takes the stale view itself
        captured = _capture(row_of_a_copy, torch.randn(4, 4))
    assert [d.reason for d in captured.report.decisions] == [autofunc.Reason.DISABLED]


def in_a_cond_branch(x, p):
    def copy_row(x):
        buf = x.clone()
        add_(buf[0], x[1])
        return buf

    def copy_all(x):
        buf = x.clone()
        add_(buf, x)
        return buf

    return torch.cond(p, copy_all, copy_row, (x,)), x.sum()


def test_in_a_cond_branch_under_inductor(strategy):
    # Inductor runs remove_noop_ops on each branch before the pass (pytorch#147210's pattern):
    # before the fix v1 wrote the operand, a graph input, in place.
    import torch._inductor.config as inductor_config

    with inductor_config.patch(fx_graph_cache=False):
        for p in (False, True):
            fn = torch.compile(in_a_cond_branch, backend="inductor", fullgraph=True)
            check = run_against_eager(in_a_cond_branch, fn, [torch.randn(4, 3), torch.tensor(p)])
            assert check.correct, (p, check.mismatch)
