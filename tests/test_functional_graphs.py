"""Snapshots of the functional graphs of the v2 note's programs under each strategy, and of the
re-inplaced graphs under v2, with structural facts asserted next to each snapshot."""

from __future__ import annotations

import expecttest
import torch

import autofunc
from autofunc.testing import compile_capture, count_targets, same_result
from tools import corpus

_NOTE_PROGRAMS = ("note_base", "note_select", "note_column")


def _capture(name: str, strategy: str, *, reinplace_pass: bool):
    """Compiles a corpus program with all corpus ops under ``strategy``, checks it against
    eager, and returns what ``compile_capture`` recorded."""
    p = corpus.PROGRAMS[name]
    regs = corpus.register_all(strategy)
    try:
        torch._dynamo.reset()
        compiled, captured = compile_capture(p.fn, reinplace_pass=reinplace_pass)
        (x,) = p.inputs()
        x_eager = x.clone()
        assert same_result(p.fn(x_eager), compiled(x))
        assert same_result(x_eager, x)
    finally:
        for r in regs:
            r.remove()
        torch._dynamo.reset()
    assert len(captured.functional) == 1
    return captured


def _targets(gm: torch.fx.GraphModule) -> list[str]:
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def _is_clone(t) -> bool:
    return t is torch.ops.aten.clone.default


