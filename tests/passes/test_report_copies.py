"""The report counts every copy the final graph makes (Note [Every copy in the report] in
autofunc/passes/copies.py): its copies are the graph's copy nodes, counted from the graph alone
(``autofunc.testing.copy_nodes``), and those it counts for mutations are exactly the ones that
are not the program's own (``tools.report_copies``)."""

import collections

import expecttest
import pytest
import torch
import torch._inductor.config as inductor_config

from autofunc import Reason
from autofunc.hops.adapter import mutation_targets
from autofunc.inductor import collect_reports
from autofunc.passes.copies import CopyKind
from autofunc.passes.report import Report
from autofunc.testing import compile_capture, post_grad_copies, run_against_eager
from tools import corpus
from tools.report_copies import check_report_copies, program_copies


def capture(fn, inputs):
    own: list = []
    compiled, captured = compile_capture(fn, before_pass=lambda gm: own.append(program_copies(gm)))
    check = run_against_eager(fn, compiled, inputs)
    assert check.correct, check.mismatch
    check_report_copies(captured, own)
    return captured


def _inputs(name):
    return corpus.PROGRAMS[name].inputs()


def kinds(report: Report) -> dict:
    return dict(collections.Counter(c.kind.name for c in report.copies))


@pytest.mark.parametrize("name", sorted(corpus.PROGRAMS))
def test_corpus(strategy, name):
    """The whole corpus, with the pass alone (the conformance harness checks its programs the
    same way on aot_eager)."""
    p = corpus.PROGRAMS[name]
    capture(p.fn, p.inputs())


def two_rows_the_first_read_later(k, rows, index):
    old = k[0].sum()
    corpus.write_rows(k[0], rows, index)
    corpus.write_rows(k[1], rows * 2, index)
    return old + k[1].sum()


def _two_rows_inputs():
    return torch.randn(2, 16, 8), torch.randn(4, 8), torch.tensor([1, 5, 7, 2])


def _first_sum_after_the_first_call(gm):
    """Move the graph's first ``sum`` (a read of ``k[0]``'s old value) after the first call,
    as a post-grad reorder might: that call must then keep its clone."""
    hop = next(n for n in gm.graph.nodes if n.target in mutation_targets())
    hop.append(next(n for n in gm.graph.nodes if n.target is torch.ops.aten.sum.default))


def capture_two_rows():
    own: list = []

    def before(gm):
        own.append(program_copies(gm))
        _first_sum_after_the_first_call(gm)

    compiled, captured = compile_capture(two_rows_the_first_read_later, before_pass=before)
    check = run_against_eager(two_rows_the_first_read_later, compiled, _two_rows_inputs())
    assert check.correct, check.mismatch
    check_report_copies(captured, own)
    return captured


def test_kept_clone_and_its_write_backs(strategy):
    """v1 writes k[0] through a kept clone and k[1] in place; the write-back scatters put the
    clone into the input and are counted with it. v2 clones the base k."""
    report = capture_two_rows().report
    row, layer = 16 * 8 * 4, 2 * 16 * 8 * 4
    if strategy == "v1":
        assert kinds(report) == {"CLONE": 1, "WRITE_BACK": 2}
        assert report.bytes_cloned == row
        # the clone of one row, then the scatter of that row into k and the copy into k
        assert report.bytes_copied == row + 2 * layer
        # the clone's call scatters it back; the next call, written in place into that
        # scatter's result, copies its own value into the input after it
        (cloned,) = [c.node for c in report.calls if not all(c.decisions)]
        by_call = collections.Counter((c.call, c.kind.name) for c in report.mutation_copies)
        assert by_call[cloned, "CLONE"] == 1 and by_call[cloned, "WRITE_BACK"] == 1
        assert sum(by_call.values()) == 3
    else:
        assert kinds(report) == {"CLONE": 1, "WRITE_BACK": 1}
        assert report.bytes_cloned == layer and report.bytes_copied == 2 * layer


def test_one_storage_layers_copy_nothing(strategy):
    """Each layer of caches that share one storage is written in place, its scatters folded
    into the input; under v1 the scatter of k1[0]'s value reads k1 around row 0, where the
    next call writes, a row that is no box of k1 (Note [Containment without a box])."""
    captured = capture(corpus.shared_storage_layers, _inputs("shared_storage_layers"))
    assert [d.reason for d in captured.report.decisions] == [Reason.INPLACE] * 3
    assert kinds(captured.report) == {}


