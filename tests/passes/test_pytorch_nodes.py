"""PyTorch's own ``auto_functionalized`` and ``auto_functionalized_v2`` nodes around an op,
decided by autofunc's pass once ``reinplace_pytorch_nodes()`` is on
(Note [PyTorch's nodes as mutations] in autofunc/hops/pytorch_nodes.py).

No corpus op is registered: functionalization emits PyTorch's nodes, and the adapters read
them. Every corpus program is checked against eager (outputs and mutated inputs) through the
pass alone, and a chosen few under Inductor.
"""

from __future__ import annotations

import pytest
import torch
import torch._inductor.config as inductor_config

import autofunc
from autofunc.hops import pytorch_nodes
from autofunc.hops.adapter import adapters_for
from autofunc.inductor import collect_reports
from autofunc.testing import compile_capture, run_against_eager
from tools import corpus

PROGRAMS = sorted(corpus.PROGRAMS)
RETURN_THEIR_ARGS = {"returns_its_argument", "returns_its_out"}  # ops that return their args
INDUCTOR_PROGRAMS = [p for p in ("kv_layers", "note_select", "dst_src_clone") if p in corpus.PROGRAMS]


@pytest.fixture(params=["v1", "v2"])
def pytorch_version(request):
    autofunc.reinplace_pytorch_nodes()
    try:
        with inductor_config.patch(enable_auto_functionalized_v2=request.param == "v2"):
            yield request.param
    finally:
        autofunc.reinplace_pytorch_nodes(False)


def _check(p, compiled):
    for make in (p.inputs, p.make_inputs):
        check = run_against_eager(p.fn, compiled, make())
        assert check.correct, f"{check.mismatch} differ:\n{check.expected}\n{check.got}"


@pytest.mark.parametrize("name", PROGRAMS)
def test_pass_decides_pytorch_nodes(name, pytorch_version):
    p = corpus.PROGRAMS[name]
    baseline, _ = compile_capture(p.fn, reinplace_pass=False)
    try:
        right = run_against_eager(p.fn, baseline, p.inputs()).correct
    except Exception as e:  # noqa: BLE001 - the baseline's own failure, named in the skip
        pytest.skip(f"PyTorch's own handling fails here too: {type(e).__name__}")
    if not right:  # v1 on aliased or unfold arguments: the functional graph is wrong already
        pytest.skip("PyTorch's node gives a wrong result before any pass")
    torch._dynamo.reset()
    compiled, captured = compile_capture(p.fn)
    _check(p, compiled)
    strategies = {c.strategy for c in captured.report.calls}
    assert strategies <= {f"pytorch_{pytorch_version}"}, strategies
    left = [t for t in captured.reinplaced if "auto_functionalized" in t]
    if not captured.report.calls:  # every node left to PyTorch: only where the Note says
        assert left and (name in RETURN_THEIR_ARGS or (pytorch_version == "v1" and "list" in name))


@pytest.mark.parametrize("name", INDUCTOR_PROGRAMS)
def test_pytorch_nodes_under_inductor(name, pytorch_version):
    p = corpus.PROGRAMS[name]
    with collect_reports() as reports, inductor_config.patch(fx_graph_cache=False):
        compiled = torch.compile(p.fn, backend="inductor", fullgraph=True)
        _check(p, compiled)
    assert reports and all(c.strategy == f"pytorch_{pytorch_version}" for c in reports[0].calls)


def test_off_by_default_and_switched_off():
    assert not pytorch_nodes.enabled()
    autofunc.reinplace_pytorch_nodes()
    autofunc.reinplace_pytorch_nodes(False)
    p = corpus.PROGRAMS["kv_layers"]
    compiled, captured = compile_capture(p.fn)
    _check(p, compiled)
    assert not captured.report.calls
    assert any("auto_functionalized" in t for t in captured.reinplaced)


def test_regions_and_ops_share_the_v2_target(pytorch_version):
    # One target, two adapters chosen by accepts (Note [Several adapters per target]).
    def kinds():
        return sorted(
            type(a).__name__ for a in adapters_for(torch.ops.higher_order.auto_functionalized_v2)
        )

    assert kinds() == ["PyTorchV2Adapter", "SubgraphAdapter"]
    autofunc.reinplace_pytorch_nodes()  # again: replaces, never duplicates
    autofunc.reinplace_nested_regions(False)
    assert kinds() == ["PyTorchV2Adapter"]
    autofunc.reinplace_nested_regions(True)
    assert kinds() == ["PyTorchV2Adapter", "SubgraphAdapter"]
