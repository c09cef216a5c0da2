"""A read-only argument of a mutable custom op call that is a view of memory the same call writes,
with another geometry than the written argument (a transpose, permute, view, flatten, dtype view,
list element, overlapping rows, the base of the written view; tools/corpus.py, the section "read
arguments over the memory the same call writes"). In eager the op reads that memory: an op that
reads after it writes sees its new values. Compiled, the op must get a view of the memory it
writes: the values are eager's (outputs and final inputs), the re-inplace pass keeps no clone
"read by the same call" (``Reason.READ_BY_CALL``), and autofunc v2 allocates no more bytes than
PyTorch's built-in v2.

Only the exact-same-memory read works so far (tests/passes/test_same_memory_reads.py). The cases
that do not hold yet are strict xfails with the reason measured: a read argument over the written
memory gets a copy of the old values (wrong values for an op that reads after it writes, in
``corpus.NOT_YET_EAGER``), and the written base is cloned for it (``READ_BY_CALL``, more bytes
than the built-in v2)."""

import pytest
import torch

from autofunc import Reason
from autofunc.passes.reinplace import reinplace
from autofunc.testing import compile_capture, run_against_eager
from tools import corpus
from tools.compare import bytes_gate, run_program

# ops that read the memory after they write it: eager's values differ from a copy's
NOT_YET_EAGER = sorted(corpus.NOT_YET_EAGER)
# ops that read before they write: the values are eager's with a copy too (not the bytes)
READ_BEFORE = ["rtw_permute", "rtw_transpose", "rtw_transpose_input"]
ALL = NOT_YET_EAGER + READ_BEFORE

WRONG_VALUES = pytest.mark.xfail(
    strict=True,
    reason="the read argument is a copy of the old values: the op's reads after its write "
    "differ from eager's",
)
CLONED = pytest.mark.xfail(
    strict=True,
    reason="the written base is cloned for a read argument over its memory "
    "(Reason.READ_BY_CALL)",
)
MORE_BYTES = pytest.mark.xfail(
    strict=True,
    reason="the clone for the read argument (Reason.READ_BY_CALL): more bytes than the "
    "built-in v2, which passes the memory itself",
)


def _program(name: str) -> corpus.Program:
    return corpus.PROGRAMS.get(name) or corpus.NOT_YET_EAGER[name]


def _values(names):
    return [pytest.param(n, marks=WRONG_VALUES) if n in NOT_YET_EAGER else n for n in names]


def _check(fn, inputs, **capture):
    compiled, captured = compile_capture(fn, **capture)
    check = run_against_eager(fn, compiled, inputs)
    assert check.correct, check.mismatch
    return captured


def test_the_programs_are_where_they_should_be():
    # every program of the section is here; the ones with eager's values only in PROGRAMS
    assert set(NOT_YET_EAGER).isdisjoint(corpus.PROGRAMS)
    assert set(READ_BEFORE) <= set(corpus.PROGRAMS)


# -- values: the capture path (the pass alone), every program -----------------------------------


@pytest.mark.parametrize("name", _values(ALL))
def test_capture_matches_eager(strategy, name):
    p = _program(name)
    _check(p.fn, p.inputs())


@pytest.mark.parametrize("name", [pytest.param(n, marks=CLONED) for n in ALL])
def test_no_clone_for_the_read(strategy, name):
    p = _program(name)
    compiled, captured = compile_capture(p.fn)
    run_against_eager(p.fn, compiled, p.inputs())  # compiles; the values are checked above
    reasons = [d.reason for d in captured.report.decisions]
    assert Reason.READ_BY_CALL not in reasons, captured.report


# -- values through Inductor: a few programs (each a compile per strategy) ----------------------


@pytest.mark.parametrize(
    "name", _values(["wtr_transpose_fresh", "cache_put_input_rows", "rtw_transpose_input"])
)
def test_inductor_matches_eager(strategy, name):
    p = _program(name)
    compiled = torch.compile(p.fn, backend="inductor", fullgraph=True)
    check = run_against_eager(p.fn, compiled, p.inputs())
    assert check.correct, check.mismatch


# -- bytes: autofunc v2 against the built-in v2 (tools/compare), a few programs ------------------


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=MORE_BYTES)
        for n in ("rtw_transpose", "wtr_transpose_fresh", "op3_transpose_base")
    ],
)
def test_no_more_bytes_than_the_builtin_v2(monkeypatch, name):
    monkeypatch.setitem(corpus.PROGRAMS, name, _program(name))  # run_program reads PROGRAMS
    ours, builtin = (run_program(name, c) for c in ("autofunc_v2", "builtin_v2"))
    assert not builtin.error and builtin.correct, builtin  # the bar: a right built-in v2
    assert not ours.error, ours
    assert bytes_gate([ours, builtin]) == []
    assert ours.correct, ours
    assert ours.clones == 0, ours


# -- dynamic shapes ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", _values(["wtr_transpose_fresh", "rtw_transpose"]))
def test_dynamic_shapes(strategy, name):
    p = _program(name)
    compiled, captured = compile_capture(p.fn, dynamic=True)
    for inputs in (p.inputs(), (torch.randn(6, 6, dtype=torch.float64),)):
        check = run_against_eager(p.fn, compiled, inputs)
        assert check.correct, check.mismatch


@pytest.mark.parametrize("name", [pytest.param("rtw_transpose", marks=CLONED)])
def test_dynamic_shapes_no_clone_for_the_read(strategy, name):
    p = _program(name)
    compiled, captured = compile_capture(p.fn, dynamic=True)
    run_against_eager(p.fn, compiled, p.inputs())
    assert Reason.READ_BY_CALL not in [d.reason for d in captured.report.decisions]


# -- a clone kept (no pass, or the pass disabled): the read argument is a view of the clone -----


@WRONG_VALUES
def test_without_the_pass_the_hop_gives_eagers_result(strategy):
    p = corpus.NOT_YET_EAGER["wtr_transpose_fresh"]
    _check(p.fn, p.inputs(), reinplace_pass=False)


@WRONG_VALUES
def test_a_clone_kept_for_another_reason_is_what_the_read_argument_sees(strategy):
    # the pass keeps every clone (the rule "disabled"): the op reads the transpose of the clone
    def disabled(gm):
        report = reinplace(gm, enable=False, is_inference=True)
        assert {d.reason for d in report.decisions} == {Reason.DISABLED}

    p = corpus.NOT_YET_EAGER["op3_transpose_base"]
    _check(p.fn, p.inputs(), reinplace_pass=False, before_pass=disabled)
