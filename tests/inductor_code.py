"""Reading Inductor's generated wrapper code in tests: the views it makes of its own buffers.

The suite checks every wrapper Inductor generates while a test runs (``conftest.py``): a view
past the buffer it views would let a kernel or an op read and write memory that is not the
tensor's, and the process die later, in another test (fuzz seed 20261806 #261).
"""

from __future__ import annotations

import re

# ``buf3 = empty_strided_cpu((4, 6), (6, 1), torch.float64)``, ``buf5 = buf3; del buf3  # reuse``
# and ``reinterpret_tensor(buf3, (2, 6), (12, 1), 12)`` in the wrapper
_BUFFER = re.compile(r"(buf\d+) = empty_strided_cpu\(\(([^)]*)\), \(([^)]*)\)")
_REUSED = re.compile(r"(buf\d+) = (buf\d+); del buf\d+  # reuse")
_VIEW = re.compile(r"reinterpret_tensor\((buf\d+), \(([^)]*)\), \(([^)]*)\), ([^),]+)\)")


def _span(size: str, stride: str, offset: str = "0") -> int | None:
    """The elements from a buffer's start that a geometry (wrapper text) reaches; ``None``
    where an entry is symbolic (``s77``)."""
    try:
        sizes = [int(n) for n in size.split(",") if n.strip()]
        strides = [int(s) for s in stride.split(",") if s.strip()]
        start = int(offset)
    except ValueError:
        return None
    if 0 in sizes:
        return 0
    return start + sum((n - 1) * s for n, s in zip(sizes, strides)) + 1


def views_past_their_buffers(code: str) -> list[str]:
    """The ``reinterpret_tensor`` views of Inductor's wrapper ``code`` that reach past the
    buffer the wrapper allocated for them."""
    allocated, past = {}, []
    for line in code.splitlines():
        for m in _BUFFER.finditer(line):
            allocated[m.group(1)] = _span(m.group(2), m.group(3))
        for m in _REUSED.finditer(line):
            allocated[m.group(1)] = allocated.get(m.group(2))
        for m in _VIEW.finditer(line):
            have = allocated.get(m.group(1))
            need = _span(m.group(2), m.group(3), m.group(4))
            if have is not None and need is not None and need > have:
                past.append(f"{m.group(0)} of {have} elements")
    return past


class WrapperViews:
    """Records, while installed, every view past its buffer in the wrapper code Inductor
    generates (``GraphLowering.codegen``), with the first lines of that code."""

    def __init__(self) -> None:
        self.found: list[str] = []
        self._undo = None

    def install(self) -> None:
        from torch._inductor.graph import GraphLowering

        codegen = GraphLowering.codegen
        found = self.found

        def checked(graph, *args, **kwargs):
            out = codegen(graph, *args, **kwargs)
            past = views_past_their_buffers(out[0].value)
            if past:
                found.extend(past)
            return out

        GraphLowering.codegen = checked
        self._undo = lambda: setattr(GraphLowering, "codegen", codegen)

    def remove(self) -> None:
        if self._undo is not None:
            self._undo()
            self._undo = None
