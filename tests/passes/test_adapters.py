"""The re-inplace pass is generic over functional mutation nodes (``autofunc.hops.adapter``): a
third kind of node, unknown to the pass, is rewritten through the adapter registered for it."""

import dataclasses
import operator
from typing import ClassVar

import pytest
import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

import autofunc
from autofunc import views
from autofunc.hops import adapter
from autofunc.backends.inductor.ops import WRITTEN
from autofunc.passes.emit import emit
from autofunc.passes.policy import Policy
from autofunc.schema import op_info
from autofunc.testing import same_result
from tools import corpus


def functional_add_list(xs, y):
    """A kind of functional mutation node of its own: ``corpus.add_list`` on copies of ``xs``,
    returning the copies in reverse order (so the adapter, not the pass, knows the layout)."""
    new = [x.clone() for x in xs]
    corpus.add_list(new, y)
    return tuple(reversed(new))


class _ReversedListAdapter:
    strategy = "reversed-list"

    def read(self, node):
        xs, y = node.args
        n = len(xs)
        slots = tuple(
            adapter.Slot("xs", i, n - 1 - i, views.ViewChain()) for i in range(n)
        )
        info = op_info(corpus.add_list._opoverload)
        return adapter.Mutation(info, self.strategy, tuple(reversed(xs)), slots, {"xs": [None] * n, "y": y})


@pytest.fixture
def third_kind():
    adapter.register_adapter(functional_add_list, _ReversedListAdapter())
    yield
    adapter._ADAPTERS.pop(functional_add_list)


def _graph(read_old: bool) -> fx.GraphModule:
    g = fx.Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    a = g.call_function(torch.ops.aten.add.Tensor, (x, 1))
    b = g.call_function(torch.ops.aten.mul.Tensor, (x, 2))
    node = g.call_function(functional_add_list, ([a, b], y))
    new_b, new_a = (g.call_function(operator.getitem, (node, i)) for i in range(2))
    outs = [new_a, new_b]
    if read_old:
        outs.append(g.call_function(torch.ops.aten.sum.default, (a,)))
    g.output(tuple(outs))
    return fx.GraphModule(torch.nn.Module(), g)


@pytest.mark.parametrize("read_old", [False, True])
def test_a_third_kind_of_node_goes_through_its_adapter(third_kind, read_old):
    x, y = torch.randn(3), torch.randn(3)
    gm = _graph(read_old)
    expected = gm(x, y)
    with FakeTensorMode() as mode:
        FakeTensorProp(gm, mode).propagate(mode.from_tensor(x), mode.from_tensor(y))
    report = autofunc.reinplace(gm)
    (call,) = report.calls
    assert call.strategy == "reversed-list"
    assert [d.args for d in call.decisions] == [("xs[1]",), ("xs[0]",)]
    a_reason = call.decisions[1].reason
    assert a_reason is (autofunc.Reason.READ_LATER if read_old else autofunc.Reason.INPLACE)
    assert call.decisions[0].reason is autofunc.Reason.INPLACE
    assert not any(n.target is functional_add_list for n in gm.graph.nodes)
    assert same_result(gm(x, y), expected)


_aten = torch.ops.aten


# -- the adapter seam (Note [The adapter seam] in hops/adapter.py) -----------------------------
# A kind of node that is no custom op call: its outputs are keyed by name, its direct call is a
# plain function whose writes no schema declares, so the pass must declare them around it.


def add_pair_(a, b, y):
    """Writes ``a`` and ``b`` in place; a plain function, so nothing tells a backend so."""
    a.add_(y)
    b.mul_(y)


def functional_add_pair(a, b, y):
    """A kind of functional mutation node of its own: ``add_pair_`` on copies of ``a`` and
    ``b``, returning them by name (``{"a": new_a, "b": new_b}``)."""
    new = {"a": a.clone(), "b": b.clone()}
    add_pair_(new["a"], new["b"], y)
    return new


@dataclasses.dataclass(frozen=True, kw_only=True)
class _PairCall(adapter.Mutation):
    eager_input_vals: ClassVar[bool] = False

    @property
    def op_name(self):
        return "toy:add_pair_"

    def output_keys(self, i):
        return (self.slots[i].arg,)

    def direct_call(self, args):
        kwargs = self.call_kwargs(args)
        return adapter.DirectCall(add_pair_, (kwargs["a"], kwargs["b"], kwargs["y"]), {}, 0)

    def declared_writes(self, buffers):
        return list(buffers)


class _PairAdapter:
    strategy = "toy-pair"

    def read(self, node):
        a, b, y = node.args
        slots = (
            adapter.Slot("a", None, 0, views.ViewChain()),
            adapter.Slot("b", None, 1, views.ViewChain()),
        )
        return _PairCall(None, self.strategy, (a, b), slots, {"a": None, "b": None, "y": y})


@pytest.fixture
def pair_kind():
    adapter.register_adapter(functional_add_pair, _PairAdapter())
    yield
    adapter.unregister_adapter(functional_add_pair)


def _pair_graph(read_old: bool) -> fx.GraphModule:
    g = fx.Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    a = g.call_function(torch.ops.aten.add.Tensor, (x, 1))
    b = g.call_function(torch.ops.aten.mul.Tensor, (x, 2))
    node = g.call_function(functional_add_pair, (a, b, y))
    outs = [g.call_function(operator.getitem, (node, k)) for k in ("b", "a")]
    if read_old:
        outs.append(g.call_function(torch.ops.aten.sum.default, (a,)))
    g.output(tuple(outs))
    return fx.GraphModule(torch.nn.Module(), g)


class _Declaring(Policy):
    """A backend that needs hidden writes declared (as Inductor does), defined in the test."""

    name = "declaring"

    def declare_writes(self, ctx, written, call=None, num_returns=0):
        if written:
            emit(ctx, WRITTEN, (written, []), val=None)


@pytest.mark.parametrize("read_old", [False, True])
def test_a_kind_with_named_outputs_and_declared_writes_needs_no_change_to_the_pass(
    pair_kind, read_old
):
    x, y = torch.randn(3), torch.randn(3)
    gm = _pair_graph(read_old)
    expected = gm(x, y)
    with FakeTensorMode() as mode:
        FakeTensorProp(gm, mode).propagate(mode.from_tensor(x), mode.from_tensor(y))
    report = autofunc.reinplace(gm, policy=_Declaring())

    (call,) = report.calls
    assert (call.strategy, call.op) == ("toy-pair", "toy:add_pair_")
    assert [d.args for d in call.decisions] == [("a",), ("b",)]
    reasons = [d.reason for d in call.decisions]
    a_reason = autofunc.Reason.READ_LATER if read_old else autofunc.Reason.INPLACE
    assert reasons == [a_reason, autofunc.Reason.INPLACE]
    # the direct call, its writes declared just before and just after it
    nodes = list(gm.graph.nodes)
    (direct,) = [n for n in nodes if n.target is add_pair_]
    at = nodes.index(direct)
    before, after = nodes[at - 1], nodes[at + 1]
    assert before.target is WRITTEN and after.target is WRITTEN
    assert before.args[0] == list(direct.args[:2]) == after.args[0]
    a_node, b_node = (
        next(n for n in nodes if n.target is t) for t in (_aten.add.Tensor, _aten.mul.Tensor)
    )
    assert direct.args[1] is b_node  # written in place
    assert (direct.args[0] is a_node) is not read_old  # a is cloned where it is read later
    assert not any(n.target is functional_add_pair for n in nodes)
    assert same_result(gm(x, y), expected)
