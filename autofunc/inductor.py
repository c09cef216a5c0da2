"""Inductor glue: run the re-inplace pass as a post-grad pass, chained with the user's own.

``install_pass()`` is idempotent and keeps whatever ``post_grad_custom_post_pass`` the user set:
autofunc's pass runs first (it must see the HOPs before anything else), then theirs. Depends on
the registry (it hooks ``install_pass`` into it, Note [Backend hooks]); the registry does not
import this module. Reports are kept only for the ``collect_reports()`` blocks open while a
graph compiles, so a long-running server does not accumulate them.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import logging
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from .compiler_imports import import_compiler

import_compiler()  # before any of Inductor: Note [Importing the compiler beside a first compile]

import torch._inductor.config as inductor_config
from torch._inductor.custom_graph_pass import CustomGraphModulePass, CustomGraphPass

try:  # torch >= 2.10: the pass is told whether the graph is an inference graph
    from torch._inductor.custom_graph_pass import CustomInferenceAwareGraphPass as _Base
except ImportError:  # pragma: no cover
    _Base = CustomGraphPass

from . import registry
from .guards import guard_current_compile
from .hops import pytorch_nodes as _pytorch_nodes
from .hops import subgraph as _subgraph
from .hops import triton as _triton
from .hops.adapter import accepted, adapter_kinds
from .passes.inductor_repairs import INDUCTOR
from .passes.reinplace import reinplace

__all__ = [
    "ReinplacePass",
    "collect_reports",
    "install_pass",
    "last_reports",
    "reinplace_nested_regions",
    "reinplace_pytorch_nodes",
    "reinplace_triton_kernels",
    "run_pass",
    "uninstall_pass",
]

log = logging.getLogger("autofunc.inductor")


class _PassState:
    """The Inductor glue's state: the re-inplace switch and where each graph's report goes.

    ``reinplace`` (default True): set it to False to decompose the HOPs without re-inplacing
    (every buffer is cloned); it is part of the pass's cache key. Each report of a graph with
    autofunc calls goes to every open ``collect_reports()`` block (``blocks``, guarded by
    ``lock``: graphs compile in several threads) and to ``recent``, the last 64 for
    ``last_reports`` (bounded, so a long-running server does not accumulate them).
    """

    def __init__(self) -> None:
        self.reinplace = True
        self.blocks: list[list] = []
        self.lock = threading.Lock()
        self.recent: collections.deque = collections.deque(maxlen=64)

    def deliver(self, report: Any) -> None:
        self.recent.append(report)
        with self.lock:
            for reports in self.blocks:
                reports.append(report)


_state = _PassState()


@contextlib.contextmanager
def collect_reports() -> Iterator[list]:
    """Collect the re-inplace report of every graph Inductor compiles inside the block::

        with collect_reports() as reports:
            torch.compile(fn)(*args)
        print(reports[0])

    A graph served from Inductor's FX graph cache or AOTAutograd's cache runs no post-grad
    pass and so has no report here (``explain`` turns both caches off).
    """
    reports: list = []
    with _state.lock:
        _state.blocks.append(reports)
    try:
        yield reports
    finally:
        with _state.lock:
            _state.blocks.remove(reports)


def last_reports(clear: bool = False) -> list:
    """The reports of the most recently compiled graphs (at most 64), oldest first."""
    out = list(_state.recent)
    if clear:
        _state.recent.clear()
    return out


class ReinplacePass(_Base):
    """autofunc's post-grad pass, optionally followed by the pass the user had installed."""

    def __init__(self, then: Any = None):
        self.then = then

    def __call__(self, graph: torch.fx.Graph, is_inference: bool | None = None) -> None:
        # A pass that runs autofunc's itself, later (vLLM's manager with the plugin on: Note
        # [autofunc in vLLM's pass manager]), keeps the graph functional until then.
        if not any(getattr(p, "runs_autofunc_pass", False) for p in _passes(self.then)):
            run_pass(graph.owning_module, is_inference)
        for then in _passes(self.then):  # one pass, or a list of them as Inductor allows
            if isinstance(then, _Base) and _Base is not CustomGraphPass:
                then(graph, is_inference=bool(is_inference))
            else:
                then(graph)

    def uuid(self) -> Any:
        # Inductor's FX graph cache and AOTAutograd's cache key on this. It must change whenever
        # the code that decides the graph does (Note [The cache key covers the graph's code]),
        # and whenever the registrations do: they decide what functionalization emits for the
        # same Dynamo graph (v1, v2 or PyTorch's own HOP). On a cache hit functionalization does
        # not run again; this does (Note [Guarding on the registrations] in guards.py).
        guard_current_compile(registry.state_token)
        own = hashlib.sha256(
            f"{_source_digest()};reinplace={inductor_config_enabled()};"
            f"adapters={adapter_kinds()}".encode()
        )
        then = tuple(p.uuid() if hasattr(p, "uuid") else repr(p) for p in _passes(self.then))
        return (own.hexdigest(), registry.state_token(), then)


