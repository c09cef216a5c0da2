"""The re-inplace pass is generic over functional mutation nodes (``autofunc.hops.adapter``): a
third kind of node, unknown to the pass, is rewritten through the adapter registered for it."""

import operator

import pytest
import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

import autofunc
from autofunc import views
from autofunc.hops import adapter
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
