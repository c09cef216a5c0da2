"""Inductor glue: run the re-inplace pass as a post-grad pass, chained with the user's own.

``install_pass()`` is idempotent and keeps whatever ``post_grad_custom_post_pass`` the user set:
autofunc's pass runs first (it must see the HOPs before anything else), then theirs. Depends on
the registry (it hooks ``install_pass`` into it, Note [Backend hooks]); the registry does not
import this module. Reports are kept only for the ``collect_reports()`` blocks open while a
graph compiles, so a long-running server does not accumulate them; a graph loaded from
Inductor's cache delivers the report stored with it (Note [Reports on a cache hit]).
"""

from __future__ import annotations

import functools
import inspect
import itertools
import sys
import threading
import weakref
from typing import Any

import torch

from ...compiler_imports import import_compiler

import_compiler()  # before any of Inductor: Note [Importing the compiler beside a first compile]

import torch._inductor.config as inductor_config
from torch._inductor.custom_graph_pass import CustomGraphModulePass, CustomGraphPass

try:  # torch >= 2.10: the pass is told whether the graph is an inference graph
    from torch._inductor.custom_graph_pass import CustomInferenceAwareGraphPass as _Base
except ImportError:  # pragma: no cover
    _Base = CustomGraphPass

from ... import registry
from ...guards import guard_current_compile
from ...hops import pytorch_nodes as _pytorch_nodes
from ...hops import triton as _triton
from ...hops.adapter import accepted, mutation_targets
from ...logs import get_logger
from ...passes.copies import account_copies
from ...passes.reinplace import reinplace
from ...passes.report import Report
from ...registry import switches
from ...registry.switches import pass_key
from ...reports import collect_reports, deliver, last_reports
from .policy import INDUCTOR

__all__ = [
    "ReinplacePass",
    "collect_reports",
    "install_pass",
    "last_reports",
    "run_pass",
    "uninstall_pass",
]

log = get_logger("autofunc.inductor")


# guards the Inductor cache hooks' state (``_unclaimed``, ``_hooked``)
_lock = threading.Lock()


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
        _hook_inductor_cache()  # Inductor is computing its cache key: hook its hits first
        _hook_post_grad()  # Note [Reports after Inductor's post-grad passes]
        then = tuple(p.uuid() if hasattr(p, "uuid") else repr(p) for p in _passes(self.then))
        return (*pass_key(), then)  # the switches' module says what it covers


def _passes(value: Any) -> tuple:
    """A ``post_grad_custom_post_pass`` value (None, one pass or a list) as a tuple."""
    if value is None:
        return ()
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


def run_pass(gm: torch.fx.GraphModule, is_inference: bool | None, note: str = "") -> None:
    """Run the re-inplace pass on ``gm`` as Inductor's post-grad pass does and deliver its
    report (``note``: where it ran, when not in the post-pass slot)."""
    _hook_inductor_cache()
    report = reinplace(
        gm, enable=switches.state.reinplace, is_inference=is_inference, policy=INDUCTOR
    )
    if report.calls:
        report.note = note
        _keep_for_cache(gm, report)
        pending = getattr(_post_grad, "pending", None)
        if pending is None:  # not inside Inductor's post-grad passes: the graph is final
            deliver(report)
        else:
            pending.append((gm, report))


# Note [Reports after Inductor's post-grad passes]
# Inductor's own post-grad passes run after autofunc's: its re-inplacing turns each scatter
# left in the graph into a ``copy_`` into a view (of a clone, or of the scatter's input), and
# later passes may drop nodes. A report delivered as autofunc's pass ends would count copies
# of a graph Inductor never lowers. So inside Inductor's post-grad passes (``_post_grad``,
# a wrapper around ``compile_fx._recursive_post_grad_passes``, installed with the pass) a
# report waits until the passes on its graph are done; its copies are then counted again on
# the graph Inductor lowers (Note [Every copy in the report] in passes/copies.py), and it is
# delivered. A report made anywhere else, or where this torch has no such function (private
# API, checked on torch 2.13), is delivered at once, counted on the graph the pass left.
_post_grad = threading.local()


def _loaded(name: str) -> Any:
    """``sys.modules[name]`` once its import has finished, else ``None``: a module another
    thread is still executing (a first compile importing Inductor beside a registration, Note
    [Importing the compiler beside a first compile]) lacks the names defined after the point it
    has reached. The callers run again later (every functionalized call runs the backend hooks,
    every compile asks the pass's ``uuid``), so what they skip now is done then."""
    module = sys.modules.get(name)
    if module is None or getattr(getattr(module, "__spec__", None), "_initializing", False):
        return None
    return module


