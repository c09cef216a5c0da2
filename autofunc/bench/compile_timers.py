"""Timers for ``bench-compile``: wall time and garbage-collector time inside the functions
Inductor looks up for re-inplacing and functionalizing, and a compile's phases from Dynamo's own
timers.

Measurement only: :func:`install_timers` wraps module attributes (autofunc's pass, the
built-in's re-inplace and decompose passes, both functionalization rules) for the life of the
process, which is a ``bench-compile`` worker's. Imports torch; autofunc and Inductor modules
only inside :func:`install_timers`.
"""

from __future__ import annotations

import functools
import gc
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["PHASES", "Timers", "gc_share", "install_timers", "phases_of"]


class Timers:
    """Wall time spent in wrapped functions; a nested (recursive) call is not counted twice.

    Also the part of it spent in Python's cyclic garbage collector: a full collection walks the
    whole heap (every graph Dynamo and Inductor hold), so whichever pass it happens to interrupt
    looks slow by a few hundred ms at one layer count and not at the next.
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.gc_seconds: dict[str, float] = defaultdict(float)
        self.gc_collected: dict[str, int] = defaultdict(int)  # objects collections freed
        self.hops: dict[str, int] = defaultdict(int)
        self.nodes: dict[str, int] = defaultdict(int)
        self._active: str | None = None
        self._gc_start = 0.0
        self.gc_total = 0.0  # every collection while the timers are installed
        self.full_gcs: list[float] = []  # the duration of each full collection
        # key -> (objects the collector tracked when the wrapped function started, objects it
        # left tracked, garbage collected meanwhile added back); only for ``objects=True`` keys
        self.objects: dict[str, tuple[int, int]] = {}
        self.overhead_s = 0.0  # time spent counting objects (to subtract from the compile's)
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
            return
        took = time.perf_counter() - self._gc_start
        self.gc_total += took
        if info.get("generation") == _OLDEST:
            self.full_gcs.append(took)
        if self._active is not None:
            self.gc_seconds[self._active] += took
            self.gc_collected[self._active] += info.get("collected", 0)

    def wrap(
        self,
        module: Any,
        name: str,
        key: str,
        count: Callable[..., tuple[int, int]],
        objects: bool = False,
    ) -> None:
        """Time ``module.name`` under ``key``; ``count(*args)`` gives its graph's (HOP nodes,
        all nodes). With ``objects``, also count the objects the cyclic GC tracks before and
        after each call (a walk of the heap, outside the timed window; its time is kept in
        ``overhead_s``)."""
        original = getattr(module, name)
        depth = 0

        def heap() -> int:
            t0 = time.perf_counter()
            n = len(gc.get_objects())
            self.overhead_s += time.perf_counter() - t0
            return n

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            nonlocal depth
            if depth:
                return original(*args, **kwargs)
            depth += 1
            hops, nodes = count(*args, **kwargs)
            self.hops[key] += hops
            self.nodes[key] += nodes
            before = heap() if objects else 0
            collected_before = self.gc_collected[key]
            self._active = key
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[key] += time.perf_counter() - t0
                self._active = None
                depth -= 1
                if objects:
                    # Garbage a collection freed during the call (others' too) is added back:
                    # the count is what the call itself left, not what the collector cleared.
                    freed = self.gc_collected[key] - collected_before
                    start, left = self.objects.get(key, (before, 0))
                    self.objects[key] = (start, left + heap() - before + freed)

        setattr(module, name, timed)

    def clear(self) -> None:
        self.seconds.clear()
        self.gc_seconds.clear()
        self.hops.clear()
        self.nodes.clear()


_OLDEST = len(gc.get_threshold()) - 1  # the generation a full collection collects


def _count(graph: torch.fx.Graph, targets: tuple, pred: Any = None) -> tuple[int, int]:
    """(calls of ``targets`` that ``pred`` accepts, all nodes) in ``graph``."""
    hops = sum(
        1
        for n in graph.nodes
        if n.op == "call_function" and n.target in targets and (pred is None or pred(n))
    )
    return hops, len(graph.nodes)


def install_timers(config: str) -> Timers:
    """Timers on both configs' re-inplace passes and functionalization rules; the heap is
    counted around ``config``'s own passes only."""
    from torch._higher_order_ops import auto_functionalize as builtin_hops
    from torch._inductor.fx_passes import post_grad

    from ..backends.inductor import glue as inductor
    from ..hops.adapter import accepted, mutation_targets
    from ..registry import routing

    builtin = (builtin_hops.auto_functionalized, builtin_hops.auto_functionalized_v2)
    ours = mutation_targets()
    mine = config.startswith("autofunc")
    timers = Timers()
    timers.wrap(
        inductor,
        "reinplace",
        "autofunc_pass",
        lambda gm, **_: _count(gm.graph, ours, accepted),
        mine,
    )
    timers.wrap(
        post_grad,
        "reinplace_inplaceable_ops",
        "builtin_reinplace",
        lambda *args: _count(args[-1], builtin),
        not mine,
    )
    timers.wrap(
        post_grad,
        "decompose_auto_functionalized",
        "builtin_decompose",
        lambda graph: (0, 0),
        not mine,
    )
    # The rules turning each mutable-op call into a HOP (both looked up at call time).
    no_count = lambda *args, **kwargs: (0, 0)  # noqa: E731
    timers.wrap(routing, "functionalize_v2", "autofunc_rule", no_count)
    timers.wrap(builtin_hops, "do_auto_functionalize_v2", "builtin_rule", no_count)
    return timers