def _passes(value: Any) -> tuple:
    """A ``post_grad_custom_post_pass`` value (None, one pass or a list) as a tuple."""
    if value is None:
        return ()
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


def run_pass(gm: torch.fx.GraphModule, is_inference: bool | None, note: str = "") -> None:
    """Run the re-inplace pass on ``gm`` as Inductor's post-grad pass does and deliver its
    report (``note``: where it ran, when not in the post-pass slot)."""
    report = reinplace(
        gm, enable=inductor_config_enabled(), is_inference=is_inference, policy=INDUCTOR
    )
    if report.calls:
        report.note = note
        _state.deliver(report)
        _publish(report)


class DeviceBackstop(CustomGraphModulePass):
    """autofunc's pass in Inductor's per-device pass slot, for graphs whose
    ``post_grad_custom_post_pass`` did not run it; optionally followed by the device pass that
    was there before.

    Note [The pass is never missing]
    ``post_grad_custom_post_pass`` is one config entry, and whoever sets it for a compile replaces
    autofunc's pass there: ``torch.compile(options=...)`` and ``compile_fx(config_patches=...)``
    set it around the whole compile *and again* around the inner compile (so the pass the
    functionalization rule installs meanwhile is undone), and vLLM hands its pass manager in
    that way. A graph holding autofunc's HOPs then reached lowering, which failed ("autofunc_v2
    is not an OpOverload"). Inductor runs one more graph pass per device after the custom post
    passes and before its own re-inplacing and the decomposition of PyTorch's functional nodes,
    which config patches do not touch: ``custom_backend_passes`` (keyed on a device the graph
    uses; its ``uuid`` is part of the FX graph cache key). autofunc puts this class there for
    every device Inductor knows. Where the post pass ran, no functional mutation node is left
    and it does nothing; where one is left, it runs the whole pass there, so the HOPs are
    decided by autofunc's rules, the same as in the post-pass slot (the custom post pass saw
    them undecided), logs a warning naming the pass that replaced autofunc's (once per kind),
    and the report says where it ran. Installed with the pass, from the first compile that
    has loaded Inductor's code generation (its registration imports every backend's).
    """

    def __init__(self, then: Any = None):
        self.then = then

    def __call__(self, gm: torch.fx.GraphModule) -> None:
        if any(accepted(n) for n in gm.graph.nodes):
            reason = _why_missing()
            if reason not in _warned:
                _warned.add(reason)
                log.warning(
                    "autofunc: the re-inplace pass did not run as Inductor's post-grad custom "
                    "pass (%s); it ran as the device pass, after that pass, and decided every "
                    "call (Note [The pass is never missing] in autofunc/inductor.py)",
                    reason,
                )
            run_pass(gm, None, note=f"ran as Inductor's device pass: {reason}")
        if self.then is not None:
            self.then(gm)

    def uuid(self) -> Any:
        then = self.then.uuid() if hasattr(self.then, "uuid") else repr(self.then)
        return ("autofunc-device-backstop", ReinplacePass().uuid(), then)


_warned: set[str] = set()


def _why_missing() -> str:
    current = inductor_config.post_grad_custom_post_pass
    if current is None:
        return "post_grad_custom_post_pass is None in this compile"
    if any(isinstance(p, ReinplacePass) for p in _passes(current)):
        return "post_grad_custom_post_pass holds autofunc's pass, but it left nodes undecided"
    names = ", ".join(type(p).__qualname__ for p in _passes(current))
    return (
        f"post_grad_custom_post_pass is {names} in this compile, set by config_patches, "
        f"torch.compile(options=...) or inductor_config.patch after autofunc installed its pass"
    )


def _install_backstops() -> None:
    """Put :class:`DeviceBackstop` in every device's pass slot that lacks it (idempotent; only
    once Inductor's code generation is loaded, Note [The pass is never missing])."""
    common = sys.modules.get("torch._inductor.codegen.common")
    table = getattr(common, "custom_backend_passes", None)
    if common is None or table is None:
        return
    common.init_backend_registration()  # registers the devices (cached): it would overwrite ours
    for device, current in list(table.items()):
        if not isinstance(current, DeviceBackstop):
            table[device] = DeviceBackstop(then=current)


def _uninstall_backstops() -> None:
    common = sys.modules.get("torch._inductor.codegen.common")
    table = getattr(common, "custom_backend_passes", None) or {}
    for device, current in list(table.items()):
        if isinstance(current, DeviceBackstop):
            table[device] = current.then


