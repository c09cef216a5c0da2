"""autofunc: compile mutable custom ops without the hidden clones.

Public API:

* :func:`register` / :func:`functionalize` / :func:`override` (temporarily): route an op's
  functionalization to autofunc's v1 or v2 HOP (:data:`auto_functionalized_v1`,
  :data:`auto_functionalized_v2`).
* :func:`reinplace`: the re-inplace pass on any FX graph; returns a :class:`Report`.
* :func:`explain`: compile a function and report where every mutable buffer went.
* :func:`reinplace_triton_kernels`: let the pass handle user Triton kernels too
  (``torch.library.wrap_triton`` / ``triton_op``); off by default.
* :func:`reinplace_nested_regions`: whether the pass handles ``nested_compile_region`` calls
  that write their inputs; on by default.
* :func:`reinplace_pytorch_nodes`: let the pass decide PyTorch's own ``auto_functionalized``
  and ``auto_functionalized_v2`` nodes around ops autofunc does not own; off by default.
"""

from .errors import (
    AutofuncError,
    GraphError,
    MalformedViewsError,
    UnsupportedCallError,
    UnsupportedOpError,
)
from . import registry as _registry
from .hops.common import allow_hops_in_dynamo as _allow_hops_in_dynamo
from .explain import explain
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
    "reinplace_nested_regions",
    "reinplace_pytorch_nodes",
    "Report",
    "CallReport",
    "Decision",
    "Reason",
]

__version__ = "0.1.0"


# Note [Inductor imported when first needed]
# ``torch._inductor.config`` and ``torch.compiler.allow_in_graph`` import Dynamo, about a second
# on a CPU machine, which ``import autofunc`` should not pay: the Inductor glue
# (``autofunc.inductor``) and the HOPs' Dynamo allowance are set up by the first registration
# (through these hooks), the first functionalized call, ``explain`` with Inductor, or the first
# use of ``autofunc.inductor`` or ``autofunc.reinplace_triton_kernels`` (``__getattr__``). A graph holding autofunc's HOPs exists only after one of those.
def _install_inductor_pass() -> None:
    from .inductor import install_pass

    install_pass()


def _uninstall_inductor_pass() -> None:
    import sys

    glue = sys.modules.get(__name__ + ".inductor")  # never installed if never imported
    if glue is not None:
        glue.uninstall_pass()


_registry.add_backend_hook(_allow_hops_in_dynamo)
_registry.add_backend_hook(_install_inductor_pass)
_registry.add_release_hook(_uninstall_inductor_pass)


def __getattr__(name: str):  # Note [Inductor imported when first needed]
    import importlib

    if name == "inductor":
        return importlib.import_module(".inductor", __name__)
    if name in ("reinplace_triton_kernels", "reinplace_nested_regions", "reinplace_pytorch_nodes"):
        return getattr(importlib.import_module(".registry.switches", __name__), name)
    raise AttributeError(f"module 'autofunc' has no attribute {name!r}")