# The compile's phases, from Dynamo's own timers (``compilation_time_metrics``, by the names
# of ``dynamo_timed`` regions); each phase is one timer minus those nested in it.
PHASES = ("dynamo", "guards", "aot", "joint", "post_grad", "lowering", "codegen", "inductor_other")


def phases_of(metrics: Any) -> dict[str, float | None]:
    """The compile timed by ``metrics`` (timer name -> seconds of each entry) as disjoint
    phases, seconds each; ``None`` where a timer this needs is missing (another torch):

    * ``dynamo``: tracing the bytecode (``_compile.compile_inner`` less the backend and guards);
    * ``guards``: building the guards;
    * ``aot``: AOTAutograd, functionalization included (the backend less Inductor's compiler);
    * ``joint``: Inductor's joint-graph passes; ``post_grad``: its post-grad passes, both
      re-inplace passes included; ``lowering``: ``GraphLowering.run``; ``codegen``: scheduling,
      code generation, compiling and loading the module;
    * ``inductor_other``: the rest of Inductor's compiler (fake-tensor propagation, ...).
    """

    def t(name: str) -> float | None:
        entries = metrics.get(name)
        return float(sum(entries)) if entries else None

    def minus(total: float | None, *parts: float | None) -> float | None:
        if total is None or any(p is None for p in parts):
            return None
        return total - sum(parts)  # type: ignore[arg-type]

    backend, guards = t("OutputGraph.call_user_compiler"), t("build_guards")
    inductor = t("compile_fx.<locals>.fw_compiler_base")
    joint, post_grad = t("_recursive_joint_graph_passes"), t("_recursive_post_grad_passes")
    lowering, codegen = t("GraphLowering.run"), t("GraphLowering.compile_to_module")
    return {
        "dynamo": minus(t("_compile.compile_inner"), backend, guards),
        "guards": guards,
        "aot": minus(backend, inductor),
        "joint": joint,
        "post_grad": post_grad,
        "lowering": lowering,
        "codegen": codegen,
        "inductor_other": minus(inductor, joint, post_grad, lowering, codegen),
    }


def gc_share(heap: int, left: int, full_collections: list[float]) -> float:
    """A pass's share of the full collections of a compile, by the objects it leaves.

    Note [Who pays for a full collection]
    CPython collects its oldest generation once the objects promoted since the last full
    collection exceed a quarter of the objects that survived it, and each full collection walks
    every tracked object. So about ``heap / 4`` promotions come between two full collections
    of about ``D`` seconds each, and each object that lives on costs about ``4 * D / heap``.
    Which phase the collection interrupts is chance: in the 128-layer decoder the pass leaves
    ~12,000 objects in a heap of millions and happens to be where the quarter is crossed. This
    share, ``4 * D * left / heap`` with ``D`` the mean full collection of the compile and
    ``heap`` the tracked objects when the pass started, is what the pass costs the collector
    whichever phase pays; the time a collection took inside the pass is reported beside it.
    """
    if heap <= 0 or not full_collections:
        return 0.0
    mean = sum(full_collections) / len(full_collections)
    return 4.0 * mean * max(left, 0) / heap
