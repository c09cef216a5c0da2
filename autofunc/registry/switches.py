"""What autofunc's pass is switched on for besides the registered ops, and the key a compiled
graph's cache entry must carry for it. Backend-neutral: a backend's glue (``backends/inductor/glue.py``)
reads these, none is defined there.

- ``reinplace_triton_kernels``, ``reinplace_nested_regions``, ``reinplace_pytorch_nodes``: the
  opt-in adapters (``hops/triton.py``, ``hops/subgraph.py``, ``hops/pytorch_nodes.py``),
  process-wide. Switching one on runs the backend hooks (Note [Backend hooks]: Inductor installs
  its pass); switching one off with no op registered runs the release hooks, each of which
  decides for itself whether another switch still needs its backend.
- ``state.reinplace``: whether the pass writes in place at all (``False`` clones every buffer).
- :func:`pass_key`: what a compiled graph depends on besides its input graph: autofunc's code
  (``source_digest``), the re-inplace switch, the adapters switched on (``adapter_kinds``),
  and the registrations (``state_token``). A backend's cache key includes it.
"""

from __future__ import annotations

import dataclasses
import hashlib

from ..hops import pytorch_nodes as _pytorch_nodes
from ..hops import subgraph as _subgraph
from ..hops import triton as _triton
from ..hops.adapter import adapter_kinds
from ..source_key import source_digest
from .api import release_if_unused
from .routing import run_backend_hooks, state_token

__all__ = [
    "Switches",
    "pass_key",
    "reinplace_nested_regions",
    "reinplace_pytorch_nodes",
    "reinplace_triton_kernels",
    "state",
]


@dataclasses.dataclass
class Switches:
    """The switches that are no adapter: ``reinplace`` (default True) set to False decomposes
    the HOPs without re-inplacing (every buffer is cloned); part of :func:`pass_key`."""

    reinplace: bool = True


state = Switches()


def pass_key() -> tuple[str, tuple]:
    """The digest of what decides a compiled graph besides its input graph (the module
    docstring), and the registrations' token (Note [The cache key covers the graph's code])."""
    own = hashlib.sha256(
        f"{source_digest()};reinplace={state.reinplace};adapters={adapter_kinds()}".encode()
    )
    return own.hexdigest(), state_token()


def _switched(enabled: bool) -> None:
    if enabled:
        run_backend_hooks()
    else:
        release_if_unused()  # only where no op is registered


def reinplace_triton_kernels(enabled: bool = True) -> None:
    """Let autofunc's pass decide the clones of user Triton kernels too (``enabled``), or
    leave them to Inductor's own re-inplacing again (the default).

    A kernel launched from compiled code (``torch.library.wrap_triton(kernel)[grid](...)`` or a
    ``torch.library.triton_op``) then writes straight into the tensors it is given wherever
    that is sound, and where it is not, only the written tensor is copied. Process-wide, like
    ``register``; installs the Inductor pass. See ``autofunc/hops/triton.py``.
    """
    _triton.enable(enabled)
    _switched(enabled)


def reinplace_nested_regions(enabled: bool = True) -> None:
    """Let autofunc's pass decide the clones of ``nested_compile_region`` calls that write
    their inputs (``enabled``, the default), or leave them to PyTorch's re-inplacing.

    Such a region reaches the graph as PyTorch's ``auto_functionalized_v2`` around
    ``invoke_subgraph``, whatever op inside it writes; while the pass is installed (an op is
    registered, or ``reinplace_triton_kernels()`` is on) autofunc's rules decide its clones and
    the pass declares the region's writes to Inductor, which does not see them otherwise (Note
    [Writes Inductor cannot see]). Process-wide. See ``autofunc/hops/subgraph.py``.
    """
    _subgraph.enable(enabled)


def reinplace_pytorch_nodes(enabled: bool = True) -> None:
    """Let autofunc's pass decide PyTorch's own ``auto_functionalized`` (v1) and
    ``auto_functionalized_v2`` nodes around a mutable op (``enabled``), or leave them to
    Inductor's re-inplacing again (the default).

    For a stack that keeps PyTorch's functionalization (vLLM's fusion passes match its v1
    nodes): every mutable custom op gets autofunc's rules without being registered, and the
    report lists these calls (strategy ``pytorch_v1``/``pytorch_v2``). Ops registered with
    ``register`` are autofunc's HOPs as before. Process-wide; installs the Inductor pass. See
    ``autofunc/hops/pytorch_nodes.py``.
    """
    _pytorch_nodes.enable(enabled)
    _switched(enabled)