def _hook_post_grad() -> None:
    """Wrap ``compile_fx._recursive_post_grad_passes`` (Note [Reports after Inductor's
    post-grad passes]); again whenever something replaced the wrapper. Idempotent."""
    compile_fx = _loaded("torch._inductor.compile_fx")
    original = getattr(compile_fx, "_recursive_post_grad_passes", None)
    if original is None or getattr(original, "_autofunc", False):
        return

    @functools.wraps(original)
    def _recursive_post_grad_passes(gm: Any, *args: Any, **kwargs: Any) -> Any:
        outer = getattr(_post_grad, "pending", None)
        _post_grad.pending = []
        try:
            return original(gm, *args, **kwargs)
        finally:
            pending, _post_grad.pending = _post_grad.pending, outer
            for module, report in pending:
                try:
                    report.copies = account_copies(module.graph)
                except Exception:  # never break a compile over a report
                    log.debug("autofunc: could not count a graph's copies", exc_info=True)
                if outer is not None:  # a subgraph: delivered with its parent graph
                    outer.append((module, report))
                else:
                    deliver(report)

    _recursive_post_grad_passes._autofunc = True  # type: ignore[attr-defined]
    compile_fx._recursive_post_grad_passes = _recursive_post_grad_passes


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
        left = (  # looked up by target, as the pass finds its nodes: no walk of the graph
            n
            for target in mutation_targets()
            for n in gm.graph.find_nodes(op="call_function", target=target)
        )
        if any(accepted(n) for n in left):
            reason = _why_missing()
            if reason not in _warned:
                _warned.add(reason)
                log.warning(
                    "autofunc: the re-inplace pass did not run as Inductor's post-grad custom "
                    "pass (%s); it ran as the device pass, after that pass, and decided every "
                    "call (Note [The pass is never missing] in autofunc/backends/inductor/glue.py)",
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
    common = _loaded("torch._inductor.codegen.common")
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


# Note [Reports on a cache hit]
# On a hit in Inductor's FX graph cache or AOTAutograd's cache no post-grad pass runs, so
# autofunc's pass delivers no report: the log, the counters, the trace artifact and
# ``collect_reports`` would all be silent on the second run of a program. So the report travels
# with the cache entry. The pass keeps each report under the GraphModule it ran on
# (``_unclaimed``, weakly); Inductor builds its ``CompiledFxGraph`` from that same module right
# after the post-grad passes, and autofunc's wrapper around that constructor takes the module's
# reports (and its subgraphs'), in the order they were made, and stores them as JSON in an
# attribute of the compiled graph (``_REPORTS_ATTR``; an empty tuple where the graph has no
# call). Inductor pickles the whole object into the FX graph cache (AOTAutograd's cache refers
# to that entry, or bundles the same object), so the attribute comes back with it. Every hit,
# through either cache, goes through ``FxGraphCache.cache_hit_post_compile``; autofunc's wrapper
# there delivers the stored reports exactly as the pass would have (``reports.deliver``). Neither
# key changes: the attribute is set after the key was computed, and an entry is found only
# under the key of the same input graph and the same autofunc code and registrations (Note
# [The cache key covers the graph's code]), which decide the report. Both hooks are private
# torch API, isolated in ``_hook_inductor_cache``; where one is missing, a hit on a graph that
# calls a registered op is named at INFO on the ``autofunc`` log, once per process, with the
# ways to see its decisions.

_REPORTS_ATTR = "_autofunc_reports"
_unclaimed: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # module -> [(seq, Report)]
_sequence = itertools.count()
_hooked = False
_said: set[str] = set()


def _keep_for_cache(gm: torch.nn.Module, report: Report) -> None:
    with _lock:
        _unclaimed.setdefault(gm, []).append((next(_sequence), report))


def _claim_reports(compiled: Any, gm: Any) -> None:
    """Store the reports made on ``gm`` and its subgraphs in the ``CompiledFxGraph``
    ``compiled`` that Inductor built from it (Note [Reports on a cache hit])."""
    if not isinstance(gm, torch.nn.Module):
        return
    with _lock:
        found = [entry for module in gm.modules() for entry in _unclaimed.pop(module, ())]
    found.sort(key=lambda entry: entry[0])
    setattr(compiled, _REPORTS_ATTR, tuple(report.to_json() for _, report in found))


def _replay(compiled: Any) -> None:
    """Deliver the reports stored in ``compiled``, a graph just loaded from Inductor's cache."""
    stored = getattr(compiled, _REPORTS_ATTR, None)
    if stored is None:
        if _calls_registered_op(getattr(compiled, "source_code", "") or ""):
            _say_once("the cache entry holds no autofunc report (it was written without them)")
        return
    try:
        reports = [Report.from_json(text) for text in stored]
    except ValueError:
        log.debug("autofunc: a stored report cannot be read", exc_info=True)
        _say_once("its stored autofunc report cannot be read by this autofunc")
        return
    log.debug("autofunc: %d report(s) of a graph loaded from Inductor's cache", len(reports))
    for report in reports:
        deliver(report)


def _calls_registered_op(source: str) -> bool:
    """Whether Inductor's output code calls an op registered with autofunc (Python wrapper
    ``torch.ops.ns.name.``, C++ wrapper ``"ns::name"``)."""
    for qualname in registry.registrations():
        ns, _, name = qualname.partition("::")
        if f"torch.ops.{ns}.{name}." in source or f'"{ns}::{name}' in source:
            return True
    return False


def _say_once(why: str) -> None:
    if why in _said:
        return
    _said.add(why)
    log.info(
        "autofunc: a graph came from Inductor's FX graph cache or AOTAutograd's cache, where "
        "the re-inplace pass does not run, and %s; to see its decisions, run "
        "autofunc.explain(fn, *args) (it turns the caches off) or set "
        "TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 (Note [Reports on a cache hit] in "
        "autofunc/backends/inductor/glue.py)",
        why,
    )


def _hook_inductor_cache() -> None:
    """Wrap Inductor's ``CompiledFxGraph.__init__`` (store each graph's reports in it) and
    ``FxGraphCache.cache_hit_post_compile`` (replay them on a hit): Note [Reports on a cache
    hit]. Private torch API, checked on torch 2.13 (``torch._inductor.output_code`` and
    ``torch._inductor.codecache``; the same names and the ``gm`` argument in earlier releases
    that have ``cache_hit_post_compile``, 2.11 among them). Idempotent; does nothing until
    Inductor's cache code is loaded (the first compile loads it, and calls this from
    ``ReinplacePass.uuid`` before any lookup). Where a name or the ``gm`` argument is missing
    it leaves that side unwrapped: without the constructor, hits on graphs that call a
    registered op are named at INFO; without the hit hook, that is said once, at INFO, when
    the hooks are first tried.
    """
    global _hooked
    if _hooked:
        return
    codecache = _loaded("torch._inductor.codecache")
    output_code = _loaded("torch._inductor.output_code")
    if codecache is None or output_code is None:
        return
    with _lock:
        if _hooked:
            return
        _hooked = True
        compiled_cls = getattr(output_code, "CompiledFxGraph", None)
        cache_cls = getattr(codecache, "FxGraphCache", None)
        init = getattr(compiled_cls, "__init__", None)
        try:
            gm_index = list(inspect.signature(init).parameters).index("gm")
        except (TypeError, ValueError):
            gm_index = -1
        if init is not None and gm_index > 0 and not getattr(init, "_autofunc", False):

            @functools.wraps(init)
            def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
                init(self, *args, **kwargs)
                try:
                    gm = kwargs["gm"] if "gm" in kwargs else args[gm_index - 1]
                    _claim_reports(self, gm)
                except Exception:  # never break a compile over a report
                    log.debug("autofunc: could not store a report with a graph", exc_info=True)

            __init__._autofunc = True  # type: ignore[attr-defined]
            compiled_cls.__init__ = __init__
        hit = inspect.getattr_static(cache_cls, "cache_hit_post_compile", None)
        hit = hit.__func__ if isinstance(hit, staticmethod) else None
        if hit is None:
            log.info(
                "autofunc: this torch has no FxGraphCache.cache_hit_post_compile, where autofunc "
                "replays a graph's report when Inductor's FX graph cache or AOTAutograd's cache "
                "serves it: such graphs show no report; to see their decisions, run "
                "autofunc.explain(fn, *args) or set TORCHINDUCTOR_FORCE_DISABLE_CACHES=1"
            )
        elif not getattr(hit, "_autofunc", False):

            @functools.wraps(hit)
            def cache_hit_post_compile(graph: Any, *args: Any, **kwargs: Any) -> Any:
                result = hit(graph, *args, **kwargs)
                try:
                    if result[0] is not None:
                        _replay(result[0])
                except Exception:
                    log.debug("autofunc: could not replay a stored report", exc_info=True)
                return result

            cache_hit_post_compile._autofunc = True  # type: ignore[attr-defined]
            cache_cls.cache_hit_post_compile = staticmethod(cache_hit_post_compile)


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
    _hook_inductor_cache()
    _hook_post_grad()


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
