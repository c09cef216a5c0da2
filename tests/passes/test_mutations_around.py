"""Other mutations of the memory a call writes: native in-place ops and collectives
after the call (Note [Copied back later]), and views of a mutated input returned to the caller
(Note [Outputs AOTAutograd regenerates from inputs])."""

import pytest
import torch

from autofunc import Reason
from autofunc.passes.reinplace import reinplace
from autofunc.testing import compile_capture, run_against_eager
from tools import corpus

IN_PLACE = {
    # the copy-back is of kv[1, 0] * 2 scattered into the last call's value, not that value
    "kv_then_native_inplace": 2,
    "native_inplace_after": 1,
    # AOTAutograd returns kv[0] as a view of the caller's kv, whatever the graph holds
    "kv_returned_view": 2,
    # the copy is the program's own: the output is fresh, and no call's value is returned
    "kv_returned_copy": 2,
    # two inputs over one storage: each is judged by its own copy-back (Note [Inputs that
    # share a storage])
    "shared_storage_layers": 3,
}


def _run(name):
    program = corpus.PROGRAMS[name]
    compiled, captured = compile_capture(program.fn)
    check = run_against_eager(program.fn, compiled, program.inputs())
    assert check.correct, check.mismatch
    return check, captured


def test_eager_aliased_read_arguments_in_place():
    # Note [Read arguments eager aliases]: q and k are passed as themselves to the op (a v1
    # call like this one is functionalized with v2)
    regs = corpus.register_all("v2")
    try:
        check, captured = _run("rope_in_place")
    finally:
        for r in regs:
            r.remove()
    (decision,) = captured.report.decisions
    assert decision.reason is Reason.INPLACE and decision.args == ("q_out", "k_out", "q", "k")
    assert "_aliases = ('q=q_out', 'k=k_out')" in captured.functional[0]
    (call,) = [
        n
        for n in captured.modules[0].graph.nodes
        if n.target is torch.ops.autofunc_corpus.rope.default
    ]
    q, k, q_out, k_out, _ = call.args
    assert q is q_out and k is k_out  # one tensor each, as eager passed them
    assert q.args[0].name == "mm"  # a view of qkv itself: no copy


@pytest.mark.parametrize("name", sorted(IN_PLACE))
def test_written_in_place(strategy, name):
    check, captured = _run(name)
    # under v1 the scatter of k1[0]'s new value into k1 reads k1 around row 0: the next call's
    # write of row 0 is inside the row it replaces, which holds every byte of its span (Note
    # [Containment without a box]; k1 shares its storage, so no box places the row)
    expected = [Reason.INPLACE] * IN_PLACE[name]
    assert [d.reason for d in captured.report.decisions] == expected


def _shares_storage(a, b):
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


@pytest.mark.parametrize("name, aliases", [("kv_returned_view", True), ("kv_returned_copy", False)])
def test_returned_views_alias_as_in_eager(strategy, name, aliases):
    check, _ = _run(name)
    assert _shares_storage(check.expected, check.eager_inputs[0]) is aliases
    assert _shares_storage(check.got, check.inputs[0]) is aliases


def _uncompiled_graph(name):
    """The forward graph of a corpus program (v2) before the pass, to run the pass by hand."""
    program = corpus.PROGRAMS[name]
    regs = corpus.register_all("v2")
    try:
        compiled, captured = compile_capture(program.fn, reinplace_pass=False)
        compiled(*program.inputs())
    finally:
        for r in regs:
            r.remove()
    return captured.modules[0]


def test_outside_a_compile_a_returned_view_is_copied_at_the_end():
    # Given the graph by hand, the pass cannot know that AOTAutograd regenerates the output
    # from the input, so it treats kv[0] as a fresh output: the cache is written in place and
    # the output copied at the end (Note [Returned values of written inputs]), 1/2 of the
    # cache instead of a clone of all of it.
    gm = _uncompiled_graph("kv_returned_view")
    report = reinplace(gm, is_inference=True)
    assert [d.reason for d in report.decisions] == [Reason.INPLACE] * 2
    (returned,) = gm.graph.output_node().args[0]
    assert returned.target is torch.ops.aten.clone.default
    assert returned.args[0].args[0].op == "placeholder"  # select(kv, 0, 0), after the writes


def test_in_training_a_returned_value_of_a_written_input_keeps_its_clone():
    # outside a compile the pass cannot keep the backward from reusing a saved output's memory
    # (Note [Saved values of written inputs]), so the clone stays
    report = reinplace(_uncompiled_graph("kv_returned_view"), is_inference=False)
    assert [d.reason for d in report.decisions] == [Reason.SAVED_OUTPUT, Reason.INPLACE]


def test_native_inplace_op_then_call_reads_the_new_value(strategy):
    # the reverse order: the call writes the memory a native op wrote first
    def fn(x, y):
        x.mul_(2)
        corpus.add_(x[1], y)
        return x.sum()

    compiled, captured = compile_capture(fn)
    check = run_against_eager(fn, compiled, (torch.randn(4, 8), torch.randn(8)))
    assert check.correct, check.mismatch
    assert captured.report.num_clones == 0


def overlapping_inputs(a, b, y):
    corpus.add_(a[1], y)  # a[1] is b[0]: AOTAutograd merges a and b into one synthetic base
    corpus.add_(b[1], y)
    return a.sum() + b.sum()


def test_inputs_that_overlap(strategy):
    big = torch.randn(4, 8)
    compiled, captured = compile_capture(overlapping_inputs)
    check = run_against_eager(overlapping_inputs, compiled, (big[0:2], big[1:3], torch.randn(8)))
    assert check.correct, check.mismatch


def copy_into_itself(x):
    y = x * 1
    corpus.copy_into(y, y)  # one tensor as dst and src: eager reads what it has written
    return y


@pytest.mark.parametrize("backend", ["capture", "aot_eager", "inductor"])
def test_one_tensor_as_read_and_mutable_argument_gives_eagers_result(strategy, backend):
    # Note [Read arguments eager aliases]: before, v1 and v2 ran the op on a copy of dst with
    # the old src (another result, silently); v1 now hands such a call to v2
    if backend == "capture":
        compiled = compile_capture(copy_into_itself)[0]
    else:
        compiled = torch.compile(copy_into_itself, backend=backend, fullgraph=True)
    check = run_against_eager(copy_into_itself, compiled, (torch.arange(6.0),))
    assert check.correct, check.mismatch
