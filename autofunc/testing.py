"""Helpers for testing programs that use autofunc: capture the functional graphs a compile
produces, run the re-inplace pass on them, and print graphs in a stable, short form.

Used by autofunc's own tests and benchmarks; handy in user tests too.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable

import torch
import torch.fx as fx

from .passes.reinplace import reinplace
from .passes.report import Report

__all__ = ["CapturedGraphs", "compile_capture", "format_graph", "count_targets", "same_result"]


@dataclasses.dataclass
class CapturedGraphs:
    """The forward graphs of one compile: as functionalized, and after the pass (if run)."""

    functional: list[str] = dataclasses.field(default_factory=list)
    reinplaced: list[str] = dataclasses.field(default_factory=list)
    modules: list[fx.GraphModule] = dataclasses.field(default_factory=list)
    report: Report = dataclasses.field(default_factory=Report)


def compile_capture(
    fn: Callable,
    *,
    reinplace_pass: bool = True,
    dynamic: bool | None = False,
    fullgraph: bool = True,
    before_pass: Callable[[fx.GraphModule], None] | None = None,
) -> tuple[Callable, CapturedGraphs]:
    """``torch.compile(fn)`` through AOTAutograd with a recording compiler and no Inductor.

    Input mutations are kept in the graph (as Inductor does), so epilogue ``copy_`` nodes
    appear. With ``reinplace_pass`` the pass runs on each forward graph, and the rewritten graph
    is what executes: the pass is tested on real data without compiling C++. ``before_pass``
    may transform the graph first (e.g. to mimic what an Inductor pass would do to it).
    """
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    captured = CapturedGraphs()

    def recorder(is_inference: bool) -> Callable:
        def compile_graph(gm: fx.GraphModule, example_inputs: Any) -> Any:
            captured.functional.append(format_graph(gm))
            if before_pass is not None:
                before_pass(gm)
                gm.recompile()
            if reinplace_pass:
                captured.report.extend(reinplace(gm, is_inference=is_inference))
                captured.reinplaced.append(format_graph(gm))
            captured.modules.append(gm)
            return make_boxed_func(gm)

        return compile_graph

    backend = aot_autograd(
        fw_compiler=recorder(False),
        inference_compiler=recorder(True),
        keep_inference_input_mutations=True,
    )
    return torch.compile(fn, backend=backend, dynamic=dynamic, fullgraph=fullgraph), captured


_CLEANUP = re.compile(r";\s+(\w+\s+=\s+)+None\s*$")


def format_graph(gm: fx.GraphModule) -> str:
    """``gm.code`` without blank lines, ``x = None`` clean-ups, and trailing spaces."""
    lines = []
    for line in gm.code.splitlines():
        line = _CLEANUP.sub("", line).rstrip()
        if line.strip():
            lines.append(line)
    return "\n".join(lines)


def count_targets(gm: fx.GraphModule, pred: Callable[[Any], bool]) -> int:
    return sum(1 for n in gm.graph.nodes if n.op == "call_function" and pred(n.target))


def same_result(a: Any, b: Any, atol: float = 1e-5, rtol: float = 1e-5) -> bool:
    """Nested tensors / tuples / scalars equal up to tolerance (shape and dtype exact)."""
    if isinstance(a, torch.Tensor):
        return (
            isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and torch.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True)
        )
    if isinstance(a, (tuple, list)):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(same_result(x, y, atol, rtol) for x, y in zip(a, b))
        )
    return a == b
