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
from .passes import reinplace as _pass
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
# (``autofunc.backends.inductor.glue``) and the HOPs' Dynamo allowance are set up by the first
# registration (through these hooks), the first functionalized call, ``explain`` with
# Inductor, or the first use of ``autofunc.inductor`` or ``autofunc.reinplace_triton_kernels``
# (``__getattr__``). A graph holding autofunc's HOPs exists only after one of those.
def _install_inductor_pass() -> None:
    from .backends.inductor.glue import install_pass

    install_pass()


def _uninstall_inductor_pass() -> None:
    import sys

    # never installed if never imported
    glue = sys.modules.get(__name__ + ".backends.inductor.glue")
    if glue is not None:
        glue.uninstall_pass()


def reinplace(
    gm,
    *,
    enable: bool = True,
    is_inference: bool | None = None,
    policy=None,
    for_inductor: bool | None = None,
) -> Report:
    """The re-inplace pass on ``gm`` (:func:`autofunc.passes.reinplace.reinplace`, whose
    docstring says what it does).

    ``for_inductor`` is deprecated (one release), use ``policy``: ``True`` is Inductor's policy
    (``autofunc.backends.inductor.policy.INDUCTOR``), ``False`` the generic one.

    Raises:
        TypeError: both ``policy`` and ``for_inductor`` given.
    """
    if for_inductor is not None:
        policy = _deprecated_policy(policy, for_inductor)
    return _pass.reinplace(gm, enable=enable, is_inference=is_inference, policy=policy)


def _deprecated_policy(policy, for_inductor: bool):
    """The policy the deprecated ``for_inductor`` stands for."""
    import warnings

    if policy is not None:
        raise TypeError(
            "autofunc.reinplace takes policy= or the deprecated for_inductor=, not both; "
            "drop for_inductor"
        )
    warnings.warn(
        "autofunc.reinplace(for_inductor=...) is deprecated and will be removed in the next "
        "release: pass policy=autofunc.backends.inductor.policy.INDUCTOR for True, or nothing "
        "(autofunc.passes.policy.GENERIC) for False",
        DeprecationWarning,
        stacklevel=3,
    )
    if not for_inductor:
        return None
    from .backends.inductor.policy import INDUCTOR

    return INDUCTOR


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
