"""torch.export of programs that call registered ops: the functionalized exported graph uses
autofunc's HOPs, and the exported module computes what eager does, mutated inputs and buffers
included."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch.export.graph_signature import OutputKind
from torch.fx.experimental.proxy_tensor import make_fx

import autofunc
from autofunc.testing import same_result
from tools import corpus

EXPORT_PROGRAMS = [
    "note_select",
    "note_column",
    "input_row",
    "list_arg",
    "kwarg_only",
    "returns_and_mutates",
    "kv_layers",
    "list_of_optional_arg",
    "unfold_gaps",
    "returns_its_argument",
    "returns_its_out",
    "rope_in_place",  # the HOP's _aliases keyword (Note [Read arguments eager aliases])
    "sglang_rope_inplace",  # _aliases naming other objects over the written memory ("q~q_rope")
    "wtr_transpose_input",  # _reads/_read_views (Note [Read arguments see the written memory])
    "write_list_rows",  # _reads over the elements of a written list
]
EXPORT_PROGRAMS = [p for p in EXPORT_PROGRAMS if p in corpus.PROGRAMS]  # torch-dependent
# torch.export's own pytree code warns about LeafSpec; not ours.
pytestmark = pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning")


class _Program(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def _export(name: str) -> torch.export.ExportedProgram:
    p = corpus.PROGRAMS[name]
    return torch.export.export(_Program(p.fn), p.inputs())


def _hops(gm: torch.fx.GraphModule) -> list[str]:
    return [
        n.target.name()
        for n in gm.graph.nodes
        if n.op == "call_function" and isinstance(n.target, torch._ops.HigherOrderOperator)
    ]


def _assert_runs_like_eager(module, name: str) -> None:
    p = corpus.PROGRAMS[name]
    inputs = list(p.inputs())
    eager_inputs = [t.clone() for t in inputs]
    expected = p.fn(*eager_inputs)
    got = module(*inputs)
    assert same_result(expected, got)
    assert same_result(eager_inputs, inputs)


@pytest.mark.parametrize("name", EXPORT_PROGRAMS)
def test_exported_graph_uses_autofunc_hops(name, strategy):
    ep = _export(name).run_decompositions()
    hops = _hops(ep.graph_module)
    # autofunc's HOP only: neither auto_functionalized nor auto_functionalized_v2. (v1 hands
    # calls on unfold views to v2: Note [Writing back unfold views]; and calls that pass one
    # tensor as a read and a mutable argument: Note [Read arguments eager aliases]; and calls
    # whose read argument shares the written memory: Note [Read arguments see the written
    # memory].)
    to_v2 = (
        "unfold_gaps",
        "rope_in_place",
        "sglang_rope_inplace",
        "wtr_transpose_input",
        "write_list_rows",
    )
    expected = {"autofunc_v2"} if name in to_v2 else {f"autofunc_{strategy}"}
    assert hops and set(hops) == expected
    _assert_runs_like_eager(ep.module(), name)


@pytest.mark.parametrize("name", EXPORT_PROGRAMS)
def test_training_ir_export_runs_like_eager(name, strategy):
    # Before run_decompositions the op is still called directly (no functionalization).
    ep = _export(name)
    assert not _hops(ep.graph_module)
    _assert_runs_like_eager(ep.module(), name)


def test_v1_export_of_overlapping_args_uses_v2():
    # Note [v1 and aliased args]: overlapping mutable arguments make that call use v2.
    regs = corpus.register_all("v1")
    try:
        ep = _export("two_overlapping").run_decompositions()
        assert _hops(ep.graph_module) == ["autofunc_v2"]
        _assert_runs_like_eager(ep.module(), "two_overlapping")
    finally:
        for r in regs:
            r.remove()


def test_mutated_user_input_is_in_the_signature(strategy):
    ep = _export("input_row").run_decompositions()
    mutations = [
        s for s in ep.graph_signature.output_specs if s.kind == OutputKind.USER_INPUT_MUTATION
    ]
    first_input = ep.graph_signature.user_inputs[0]
    assert [s.target for s in mutations] == [first_input]


class _KVCache(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("kv", torch.zeros(2, 2, 8, 4))

    def forward(self, rows, index):
        corpus.write_rows(self.kv[1, 0], rows, index)
        corpus.write_rows(self.kv[1, 1], rows * 2, index)
        return self.kv.sum(dim=(2, 3))


def test_export_mutating_a_module_buffer(strategy):
    rows, index = torch.randn(2, 4), torch.tensor([1, 5])
    ep = torch.export.export(_KVCache(), (rows, index)).run_decompositions()
    assert set(_hops(ep.graph_module)) == {f"autofunc_{strategy}"}
    specs = ep.graph_signature.output_specs
    assert [s.target for s in specs if s.kind == OutputKind.BUFFER_MUTATION] == ["kv"]
    exported, eager = ep.module(), _KVCache()
    for step in range(2):  # the second call sees the first call's writes
        rows = torch.randn(2, 4)
        assert same_result(eager(rows, index), exported(rows, index))
        assert same_result(eager.kv, exported.kv)
    assert eager.kv[1].abs().sum() > 0


@pytest.mark.parametrize("name", EXPORT_PROGRAMS)
def test_reinplace_on_exported_graph(name, strategy):
    # The pass works on exported graphs too; what it keeps or removes must not change results.
    ep = _export(name).run_decompositions()
    hops_before = _hops(ep.graph_module)
    report = autofunc.reinplace(ep.graph_module)
    assert len(report.calls) == len(hops_before) > 0
    assert not _hops(ep.graph_module)
    _assert_runs_like_eager(ep.module(), name)


def test_reinplace_clones_a_non_contiguous_buffer_outside_compile():
    # Minimal form: a v1 call on a column of a graph input must keep its clone.
    def f(base, y):
        add_ = "autofunc_corpus::add_.default"
        (new,) = autofunc.auto_functionalized_v1(add_, x=base[:, 1], y=y)
        return new

    gm = make_fx(f, tracing_mode="fake")(torch.randn(3, 3), torch.randn(3))
    autofunc.reinplace(gm)
    base, y = torch.randn(3, 3), torch.randn(3)
    base_before = base.clone()
    torch.testing.assert_close(gm(base, y), base_before[:, 1] + y)
    assert torch.equal(base, base_before)


# -- torch.export.save / load in a fresh process ------------------------------------------------

# The loading process imports autofunc and the ops' defining module, nothing else: it neither
# registers the ops nor traces the programs.
_LOAD_AND_RUN = """
import sys, torch, autofunc
from tools import corpus  # defines the autofunc_corpus ops
for path in sys.argv[1:]:
    case = torch.load(path + ".inputs")
    module = torch.export.load(path).module()
    out = module(*case["inputs"])
    torch.save({"out": out, "inputs": case["inputs"]}, path + ".result")