def _sum_after_the_call(gm):
    """Move the graph's first ``sum`` (a read of the input's old value) after the call, as a
    post-grad reorder might: the call must then keep its clone."""
    (hop,) = [n for n in gm.graph.nodes if n.target in mutation_targets()]
    hop.append(next(n for n in gm.graph.nodes if n.target is torch.ops.aten.sum.default))


def test_clone_of_an_input_and_its_copy_back(strategy):
    """A graph input whose old value is read after the call keeps its clone, and the graph
    copies the clone back into the input at the end: both are copies for the call."""

    def fn(x, y):
        old = x.sum()
        corpus.add_(x, y)
        return old, x[0].clone()

    own: list = []

    def before(gm):
        own.append(program_copies(gm))
        _sum_after_the_call(gm)

    compiled, captured = compile_capture(fn, before_pass=before)
    check = run_against_eager(fn, compiled, (torch.randn(8, 16), torch.randn(16)))
    assert check.correct, check.mismatch
    check_report_copies(captured, own)
    report = captured.report
    assert [d.reason.name for d in report.decisions] == ["READ_LATER"]
    assert kinds(report) == {"CLONE": 1, "WRITE_BACK": 1, "OTHER": 1}
    assert report.bytes_cloned == 8 * 16 * 4
    assert report.bytes_copied == 2 * 8 * 16 * 4  # the clone and the copy back
    own_copies = [c for c in report.copies if not c.for_mutation]
    assert [c.nbytes for c in own_copies] == [16 * 4]  # the program's x[0].clone()


class TestText(expecttest.TestCase):
    def test_report_lines(self):
        regs = corpus.register_all("v1")
        try:
            captured = capture_two_rows()
        finally:
            for r in regs:
                r.remove()
        lines = str(captured.report).splitlines()
        self.assertExpectedInline(
            "\n".join(lines[-3:]),
            """\
copy select_scatter: 1.0 KiB, puts the call's written value back into the memory it came from (autofunc_v1)
copy copy_: 1.0 KiB, puts the call's written value back into the memory it came from (autofunc_v1_1)
2 call(s), 1 clone(s): 512 B cloned, 512 B saved; the graph copies 2.5 KiB for mutations (3 copy node(s))""",
        )


def test_json_keeps_the_copies(strategy):
    captured = capture_two_rows()
    back = Report.from_json(captured.report.to_json())
    assert back.copies == captured.report.copies
    assert back.bytes_copied == captured.report.bytes_copied


# -- under Inductor: counted again after Inductor's own post-grad passes ------------------------

INDUCTOR_PROGRAMS = {
    # v1's write-back scatters, which Inductor's re-inplacing turns into writes in place
    "shared_storage_layers": {"v1": {}, "v2": {}},
    # a read computed before the call into a buffer of its own (Note [Lazy reads computed
    # before the call])
    "old_row_with_the_new_value": {"v1": {"REALIZED": 1}, "v2": {"REALIZED": 1}},
    # the old value's sum, moved before the call, where Inductor computes it: no copy (Note
    # [Users of the frontier moved back before the call])
    "read_after": {"v1": {}, "v2": {}},
    # a program's own scatter, which Inductor turns into a copy_: not a copy for a mutation
    "kv_then_native_inplace": {"v1": {"OTHER": 1}, "v2": {"OTHER": 1}},
}


@pytest.mark.parametrize("name", sorted(INDUCTOR_PROGRAMS))
def test_under_inductor(strategy, name):
    p = corpus.PROGRAMS[name]
    with (
        inductor_config.patch(force_disable_caches=True),
        post_grad_copies() as graphs,
        collect_reports() as reports,
    ):
        compiled = torch.compile(p.fn, backend="inductor", fullgraph=True)
        check = run_against_eager(p.fn, compiled, p.inputs())
    assert check.correct, check.mismatch
    assert len(reports) == len(graphs) == 1
    report = reports[0]
    assert sorted((c.node, c.nbytes) for c in report.copies) == sorted(graphs[0])
    assert kinds(report) == INDUCTOR_PROGRAMS[name][strategy]
    mutations = [c for c in report.copies if c.kind is not CopyKind.OTHER]
    assert report.bytes_copied == sum(c.nbytes for c in mutations)