class TestFunctionalGraphs(expecttest.TestCase):
    def _assert_v2_has_no_scatter(self, gm: torch.fx.GraphModule) -> None:
        # Note [Why v2 clones bases]: views are regenerated, never scattered back.
        self.assertFalse([t for t in _targets(gm) if "scatter" in t])
        self.assertEqual(count_targets(gm, lambda t: t is torch.ops.aten.as_strided.default), 0)

    # -- v1: every mutable argument cloned; a view's new value is scattered into its base ----

    def test_v1_note_base(self):
        # foo(f) on a whole fresh buffer: nothing to scatter.
        captured = _capture("note_base", "v1", reinplace_pass=False)
        self.assertExpectedInline(captured.functional[0], """\
def forward(self, arg0_1):
    full = torch.ops.aten.full.default([3, 3], 2.0, device = device(type='cpu'), pin_memory = False)
    autofunc_v1 = torch.ops.higher_order.autofunc_v1('autofunc_corpus::add_.default', x = full, y = arg0_1)
    getitem = autofunc_v1[0]
    return (getitem,)""")
        self.assertFalse([t for t in _targets(captured.modules[0]) if "scatter" in t])

    def test_v1_note_select(self):
        # foo(f[0]): v1 clones the row and select_scatters it back into f.
        captured = _capture("note_select", "v1", reinplace_pass=False)
        self.assertExpectedInline(captured.functional[0], """\
def forward(self, arg0_1):
    full = torch.ops.aten.full.default([3, 3], 2.0, device = device(type='cpu'), pin_memory = False)
    select = torch.ops.aten.select.int(full, 0, 0)
    select_1 = torch.ops.aten.select.int(arg0_1, 0, 0)
    autofunc_v1 = torch.ops.higher_order.autofunc_v1('autofunc_corpus::add_.default', x = select, y = select_1)
    getitem = autofunc_v1[0]
    select_scatter = torch.ops.aten.select_scatter.default(full, getitem, 0, 0)
    return (select_scatter,)""")
        gm = captured.modules[0]
        self.assertEqual(count_targets(gm, lambda t: t is torch.ops.aten.select_scatter.default), 1)

    def test_v1_note_column(self):
        # foo(y[:, 1]): the column is cloned and select_scattered back into y.
        captured = _capture("note_column", "v1", reinplace_pass=False)
        self.assertExpectedInline(captured.functional[0], """\
def forward(self, arg0_1):
    zeros = torch.ops.aten.zeros.default([3, 3], device = device(type='cpu'), pin_memory = False)
    select = torch.ops.aten.select.int(zeros, 1, 1)
    select_1 = torch.ops.aten.select.int(arg0_1, 0, 0)
    autofunc_v1 = torch.ops.higher_order.autofunc_v1('autofunc_corpus::add_.default', x = select, y = select_1)
    getitem = autofunc_v1[0]
    select_scatter = torch.ops.aten.select_scatter.default(zeros, getitem, 1, 1)
    return (select_scatter,)""")
        gm = captured.modules[0]
        self.assertEqual(count_targets(gm, lambda t: t is torch.ops.aten.select_scatter.default), 1)

    # -- v2: the base is passed, the view travels as a chain; no scatter ----------------------

    def test_v2_note_base(self):
        captured = _capture("note_base", "v2", reinplace_pass=False)
        self.assertExpectedInline(captured.functional[0], """\
def forward(self, arg0_1):
    full = torch.ops.aten.full.default([3, 3], 2.0, device = device(type='cpu'), pin_memory = False)
    autofunc_v2 = torch.ops.higher_order.autofunc_v2('autofunc_corpus::add_.default', _bases = [full], _views = (1, 0, 0), y = arg0_1)
    getitem = autofunc_v2[0]
    return (getitem,)""")
        self._assert_v2_has_no_scatter(captured.modules[0])

    def test_v2_note_select(self):
        captured = _capture("note_select", "v2", reinplace_pass=False)
        self.assertExpectedInline(captured.functional[0], """\
def forward(self, arg0_1):
    full = torch.ops.aten.full.default([3, 3], 2.0, device = device(type='cpu'), pin_memory = False)
    select_1 = torch.ops.aten.select.int(arg0_1, 0, 0)
    autofunc_v2 = torch.ops.higher_order.autofunc_v2('autofunc_corpus::add_.default', _bases = [full], _views = (1, 0, 1, 0, 0, 0), y = select_1)
    getitem = autofunc_v2[0]
    return (getitem,)""")
        self._assert_v2_has_no_scatter(captured.modules[0])

    def test_v2_note_column(self):
        captured = _capture("note_column", "v2", reinplace_pass=False)
        self.assertExpectedInline(captured.functional[0], """\
def forward(self, arg0_1):
    zeros = torch.ops.aten.zeros.default([3, 3], device = device(type='cpu'), pin_memory = False)
    select_1 = torch.ops.aten.select.int(arg0_1, 0, 0)
    autofunc_v2 = torch.ops.higher_order.autofunc_v2('autofunc_corpus::add_.default', _bases = [zeros], _views = (1, 0, 1, 0, 1, 1), y = select_1)
    getitem = autofunc_v2[0]
    return (getitem,)""")
        self._assert_v2_has_no_scatter(captured.modules[0])

    # -- v2 re-inplaced: the op writes the fresh buffer directly, no clone --------------------

    def test_v2_note_base_reinplaced(self):
        captured = _capture("note_base", "v2", reinplace_pass=True)
        self.assertExpectedInline(captured.reinplaced[0], """\
def forward(self, arg0_1):
    full = torch.ops.aten.full.default([3, 3], 2.0, device = device(type='cpu'), pin_memory = False)
    add__default = torch.ops.autofunc_corpus.add_.default(full, arg0_1)
    return (full,)""")
        self._assert_reinplaced_without_clones(captured)

    def test_v2_note_select_reinplaced(self):
        captured = _capture("note_select", "v2", reinplace_pass=True)
        self.assertExpectedInline(captured.reinplaced[0], """\
def forward(self, arg0_1):
    full = torch.ops.aten.full.default([3, 3], 2.0, device = device(type='cpu'), pin_memory = False)
    select_1 = torch.ops.aten.select.int(arg0_1, 0, 0)
    select_int = torch.ops.aten.select.int(full, 0, 0)
    add__default = torch.ops.autofunc_corpus.add_.default(select_int, select_1)
    return (full,)""")
        self._assert_reinplaced_without_clones(captured)

    def test_v2_note_column_reinplaced(self):
        captured = _capture("note_column", "v2", reinplace_pass=True)
        self.assertExpectedInline(captured.reinplaced[0], """\
def forward(self, arg0_1):
    zeros = torch.ops.aten.zeros.default([3, 3], device = device(type='cpu'), pin_memory = False)
    select_1 = torch.ops.aten.select.int(arg0_1, 0, 0)
    select_int = torch.ops.aten.select.int(zeros, 1, 1)
    add__default = torch.ops.autofunc_corpus.add_.default(select_int, select_1)
    return (zeros,)""")
        self._assert_reinplaced_without_clones(captured)

    def _assert_reinplaced_without_clones(self, captured) -> None:
        gm = captured.modules[0]
        self.assertEqual(count_targets(gm, _is_clone), 0)
        self.assertEqual(count_targets(gm, lambda t: t is torch.ops.autofunc_corpus.add_.default), 1)
        self.assertEqual(count_targets(gm, lambda t: t is autofunc.auto_functionalized_v2), 0)
        self._assert_v2_has_no_scatter(gm)
        (call,) = captured.report.calls
        self.assertEqual([d.reason for d in call.decisions], [autofunc.Reason.INPLACE])


if __name__ == "__main__":
    expecttest.run_tests()
