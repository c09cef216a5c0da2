"""autofunc: compile mutable custom ops without the hidden clones.

Public API:

* :func:`register` / :func:`functionalize` / :func:`override` (temporarily): route an op's
  functionalization to autofunc's v1 or v2 HOP (:data:`auto_functionalized_v1`,
  :data:`auto_functionalized_v2`).
* :func:`reinplace`: the re-inplace pass on any FX graph; returns a :class:`Report`.
* :func:`explain`: compile a function and report where every mutable buffer went.
* :func:`reinplace_triton_kernels`: let the pass handle user Triton kernels too
  (``torch.library.wrap_triton`` / ``triton_op``); off by default.
"""

from .errors import (
    AutofuncError,
    GraphError,
    MalformedViewsError,
    UnsupportedCallError,
    UnsupportedOpError,
)
from . import inductor as _inductor  # noqa: F401 - hooks the Inductor pass into the registry
from .explain import explain
from .inductor import reinplace_triton_kernels
from .hops.v1 import auto_functionalized_v1
from .hops.v2 import auto_functionalized_v2
from .passes.reinplace import reinplace
from .passes.report import CallReport, Decision, Reason, Report
from .registry import Registration, functionalize, override, register

__all__ = [
    "AutofuncError",
    "GraphError",
    "MalformedViewsError",
    "UnsupportedCallError",
    "UnsupportedOpError",
    "auto_functionalized_v1",
    "auto_functionalized_v2",
    "register",
    "functionalize",
    "override",
    "Registration",
    "reinplace",
    "explain",
    "reinplace_triton_kernels",
    "Report",
    "CallReport",
    "Decision",
    "Reason",
]

__version__ = "0.1.0"
