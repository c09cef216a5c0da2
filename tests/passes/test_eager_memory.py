"""A read-only argument of a mutable custom op call that is a view of memory the same call writes,
with another geometry than the written argument (a transpose, permute, view, flatten, dtype view,
list element, overlapping rows, the base of the written view; tools/corpus.py, the section "read
arguments over the memory the same call writes"). In eager the op reads that memory: an op that
reads after it writes sees its new values. Compiled, the op must get a view of the memory it
writes: the values are eager's (outputs and final inputs), the re-inplace pass keeps no clone
"read by the same call" (``Reason.READ_BY_CALL``), and autofunc v2 allocates no more bytes than
PyTorch's built-in v2.
Note [Read arguments see the written memory] in autofunc/hops/v2.py. Before it, such a read got
a copy of the old values (another result for an op that reads after it writes) and the written
base a clone for it (more bytes than the built-in v2); the exact-same-memory read is
tests/passes/test_same_memory_reads.py."""

import pytest
import torch

from autofunc import Reason
from autofunc.passes.reinplace import reinplace
from autofunc.testing import compile_capture, run_against_eager
from tools import corpus
from tools.compare import bytes_gate, run_program

# ops that read before they write: the values were eager's with a copy too (not the bytes)
READ_BEFORE = ["rtw_permute", "rtw_transpose", "rtw_transpose_input"]
# the rest read after they write: eager's values only where the read sees the writes
READ_AFTER = [
    "bits_dtype_view",
    "cache_put_input_rows",
    "cache_put_own_rows",
    "op3_transpose_base",
    "raw_view_of_base",
    "same_memory_calls",
    "same_memory_input",
    "write_list_element",
    "write_list_rows",
    "wtr_aliased_inputs",
    "wtr_overlapping_input_rows",
    "wtr_overlapping_rows",
    "wtr_permute_flatten_input",
    "wtr_permute_read",
    "wtr_permute_written",
    "wtr_transpose_fresh",
    "wtr_transpose_input",
    "mean_bits_strided_input",
    "read_of_a_kept_clone",
]
ALL = READ_AFTER + READ_BEFORE


def _check(fn, inputs, **capture):
    compiled, captured = compile_capture(fn, **capture)
    check = run_against_eager(fn, compiled, inputs)
    assert check.correct, check.mismatch
    return captured


# -- values and clones: the capture path (the pass alone), every program ----------------------


@pytest.mark.parametrize("name", ALL)
def test_capture_matches_eager_with_no_clone_for_the_read(strategy, name):
    p = corpus.PROGRAMS[name]
    captured = _check(p.fn, p.inputs())
    reasons = [d.reason for d in captured.report.decisions]
    assert Reason.READ_BY_CALL not in reasons, captured.report


# -- values through Inductor: a few programs (each a compile per strategy) ----------------------


@pytest.mark.parametrize(
    "name",
    [
        "wtr_transpose_fresh",
        "cache_put_input_rows",
        "rtw_transpose_input",
        "mean_bits_strided_input",  # Note [A dtype view Inductor keeps]
        "mean_same_bits_strided_input",  # the same element size: aten.view.dtype kept
        "read_of_a_kept_clone",  # the read of a kept clone aliases what the op writes there
    ],
)
def test_inductor_matches_eager(strategy, name):
    p = corpus.PROGRAMS[name]
    compiled = torch.compile(p.fn, backend="inductor", fullgraph=True)
    check = run_against_eager(p.fn, compiled, p.inputs())
    assert check.correct, check.mismatch


# -- bytes: autofunc v2 against the built-in v2 (tools/compare), a few programs ------------------


@pytest.mark.parametrize("name", ["rtw_transpose", "wtr_transpose_fresh", "op3_transpose_base"])
def test_no_more_bytes_than_the_builtin_v2(name):
    ours, builtin = (run_program(name, c) for c in ("autofunc_v2", "builtin_v2"))
    assert not builtin.error and builtin.correct, builtin  # the bar: a right built-in v2
    assert not ours.error, ours
    assert bytes_gate([ours, builtin]) == []
    assert ours.correct, ours
    assert ours.clones == 0, ours


# -- dynamic shapes ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["wtr_transpose_fresh", "rtw_transpose"])
def test_dynamic_shapes(strategy, name):
    p = corpus.PROGRAMS[name]
    compiled, captured = compile_capture(p.fn, dynamic=True)
    for inputs in (p.inputs(), (torch.randn(6, 6, dtype=torch.float64),)):
        check = run_against_eager(p.fn, compiled, inputs)
        assert check.correct, check.mismatch
    assert Reason.READ_BY_CALL not in [d.reason for d in captured.report.decisions]


# -- a clone kept (no pass, or the pass disabled): the read argument is a view of the clone -----


def test_without_the_pass_the_hop_gives_eagers_result(strategy):
    p = corpus.PROGRAMS["wtr_transpose_fresh"]
    _check(p.fn, p.inputs(), reinplace_pass=False)


def test_a_clone_kept_for_another_reason_is_what_the_read_argument_sees(strategy):
    # the pass keeps every clone (the rule "disabled"): the op reads the transpose of the clone
    def disabled(gm):
        report = reinplace(gm, enable=False, is_inference=True)
        assert {d.reason for d in report.decisions} == {Reason.DISABLED}

    p = corpus.PROGRAMS["op3_transpose_base"]
    _check(p.fn, p.inputs(), reinplace_pass=False, before_pass=disabled)


# -- bases whose memory meets (Note [Bases that overlap]) ------------------------------------------


def test_bases_that_meet_are_one_base(strategy):
    # before: x and its int32 view were two bases, each written back whole in turn, and the
    # second's old values undid the op's write through the first (a wrong result)
    p = corpus.PROGRAMS["dtype_view_bases_meet"]
    captured = _check(p.fn, p.inputs())
    assert "_bases = [mul]" in captured.functional[0]  # x, its dtype view regenerated from it
    assert "_reads = ('c',)" in captured.functional[0]
    assert captured.report.num_clones == 0, captured.report


# -- where geometry is unknown, a read keeps its copy ---------------------------------------------


def test_torch_func_functionalize_knows_no_geometry_so_a_read_keeps_its_copy(strategy):
    # views report no real geometry under C++ functionalization: no read is regenerated there
    from torch.fx.experimental.proxy_tensor import make_fx

    p = corpus.PROGRAMS["rtw_transpose"]
    (x,) = p.inputs()
    gm = make_fx(torch.func.functionalize(p.fn))(x.clone())
    assert "_reads" not in gm.code
    torch.testing.assert_close(gm(x.clone()), p.fn(x.clone()))