def _publish(report: Any) -> None:
    """Note [Diagnostics the PyTorch way]
    Each compiled graph's report goes where PyTorch's own compile diagnostics go: the log
    ``autofunc`` (``TORCH_LOGS=autofunc`` prints the report, ``+autofunc`` each decision as it
    is made), the structured trace (``TORCH_TRACE=dir``; ``tlparse`` lists it as the artifact
    ``autofunc_reinplace_report``), and ``torch._dynamo.utils.counters["autofunc"]`` (calls,
    buffers in place and cloned, bytes cloned and saved), beside Inductor's counters."""
    from torch._dynamo.utils import counters
    from torch._logging import trace_structured

    log.info("%s", report)
    trace_structured(
        "artifact",
        metadata_fn=lambda: {"name": "autofunc_reinplace_report", "encoding": "string"},
        payload_fn=lambda: str(report),
    )
    c = counters["autofunc"]
    c["calls"] += len(report.calls)
    c["inplace"] += sum(1 for d in report.decisions if d)
    c["cloned"] += report.num_clones
    c["bytes_cloned"] += report.bytes_cloned
    c["bytes_saved"] += report.bytes_saved


# Note [The cache key covers the graph's code]
# On a hit in Inductor's FX graph cache or AOTAutograd's cache neither functionalization nor the
# pass runs, so their key (``ReinplacePass.uuid``) must change with every piece of autofunc code
# that decides what a compiled graph holds: the pass, the HOPs and their view chains, and the
# registry (which HOP a call becomes: a v1 call may become v2). A hand-kept list of those
# modules goes stale when one is added, moved or split into a package, so every source file of
# the package is hashed, at any depth, except those that only run around a compile. What the
# pass and the registry import is checked against this set by tests/test_inductor.py.
_NOT_IN_GRAPH = frozenset(
    {
        "__main__.py",  # ``python -m autofunc``: the CLI
        "cli.py",  # the CLI: explain and the benchmarks from a shell
        "explain.py",  # its compile turns Inductor's and AOTAutograd's caches off
        "testing.py",  # test helpers: their capture backend is not Inductor and is not cached
        "bench",  # benchmarks: build, compile and time programs
        "kernels",  # autofunc.kernels: custom ops; a graph names them, their code runs in them
    }
)


def _graph_sources() -> list[Path]:
    """The package's source files that the cache key hashes, in a fixed order."""
    root = Path(__file__).parent
    return sorted(
        path for path in root.rglob("*.py") if path.relative_to(root).parts[0] not in _NOT_IN_GRAPH
    )


@functools.lru_cache(maxsize=1)
def _source_digest() -> str:
    """sha256 over the path (relative to the package) and the bytes of each graph source."""
    root = Path(__file__).parent
    digest = hashlib.sha256()
    for path in _graph_sources():
        data = path.read_bytes()
        digest.update(f"{path.relative_to(root).as_posix()}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def inductor_config_enabled() -> bool:
    return _state.reinplace


def install_pass() -> None:
    """Install the pass in this thread's Inductor config and as the process-wide default.

    Note [A process-wide pass]
    Inductor's config values set by assignment are per thread in recent torch (a ``ContextVar``
    per entry), but servers compile off the thread that called ``register``. The pass is
    therefore also made the entry's default, which every thread without its own override reads,
    and the functionalization rule of a registered op calls this again in the compiling thread,
    which covers a thread whose user set a post-grad pass of their own: theirs runs after ours.
    """
    _rewrap(lambda p: p if isinstance(p, ReinplacePass) else ReinplacePass(then=p))
    _install_backstops()


def uninstall_pass() -> None:
    """Put back the ``post_grad_custom_post_pass`` the user had (this thread's and the
    process-wide default), unless user Triton kernels still need the pass. Runs when the last
    registration is removed; the next registration installs the pass again."""
    if not (_triton.enabled() or _pytorch_nodes.enabled()):
        _rewrap(lambda p: p.then if isinstance(p, ReinplacePass) else p)
        _uninstall_backstops()


def _rewrap(change: Any) -> None:
    """Replace this thread's ``post_grad_custom_post_pass`` and the process-wide default by
    ``change(them)`` where that changes them (Note [A process-wide pass])."""
    current = inductor_config.post_grad_custom_post_pass
    new = change(current)
    if new is not current:
        inductor_config.post_grad_custom_post_pass = new
    entry = getattr(inductor_config, "_config", {}).get("post_grad_custom_post_pass")
    if entry is None:
        return
    new = change(entry.default)
    if new is not entry.default:
        try:
            entry.default = new
        except AttributeError:  # pragma: no cover - a config entry without a settable default
            pass


def reinplace_triton_kernels(enabled: bool = True) -> None:
    """Let autofunc's pass decide the clones of user Triton kernels too (``enabled``), or
    leave them to Inductor's own re-inplacing again (the default).

    A kernel launched from compiled code (``torch.library.wrap_triton(kernel)[grid](...)`` or a
    ``torch.library.triton_op``) then writes straight into the tensors it is given wherever
    that is sound, and where it is not, only the written tensor is copied. Process-wide, like
    ``register``; installs the Inductor pass. See ``autofunc/hops/triton.py``.
    """
    _triton.enable(enabled)
    if enabled:
        install_pass()
    elif not registry.registrations():
        uninstall_pass()


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
    if enabled:
        install_pass()
    elif not registry.registrations():
        uninstall_pass()