"""
SAVED_PROGRAMS = [
    "input_row", "list_arg", "two_overlapping", "returns_and_mutates", "rope_in_place",
    "sglang_rope_inplace", "wtr_transpose_input",
]


def _dynamic_slice(x):
    buf = x.clone()
    corpus.add_(buf[1:], x[1:])  # v2's _views holds the symbolic size of x
    return buf


def _save_cases(strategy: str, folder) -> dict[str, tuple]:
    """Export, save and record eager results of each program, before and after decompositions."""
    cases = {n: (corpus.PROGRAMS[n].fn, corpus.PROGRAMS[n].inputs) for n in SAVED_PROGRAMS}
    cases["dynamic_slice"] = (_dynamic_slice, lambda: (torch.randn(6, 3),))
    expected = {}
    regs = corpus.register_all(strategy)
    try:
        for name, (fn, make_inputs) in cases.items():
            dim = {0: torch.export.Dim("rows", min=3)} if name == "dynamic_slice" else None
            args = (torch.randn(4, 3),) if dim else make_inputs()
            ep = torch.export.export(_Program(fn), args, dynamic_shapes=((dim,) * len(args),))
            for decomposed in (False, True):
                program = ep.run_decompositions() if decomposed else ep
                assert bool(_hops(program.graph_module)) == decomposed
                path = str(folder / f"{strategy}-{name}-{decomposed}.pt2")
                torch.export.save(program, path)
                inputs = list(make_inputs())
                torch.save({"inputs": inputs}, path + ".inputs")
                eager_inputs = [t.clone() for t in inputs]
                expected[path] = (fn(*eager_inputs), eager_inputs)
    finally:
        for r in regs:
            r.remove()
    return expected


def test_save_load_in_a_fresh_process(tmp_path):
    # Note [A flat wire format]: v2's _views used to be nested tuples, which torch.export's
    # serializer rejects once run_decompositions() has put the HOP into the graph.
    expected = {**_save_cases("v1", tmp_path), **_save_cases("v2", tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", _LOAD_AND_RUN, *expected], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for path, (out, inputs) in expected.items():
        result = torch.load(path + ".result")
        assert same_result(out, result["out"]), path
        assert same_result(inputs, result["inputs"]), path
