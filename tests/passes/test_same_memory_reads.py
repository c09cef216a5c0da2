"""A read-only argument that is exactly the memory of a written one (Note
[Read arguments eager aliases] in hops/v2.py): SGLang's rope passes ``query.view(-1, H, D)``
twice, as the read ``q`` and the written ``q_rope``. The op gets one memory for both, as in
eager, with no clone; a read that merely overlaps, or covers the memory with other strides,
is a view of the written base (Note [Read arguments see the written memory]). Values are
eager's in every case (outputs and final inputs)."""

import pytest
import torch

from autofunc import Reason
from autofunc.passes.reinplace import reinplace
from autofunc.testing import compile_capture, run_against_eager
from tools import corpus

SGLANG = ("sglang_rope_inplace", "sglang_rope_set_kv")


def _check(fn, inputs, **capture):
    compiled, captured = compile_capture(fn, **capture)
    check = run_against_eager(fn, compiled, inputs)
    assert check.correct, check.mismatch
    return captured


@pytest.mark.parametrize("name", SGLANG)
def test_sglang_rope_reads_and_writes_one_memory(strategy, name):
    program = corpus.PROGRAMS[name]
    captured = _check(program.fn, program.inputs())
    report = captured.report
    assert report.num_clones == 0, report
    ropes = [d for d in report.decisions if "q" in d.args]
    assert len(ropes) == (1 if name == "sglang_rope_inplace" else 2)  # one per layer
    assert all(d.args == ("q_rope", "k_rope", "q", "k") for d in ropes)
    # the HOP (v2 also for a v1 registration) names the reads as other objects over q_rope/k_rope
    assert "_aliases = ('q~q_rope', 'k~k_rope')" in captured.functional[0]


def test_sglang_rope_kv_pool_written_in_place_per_layer(strategy):
    program = corpus.PROGRAMS["sglang_rope_set_kv"]
    report = _check(program.fn, program.inputs()).report
    pool = [d for d in report.decisions if d.args == ("k_buffer", "v_buffer")]
    assert [d.reason for d in pool] == [Reason.INPLACE] * 2


def test_the_op_gets_another_object_over_the_written_memory(strategy):
    program = corpus.PROGRAMS["sglang_rope_inplace"]
    captured = _check(program.fn, program.inputs())
    (call,) = [
        n
        for n in captured.modules[0].graph.nodes
        if n.target is torch.ops.autofunc_corpus.apply_rope_pos_ids_cos_sin_cache.default
    ]
    q, k, q_rope, k_rope = call.args[:4]
    # as in eager: two objects (a fresh alias), one memory
    assert q is not q_rope and q.target is torch.ops.aten.alias.default and q.args[0] is q_rope
    assert k is not k_rope and k.args[0] is k_rope


def copy_views(x):
    y = x * 1
    # dst and src: two objects over one memory; copy_into reads src after writing dst, so it
    # reads what it wrote (eager's result depends on the aliasing)
    corpus.copy_into(y.view(2, 3), y.view(2, 3))
    return y


@pytest.mark.parametrize("backend", ["capture", "aot_eager"])
def test_an_op_that_reads_what_it_wrote_gets_eagers_result(strategy, backend):
    # before: the op read the old value from a copy, another result, silently
    inputs = (torch.arange(6.0),)
    if backend == "capture":
        report = _check(copy_views, inputs).report
        assert [d.reason for d in report.decisions] == [Reason.INPLACE]
    else:
        compiled = torch.compile(copy_views, backend=backend, fullgraph=True)
        check = run_against_eager(copy_views, compiled, inputs)
        assert check.correct, check.mismatch


def test_without_the_pass_the_hop_gives_eagers_result(strategy):
    # the HOP itself (every base cloned): the read argument is a view of the clone
    _check(copy_views, (torch.arange(6.0),), reinplace_pass=False)


def test_a_clone_kept_for_another_reason_is_what_the_read_argument_sees(strategy):
    # The pass keeps the clone (here: the rule "disabled"); the read argument must then be the
    # clone's memory too, not the old buffer.
    def disabled(gm):
        report = reinplace(gm, enable=False, is_inference=True)
        assert [d.reason for d in report.decisions] == [Reason.DISABLED]

    captured = _check(copy_views, (torch.arange(6.0),), reinplace_pass=False, before_pass=disabled)
    (call,) = [
        n
        for n in captured.modules[0].graph.nodes
        if n.target is torch.ops.autofunc_corpus.copy_into.default
    ]
    dst, src = call.args
    assert src.args[0] is dst  # a fresh alias of the clone's view


def _rope_call(q, k, q_rope, k_rope, cos_sin_cache, positions):
    corpus.apply_rope_pos_ids_cos_sin_cache(
        q, k, q_rope, k_rope, cos_sin_cache, positions, False, None, None, None, None
    )


def overlapping_read(x, cos_sin_cache, positions):
    buf = x * 1  # [64, 16]: rows 0-31 read, rows 8-39 written
    k, k_rope = torch.ones(4, 2, 16), torch.zeros(4, 2, 16)
    _rope_call(
        buf[:32].view(4, 8, 16), k, buf[8:40].view(4, 8, 16), k_rope, cos_sin_cache, positions
    )
    return buf, k_rope


def other_strides(x, cos_sin_cache, positions):
    buf = x * 1  # read and written from storage offset 0, as [4, 2, 16] with other strides
    k, k_rope = torch.ones(4, 2, 16), torch.zeros(4, 2, 16)
    read = buf.view(16, 64)[:4, :32].view(4, 2, 16)  # strides (64, 16, 1)
    written = buf.view(32, 32)[:4].view(4, 2, 16)  # strides (32, 16, 1)
    _rope_call(read, k, written, k_rope, cos_sin_cache, positions)
    return buf, k_rope


@pytest.mark.parametrize("fn", [overlapping_read, other_strides])
def test_a_read_over_the_written_memory_in_another_geometry_is_a_view_of_it(strategy, fn):
    # Note [Read arguments see the written memory]: not exactly the written memory, so no
    # alias, but a view of the written base (``_reads``), which the op reads as it writes it:
    # eager's values and no copy (before, the rule "read by the same call" kept a clone)
    _, _, cos_sin_cache, positions = corpus.PROGRAMS["sglang_rope_inplace"].inputs()
    captured = _check(fn, (torch.randn(64, 16), cos_sin_cache, positions))
    assert "_aliases" not in captured.functional[0]
    assert "_reads = ('q',)" in captured.functional[0]
    assert captured.report.num_clones == 0, captured.report


def test_symbolic_sizes_still_one_memory(strategy):
    # under dynamic shapes the two views have equal symbolic geometry: provably one memory
    program = corpus.PROGRAMS["sglang_rope_inplace"]
    captured = _check(program.fn, program.inputs(), dynamic=True)
    assert captured.report.num_clones == 0
