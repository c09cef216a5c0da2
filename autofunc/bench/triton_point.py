"""A point of ``autofunc bench`` whose program launches user Triton kernels (no custom op).

``TritonSwitch`` turns ``autofunc.reinplace_triton_kernels()`` on for autofunc's
configurations. On CPU such a program cannot be compiled to code (Inductor generates Triton
code for a GPU only), so ``measure_graph`` measures it on Inductor's post-grad graph
(``user_triton``): its allocations are the memory above eager, and the graph, run with the
kernels interpreted, is checked against eager.
"""

from __future__ import annotations

import time
from typing import Any

from .cases import Program
from .configs import Config

__all__ = ["TritonSwitch", "measure_graph"]


class TritonSwitch:
    """``autofunc.reinplace_triton_kernels(on)`` until ``remove()`` (or the end of a ``with``
    block), which puts the switch back as it was."""

    def __init__(self, on: bool = True) -> None:
        from ..hops import triton as adapter
        from ..registry.switches import reinplace_triton_kernels

        self._was = adapter.enabled()
        reinplace_triton_kernels(on)

    def remove(self) -> None:
        from ..registry.switches import reinplace_triton_kernels

        reinplace_triton_kernels(self._was)

    def __enter__(self) -> TritonSwitch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def measure_graph(program: Program, config: Config, record: Any) -> None:
    """A program launching user Triton kernels, on CPU: Inductor cannot generate its code
    without a GPU, so the compiled step is Inductor's post-grad graph (``user_triton``: a stub
    sm90 target, the kernels run by Triton's interpreter). Its memory above eager is what that
    graph allocates (eager writes the cache in place: 0 B); its result is that graph run on
    fresh inputs, checked against eager. No times: nothing compiled runs."""
    from ..inductor import last_reports
    from ..testing import same_result
    from . import user_triton  # imports triton: only for such a point

    eager_args = program.make_args()
    expected = (program.eager_fn or program.fn)(*eager_args)
    record.eager_allocated = record.eager_peak = 0
    if not config.compiled:
        record.correct, record.clones, record.allocated, record.peak = True, 0, 0, 0
        record.mem_above_eager, record.compile_s = 0, 0.0
        return
    args = program.make_args()
    last_reports(clear=True)
    t0 = time.perf_counter()
    with user_triton.gpu_target():
        gm = user_triton.post_grad_graph(program.fn, list(args))
    record.compile_s = time.perf_counter() - t0
    user_triton.interpret_kernels()
    got = gm(*args)
    got = got[0] if isinstance(got, (tuple, list)) and len(got) == 1 else got
    record.mismatch = [
        name
        for name, ok in [
            ("output", same_result(expected, got)),
            *((f"arg{i}", same_result(e, a)) for i, (e, a) in enumerate(zip(eager_args, args))),
        ]
        if not ok
    ]
    record.correct = not record.mismatch
    reports = last_reports(clear=True)
    record.clones = sum(r.num_clones for r in reports) if config.strategy else None
    if config.strategy:
        record.bytes_cloned = sum(r.bytes_cloned for r in reports)
    record.allocated = record.peak = record.mem_above_eager = user_triton.allocated_bytes(gm)
