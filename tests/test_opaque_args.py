"""An argument the pass does not model (an opaque object, a script object, a hoisted value)
passes through the HOPs, the pass and the report untouched
(Note [Opaque arguments] in autofunc/hops/adapter.py).

The op is shaped like vLLM's ``unified_attention_with_output``: it writes ``output`` (a view of
a fresh buffer) and finds its layer through an opaque handle. Before, the pass refused the
graph (``GraphError`` on the handle's fake value) and every compile under Inductor failed.
"""

from __future__ import annotations

import pytest
import torch

import autofunc
from autofunc.inductor import collect_reports
from autofunc.testing import compile_capture

opaque = pytest.importorskip("torch._library.opaque_object", reason="torch without opaque objects")
from torch._opaque_base import OpaqueBase  # noqa: E402


class LayerHandle(OpaqueBase):
    """A reference-type opaque object: traced as a FakeScriptObject, a graph input."""

    def __init__(self, scale: float):
        self.scale = scale


class LayerName:
    """A hoisted value-type opaque object (vLLM passes its layer name this way)."""

    def __init__(self, name: str):
        self.name = name

    def __eq__(self, other):
        return isinstance(other, LayerName) and other.name == self.name

    def __hash__(self):
        return hash(self.name)

    def __fx_repr__(self):
        return (f"LayerName({self.name!r})", {"LayerName": LayerName})


opaque.register_opaque_type(LayerHandle, typ="reference")
opaque.register_opaque_type(LayerName, typ="value", hoist=True)
SCALES = {"layers.0.attn": 0.5}


@torch.library.custom_op("opaque_test::attn_handle", mutates_args={"output"})
def attn_handle(
    query: torch.Tensor, key: torch.Tensor, output: torch.Tensor, layer: LayerHandle
) -> None:
    output.copy_((query * key).flatten(1) * layer.scale)


@attn_handle.register_fake
def _(query, key, output, layer):
    return None


@torch.library.custom_op("opaque_test::attn_name", mutates_args={"output"})
def attn_name(query: torch.Tensor, key: torch.Tensor, output: torch.Tensor, layer: LayerName) -> None:
    output.copy_((query * key).flatten(1) * SCALES[layer.name])


@attn_name.register_fake
def _(query, key, output, layer):
    return None


def attention(op, layer):
    def forward(hidden: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        qk = hidden @ w
        q, k = qk.split(16, dim=-1)
        q, k = q.view(-1, 4, 4), k.view(-1, 4, 4)
        output = torch.empty(hidden.shape[0], 32)  # vLLM's out buffer, written through a view
        op(q, k, output[:, :16], layer)
        return output[:, :16].relu() + 1

    return forward


CASES = {
    "handle": (attn_handle, lambda: LayerHandle(0.5)),
    "name": (attn_name, lambda: LayerName("layers.0.attn")),
}


@pytest.fixture(params=["v1", "v2"])
def registered(request):
    regs = [autofunc.register(op, strategy=request.param) for op, _ in CASES.values()]
    yield request.param
    for r in regs:
        r.remove()


@pytest.mark.parametrize("kind", sorted(CASES))
def test_opaque_argument_through_the_pass(kind, registered):
    op, make_layer = CASES[kind]
    fn = attention(op, make_layer())
    hidden, w = torch.randn(3, 8), torch.randn(8, 32)
    compiled, captured = compile_capture(fn)
    torch.testing.assert_close(compiled(hidden, w), fn(hidden, w))
    (call,) = captured.report.calls
    (decision,) = call.decisions
    assert decision.args == ("output",)
    assert decision or registered == "v1", str(captured.report)  # v2 writes it in place
    # the handle reaches the op's direct call as the graph passed it, nothing else of it
    graph = captured.reinplaced[0]
    assert f"opaque_test.attn_{kind}.default" in graph and "autofunc_v" not in graph


def test_opaque_argument_under_inductor(registered):
    fn = attention(attn_name, LayerName("layers.0.attn"))
    hidden, w = torch.randn(3, 8), torch.randn(8, 32)
    with collect_reports() as reports, torch._inductor.config.patch(fx_graph_cache=False):
        out = torch.compile(fn, fullgraph=True)(hidden, w)
    torch.testing.assert_close(out, fn(hidden, w))
    (report,) = reports
    assert [r[3] for r in report.rows()] == ["output"]
    assert report.num_clones == 0 or registered == "v1", str(report)


def test_a_tensor_without_a_fake_value_is_still_refused():
    # Opaque values pass; a tensor input with no fake value is still a graph the pass cannot
    # analyse, and it says so.
    def strip(gm):
        for node in gm.graph.nodes:
            if node.target is autofunc.auto_functionalized_v2:
                for arg in node.all_input_nodes:
                    arg.meta.pop("val", None)

    reg = autofunc.register(attn_handle)
    try:
        compiled, _ = compile_capture(attention(attn_handle, LayerHandle(0.5)), before_pass=strip)
        with pytest.raises(Exception, match="needs fake values"):
            compiled(torch.randn(3, 8), torch.randn(8, 32))
    finally:
        reg.remove()
