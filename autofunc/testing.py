"""Helpers for testing programs that use autofunc: capture the functional graphs a compile
produces, run the re-inplace pass on them, print graphs in a stable, short form, and check a
compiled function against eager (``run_against_eager``: outputs and final inputs).

Used by autofunc's own tests and benchmarks; handy in user tests too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from collections.abc import Iterator
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree
import torch.fx as fx

from .passes.copies import COPY_TARGETS, copy_nbytes
from .passes.reinplace import reinplace
from .passes.report import Report

__all__ = [
    "COPY_TARGETS",
    "CapturedGraphs",
    "EagerCheck",
    "clone_inputs",
    "compile_capture",
    "copy_nodes",
    "count_targets",
    "format_graph",
    "output_aliasing",
    "post_grad_copies",
    "run_against_eager",
    "same_result",
]


@dataclasses.dataclass
class CapturedGraphs:
    """The forward graphs of one compile: as functionalized, and after the pass (if run)."""

    functional: list[str] = dataclasses.field(default_factory=list)
    reinplaced: list[str] = dataclasses.field(default_factory=list)
    modules: list[fx.GraphModule] = dataclasses.field(default_factory=list)
    report: Report = dataclasses.field(default_factory=Report)  # of every graph, together
    # each graph the pass ran on, with its own report, in order
    reports: list[tuple[fx.GraphModule, Report]] = dataclasses.field(default_factory=list)


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

    from .compiler_imports import import_compiler

    import_compiler()  # Note [Importing the compiler beside a first compile]
    from torch._dynamo.backends.common import aot_autograd

    captured = CapturedGraphs()

    def recorder(is_inference: bool) -> Callable:
        def compile_graph(gm: fx.GraphModule, example_inputs: Any) -> Any:
            captured.functional.append(format_graph(gm))
            if before_pass is not None:
                before_pass(gm)
                gm.recompile()
            if reinplace_pass:
                report = reinplace(gm, is_inference=is_inference)
                captured.reports.append((gm, report))
                captured.report.extend(report)
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


def copy_nodes(gm: fx.GraphModule) -> list[tuple[str, int]]:
    """``(node name, bytes)`` of every copy node in ``gm`` (:data:`COPY_TARGETS`: clones,
    copies into a buffer, view scatters), counted from the graph itself, independently of any
    report: a copy's bytes are those of the tensor it writes (its output; for ``copy_`` its
    destination), by size hint where symbolic."""
    return [
        (n.name, copy_nbytes(n))
        for n in gm.graph.nodes
        if n.op == "call_function" and n.target in COPY_TARGETS
    ]


@contextlib.contextmanager
def post_grad_copies() -> Iterator[list[list[tuple[str, int]]]]:
    """Inside the block, every graph Inductor compiles adds the :func:`copy_nodes` of its
    post-grad graph (after every post-grad pass, as Inductor lowers it) to the yielded list."""
    from torch._inductor import compile_fx

    graphs: list[list[tuple[str, int]]] = []
    original = compile_fx._recursive_post_grad_passes

    def counting(gm: fx.GraphModule, is_inference: bool = False) -> None:
        original(gm, is_inference)
        graphs.append(copy_nodes(gm))

    compile_fx._recursive_post_grad_passes = counting
    try:
        yield graphs
    finally:
        compile_fx._recursive_post_grad_passes = original


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


def clone_inputs(inputs: Any) -> list:
    """Copies of ``inputs`` for a reference run. A tensor gets a new storage with its exact
    layout (size, stride, storage offset), and tensors that share a storage share the copy, so
    the aliasing between inputs is kept; any other value is passed as it is."""
    copies: dict[tuple, torch.UntypedStorage] = {}
    out = []
    for t in inputs:
        if not isinstance(t, torch.Tensor):
            out.append(t)
            continue
        storage = t.untyped_storage()
        key = (storage.data_ptr(), storage.nbytes(), t.device)
        if key not in copies:
            copies[key] = storage.clone()
        with torch.no_grad():
            copy = torch.empty(0, dtype=t.dtype, device=t.device)
            copy.set_(copies[key], t.storage_offset(), t.shape, t.stride())
        out.append(copy.requires_grad_(t.requires_grad))
    return out


@dataclasses.dataclass
class EagerCheck:
    """One call of a function in eager and of its compiled form, on equal inputs."""

    expected: Any  # eager's outputs
    got: Any  # the compiled function's outputs
    eager_inputs: list  # eager's inputs after the call
    inputs: list  # the compiled function's inputs after the call
    mismatch: list[str]  # what differs: "output", "arg0", "arg1", ...
    seconds: float  # the compiled call (the first one compiles)

    @property
    def correct(self) -> bool:
        return not self.mismatch


def run_against_eager(
    fn: Callable,
    compiled: Callable,
    inputs: Any,
    *,
    atol: float = 1e-5,
    rtol: float = 1e-5,
    sync: Callable[[], None] | None = None,
) -> EagerCheck:
    """Run ``fn`` on copies of ``inputs`` (``clone_inputs``) and ``compiled`` on ``inputs``
    themselves, then compare the outputs, the final value of every input, and which inputs
    each output shares memory with (``"output aliasing"``).

    ``sync`` (a device synchronization) runs before the compiled call's time is read.
    """
    inputs = list(inputs)
    eager_inputs = clone_inputs(inputs)
    expected = fn(*eager_inputs)
    t0 = time.perf_counter()
    got = compiled(*inputs)
    if sync is not None:
        sync()
    seconds = time.perf_counter() - t0
    pairs = [("output", got, expected)]
    pairs += [(f"arg{i}", a, e) for i, (a, e) in enumerate(zip(inputs, eager_inputs))]
    mismatch = [name for name, a, e in pairs if not same_result(a, e, atol, rtol)]
    aliasing = output_aliasing(got, inputs) != output_aliasing(expected, eager_inputs)
    if "output" not in mismatch and aliasing:
        mismatch.append("output aliasing")  # a view of an input where eager returns a copy
    return EagerCheck(expected, got, eager_inputs, inputs, mismatch, seconds)


def output_aliasing(outputs: Any, inputs: Any) -> list[tuple[int, ...]]:
    """Per output tensor, the inputs whose memory it shares (an output that views an input in
    eager must view it compiled, and a fresh one must be fresh: the caller may write either).
    Empty and nested tensors share nothing."""
    storages = [
        t.untyped_storage().data_ptr()
        if isinstance(t, torch.Tensor) and t.numel() and not t.is_nested
        else None
        for t in pytree.tree_leaves(inputs)
    ]
    return [
        tuple(i for i, p in enumerate(storages) if p == o.untyped_storage().data_ptr())
        for o in pytree.tree_leaves(outputs)
        if isinstance(o, torch.Tensor) and o.numel() and not o.is_nested
    ]
