"""Checks that a report counts every copy of the graph it was made on (Note [Every copy in the
report] in autofunc/passes/copies.py), against a count made from the graphs alone.

:func:`program_copies` reads the graph *before* the pass: the copy nodes no autofunc call's
value flows into (walking each copy's source back through views, getitems and scatter
sources). :func:`check_report_copies` then compares, after the pass, the report's copies with
:func:`autofunc.testing.copy_nodes` of the final graphs: the same nodes and bytes, and the
copies for mutations exactly the copy nodes that are not the program's own. Used by the
conformance harness and the corpus tests.
"""

from __future__ import annotations

import operator

import torch
from torch import fx

from autofunc.hops.adapter import accepted, mutation_targets
from autofunc.passes.memory_ops import SCATTER_VIEWS, VIEW_OPS
from autofunc.testing import COPY_TARGETS, CapturedGraphs, copy_nodes

__all__ = ["check_report_copies", "program_copies"]

_aten = torch.ops.aten
_OWN = (_aten.clone.default, _aten.copy.default)


def program_copies(gm: fx.GraphModule) -> set[str]:
    """The names of the copy nodes of ``gm`` (a graph before the pass) that copy no value a
    call the pass decides produced: the program's own (or a node's the pass leaves to PyTorch). Functionalization makes no clone, and no
    functional ``copy``, of a call's value (``x.copy_(y)`` in the program becomes ``copy``),
    so those are the program's whatever they copy; a scatter or ``copy_`` is the program's
    unless its source is a call's value."""
    hops = {n for t in mutation_targets() for n in gm.graph.find_nodes(op="call_function", target=t)}
    hops = {n for n in hops if accepted(n)}  # the calls the pass decides (not those it leaves)
    own = set()
    for n in gm.graph.nodes:
        if n.op != "call_function" or n.target not in COPY_TARGETS:
            continue
        if n.target in _OWN or not _from_call(n.args[1], hops):
            own.add(n.name)
    return own


def _from_call(src: object, hops: set) -> bool:
    while isinstance(src, fx.Node) and src.op == "call_function":
        if src in hops:
            return True
        if src.target in VIEW_OPS or src.target is operator.getitem:
            src = src.args[0]
        elif src.target in SCATTER_VIEWS:
            src = src.args[1]
        else:
            return False
    return False


def check_report_copies(captured: CapturedGraphs, own: list[set[str]]) -> None:
    """Raise ``AssertionError`` unless each report of ``captured`` (``compile_capture`` with the
    pass) lists every copy node of its final graph with its bytes, and counts for mutations
    exactly those not in that graph's ``own`` (:func:`program_copies` of the graph before the
    pass, one set per graph the pass ran on, in order)."""
    assert len(captured.reports) == len(own)
    for (gm, report), program in zip(captured.reports, own):
        graph = sorted(copy_nodes(gm))
        listed = sorted((c.node, c.nbytes) for c in report.copies)
        assert listed == graph, f"report copies {listed} != graph copy nodes {graph}"
        expected = sorted(name for name, _ in graph if name not in program)
        counted = sorted(c.node for c in report.mutation_copies)
        assert counted == expected, (
            f"copies for mutations: report {counted}, graph {expected} "
            f"(the program's own: {sorted(program)})"
        )
        assert report.bytes_copied == sum(b for name, b in graph if name not in program)
