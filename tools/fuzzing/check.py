"""Running a program on one path with one strategy and comparing it with eager."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import logging
import re
import traceback
from collections.abc import Callable
from typing import Any

import torch

from .ops import OPS, PATHS, STRATEGIES, seen
from .program import FuzzProgram

# Exceptions that are documented PyTorch limitations, not autofunc bugs: reported as
# ``kind="limitation"`` (counted by the sweep, never shrunk, not a test failure).
LIMITATIONS = (
    # v1 writes a clone back into the argument, i.e. mutates through the view chain; PyTorch's
    # functionalization refuses when that chain contains as_strided (pytorch#104505).
    (re.compile(r"as_strided\(\) is non-compositional"), "mutation through an as_strided view"),
    # PyTorch traced a nested_compile_region on a view it recorded wrongly (a slice counted from
    # the storage's start, or a view of a base whose layout changed before the call); autofunc
    # refuses it by name (Notes [Region slice entries count from the storage] and [Where a
    # region's view entries count from] in autofunc/hops/subgraph.py).
    (re.compile(r"PyTorch traced the region on a"), "a region traced on a wrongly recorded view"),
)


@dataclasses.dataclass
class Failure:
    program: FuzzProgram
    strategy: str
    path: str
    # "mismatch" | "exception" | "report" | "limitation" (see LIMITATIONS) | "bytes" (autofunc
    # v2 allocates more than the built-in v2, both right: ``builtin.check_bytes``) | "memory"
    # (the values right, but a call saw other memory than in eager: Note [The memory each call
    # sees] in ops.py)
    kind: str
    message: str  # one line
    detail: str = ""  # the differing values, or the traceback's tail
    graphs: str = ""  # capture path: the functional and re-inplaced forward graphs
    # the same program under PyTorch's built-in v2 where it was run (``builtin.against_builtin``):
    # "right", "wrong" (a mismatch) or "fails" (raises); "" not run
    builtin: str = ""
    # bytes the compiled call allocates per strategy, where measured
    allocated: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def is_bug(self) -> bool:
        return self.kind != "limitation"

    @property
    def signature(self) -> tuple:
        """What "fails the same way" means while shrinking."""
        if self.kind in ("mismatch", "report", "bytes", "memory"):
            return (self.kind,)
        exc, _, msg = self.message.partition(": ")
        msg = re.sub(r"\d+", "N", msg)[:60]
        return ("exception", exc, msg)

    def __str__(self) -> str:
        return f"[{self.strategy}/{self.path}] {self.kind}: {self.message}"


def _root_exception(e: BaseException) -> BaseException:
    seen = set()
    while id(e) not in seen:
        seen.add(id(e))
        nxt = getattr(e, "inner_exception", None) or e.__cause__
        if nxt is None:
            break
        e = nxt
    return e


@contextlib.contextmanager
def _no_compile_caches():
    """Turn off the AOTAutograd and FX graph caches: their keys do not include autofunc's
    registrations, so a program compiled with one strategy would be served to another."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    saved = functorch_config.enable_autograd_cache, inductor_config.fx_graph_cache
    functorch_config.enable_autograd_cache = False
    inductor_config.fx_graph_cache = False
    try:
        yield
    finally:
        functorch_config.enable_autograd_cache, inductor_config.fx_graph_cache = saved


def _compile(fn: Callable, path: str, own: list | None = None) -> tuple[Callable, Any]:
    """``fn`` compiled on ``path``, and on the capture path what was captured; there ``own``
    receives each graph's copies of the program's own (``tools.report_copies``)."""
    if path == "aot_eager":
        return torch.compile(fn, backend="aot_eager", fullgraph=True), None
    if path == "capture":
        from autofunc.testing import compile_capture

        from ..report_copies import program_copies

        before = None if own is None else (lambda gm: own.append(program_copies(gm)))
        return compile_capture(fn, fullgraph=True, before_pass=before)
    if path == "inductor":
        return torch.compile(fn, fullgraph=True), None
    raise ValueError(f"unknown path {path!r}; expected one of {PATHS}")


class _PyTorchNodes:
    """PyTorch's own v1 or v2 nodes (Inductor's ``enable_auto_functionalized_v2``), decided by
    autofunc's pass (``on``) or left as PyTorch wrote them; ``remove()`` restores both."""

    def __init__(self, version: str, on: bool) -> None:
        import torch._inductor.config as inductor_config

        import autofunc

        self._patch = inductor_config.patch(enable_auto_functionalized_v2=version == "v2")
        self._patch.__enter__()
        autofunc.reinplace_pytorch_nodes(on)

    def remove(self) -> None:
        import autofunc

        autofunc.reinplace_pytorch_nodes(False)
        self._patch.__exit__(None, None, None)


class _BuiltinVersion:
    """PyTorch's own handling with its v1 or v2 node (``builtin_v1``, ``builtin_v2``, as
    ``tools.compare``'s configurations choose them); ``remove()`` restores the setting."""

    def __init__(self, version: str) -> None:
        import torch._inductor.config as inductor_config

        self._patch = inductor_config.patch(enable_auto_functionalized_v2=version == "v2")
        self._patch.__enter__()

    def remove(self) -> None:
        self._patch.__exit__(None, None, None)


def register_strategy(strategy: str) -> list:
    """Route the fuzz ops to ``strategy`` (``builtin``, ``v1``, ``v2``, ``pytorch_v1``, ...);
    call ``remove()`` on each returned object to undo."""
    if strategy == "builtin":
        return []
    if strategy in ("builtin_v1", "builtin_v2"):
        return [_BuiltinVersion(strategy[-2:])]
    if strategy.startswith("pytorch_"):  # pytorch_v1, pytorch_v2; _off: no adapters
        version, _, off = strategy[len("pytorch_"):].partition("_")
        return [_PyTorchNodes(version, on=not off)]
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; expected one of {STRATEGIES}")
    import autofunc

    return [autofunc.register(op, strategy=strategy) for op in OPS]


def _diff(a: Any, b: Any) -> str:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"shape/dtype {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}"
        if a.numel() == 0:
            return "empty"
        d = (a - b).abs().nan_to_num(float("inf"))
        at = tuple(int(i) for i in torch.unravel_index(d.argmax(), a.shape)) if a.dim() else ()
        n = int((d > 1e-5).sum())
        return (
            f"max |diff| {float(d.max()):.4g} at {list(at)} "
            f"({n} of {a.numel()} elements differ): "
            f"eager {float(a[at]):.6g}, compiled {float(b[at]):.6g}"
        )
    return f"{a!r} vs {b!r}"


# Note [Outputs outside their storage]
# Inductor may return an ``as_strided`` view of a view of a buffer it computed on a storage that
# holds only the inner view, so the returned tensor reaches past its storage (reading it reads
# freed or foreign memory, and can crash the process). Plain aten code does it, no custom op or
# autofunc involved:
#     r = x * 2; s = torch.slice_scatter(r.view(2, 2), y, 1, 1, 2, 2)
#     return s.reshape(4).reshape(2, 2)[:, 1:2:2].as_strided([1], [2], 3)
# returns a tensor at offset 3 on a 2-element storage under Inductor (torch 2.13). Such an
# output is a PyTorch limitation when the program made it with ``as_strided``, a bug otherwise.
_AS_STRIDED_OUTSIDE = "Inductor returned an as_strided view outside its storage (PyTorch)"


def _outside_storage(program: FuzzProgram, got: tuple) -> tuple[str, str] | None:
    """``(kind, message)`` for the first output whose elements are not all inside its storage."""
    for i, t in enumerate(got):
        if not isinstance(t, torch.Tensor) or t.numel() == 0:
            continue
        last = t.storage_offset() + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
        if (last + 1) * t.element_size() <= t.untyped_storage().nbytes():
            continue
        name = program.returns[i]
        made_by = next((st.text for st in program.stmts if name in st.defs), "")
        where = f"output {i} ({name}): ends at byte {(last + 1) * t.element_size()} of a "
        where += f"{t.untyped_storage().nbytes()}-byte storage"
        if ".as_strided(" in made_by:
            return "limitation", f"{_AS_STRIDED_OUTSIDE}: {where}"
        return "exception", f"output outside its storage: {where}"
    return None


def check(
    program: FuzzProgram, strategy: str, path: str, allocated: dict[str, int] | None = None
) -> Failure | None:
    """Compile ``program`` on ``path`` with the fuzz ops registered with ``strategy`` and compare
    with eager: the outputs, and the final values of the inputs. Where ``allocated`` is given,
    ``allocated[strategy]`` receives the bytes a second call of the compiled program allocates
    (on fresh inputs; ``_memory``), and ``allocated[peak_key(strategy)]`` its peak, whatever
    its result.

    An exception that PyTorch's own handling raises too, word for word up to numbers, on the
    same path is a PyTorch limitation, not an autofunc bug (seed 20261245 #192: AOTAutograd
    cannot regenerate a returned ``reshape`` of a non-contiguous input with no custom op in the
    program at all; seed 20261253 #9: Inductor's scheduler raises ``KeyError: 'op4'`` where the
    built-in's graph, one node shorter, gets ``'op3'``).

    Raises:
        EagerError: the program raises in eager (regenerate it; not a finding).
    """
    failure = _check_once(program, strategy, path, allocated=allocated)
    if failure is not None and strategy.startswith("pytorch_"):
        # PyTorch's v1 node is wrong by itself where mutable arguments share memory (each is
        # cloned alone; Note [PyTorch's nodes as mutations] in autofunc/hops/pytorch_nodes.py).
        # Where its nodes, left as they are and run without Inductor, differ from eager too,
        # they are the oracle: the pass must keep their result exactly.
        if _check_once(program, f"{strategy}_off", "aot_eager") is not None:
            try:
                oracle = _run_compiled(program, f"{strategy}_off", "aot_eager")
            except Exception:  # noqa: BLE001 - PyTorch's nodes fail by themselves: no oracle
                oracle = None
            again = None if oracle is None else _check_once(program, strategy, path, oracle)
            if again is None:
                failure.kind = "limitation"
                failure.message = (
                    f"PyTorch's node is wrong before any pass, and the pass keeps its result: "
                    f"{failure.message}"
                )
                return failure
            again.message = f"against PyTorch's nodes without the pass: {again.message}"
            return again
    if failure is not None and failure.kind == "exception" and strategy != "builtin":
        theirs = _check_once(program, "builtin", path)
        if (
            theirs is not None
            and theirs.kind == "exception"
            and _up_to_numbers(theirs.message) == _up_to_numbers(failure.message)
        ):
            failure.kind = "limitation"
            failure.message = f"PyTorch's own handling fails alike: {failure.message}"
    return failure


def _up_to_numbers(message: str) -> str:
    """``message`` with every number replaced (node and buffer indices differ between graphs)."""
    return re.sub(r"\d+", "#", message)


def _run_compiled(program: FuzzProgram, strategy: str, path: str) -> tuple[Any, list]:
    """The program's outputs and final inputs, compiled on ``path`` under ``strategy``."""
    regs = register_strategy(strategy)
    caches = _no_compile_caches()
    caches.__enter__()
    try:
        torch._dynamo.reset()
        prog, make_inputs = program.build()
        inputs = make_inputs()
        compiled, _ = _compile(prog, path)
        return compiled(*inputs), inputs
    finally:
        caches.__exit__(None, None, None)
        for r in regs:
            r.remove()
        torch._dynamo.reset()


def memory_seen(eager: list, compiled: list) -> str:
    """Where a call saw other memory than in eager (Note [The memory each call sees] in
    ops.py), or ``""``: every record of the compiled program must be one of eager's, as
    multisets (independent calls may run in another order, and a call nothing observes may be
    left out: Inductor drops one whose results and writes no one reads)."""
    extra = collections.Counter(compiled) - collections.Counter(eager)
    if not extra:
        return ""
    name = next(iter(extra))[0]
    in_eager = [o for n, o in eager if n == name]
    in_compiled = [o for n, o in compiled if n == name]
    return (
        f"the memory a call sees: {name}'s written arguments share memory with its arguments "
        f"{in_compiled} compiled, in eager {in_eager}"
    )


def _memory(compiled: Callable, make_inputs: Callable[[], tuple]) -> Any:
    """The bytes one call of the (compiled, warm) program allocates, on fresh inputs, and its
    peak: the one measurement ``tools.compare`` makes (``autofunc.bench.measure.measure_memory``).
    Both are kept: where Inductor's planner declines to reuse memory that would raise the peak,
    fewer live bytes can mean more allocated."""
    from autofunc.bench.measure import measure_memory

    fresh = make_inputs()
    return measure_memory(lambda: compiled(*fresh))


def peak_key(strategy: str) -> str:
    """The key of ``strategy``'s peak bytes in a dict of allocated bytes."""
    return f"{strategy} peak"


def _check_once(
    program: FuzzProgram,
    strategy: str,
    path: str,
    oracle: tuple | None = None,
    allocated: dict[str, int] | None = None,
) -> Failure | None:
    """One compile of ``program`` against eager, or against ``oracle`` (outputs, final
    inputs) where given; ``allocated`` as for :func:`check`."""
    from autofunc.testing import output_aliasing, same_result

    with seen() as eager_seen:  # Note [The memory each call sees] in ops.py
        expected, eager_inputs = program.run_eager() if oracle is None else oracle
    regs = register_strategy(strategy)
    captured = None
    # FakeTensor logs every failing meta kernel at ERROR level; the failure carries it anyway.
    fake_log = logging.getLogger("torch._subclasses.fake_tensor")
    level = fake_log.level
    fake_log.setLevel(logging.CRITICAL)
    caches = _no_compile_caches()
    caches.__enter__()
    try:
        torch._dynamo.reset()
        prog, make_inputs = program.build()
        inputs = make_inputs()
        own: list = []
        try:
            compiled, captured = _compile(prog, path, own)
            with seen() as compiled_seen:
                got = compiled(*inputs)
            if allocated is not None:
                memory = _memory(compiled, make_inputs)
                allocated[strategy] = memory.allocated
                allocated[peak_key(strategy)] = memory.peak
        except Exception as e:  # noqa: BLE001
            root = _root_exception(e)
            first = (str(root).strip().splitlines() or [""])[0]
            tb = "".join(traceback.format_exception(root))[-4000:]
            frames = [
                f for f in traceback.extract_tb(root.__traceback__) if "/autofunc/" in f.filename
            ]
            where = " <- ".join(
                f"autofunc/{f.filename.rsplit('/autofunc/', 1)[1]}:{f.lineno} {f.name}"
                for f in reversed(frames[-3:])
            )
            if where:
                tb = f"raised at {where}\n{tb}"
            kind = "exception"
            if any(pat.search(str(root)) for pat, _ in LIMITATIONS):
                kind = "limitation"
            return Failure(
                program,
                strategy,
                path,
                kind,
                f"{type(root).__name__}: {first}",
                tb,
                _graphs(captured),
            )
        bad = []
        if not (isinstance(got, tuple) and len(got) == len(expected)):
            bad.append(f"outputs: expected a {len(expected)}-tuple, got {type(got).__name__}")
        else:
            outside = _outside_storage(program, got)
            if outside is not None:  # reading it would read past its storage: report, never read
                return Failure(program, strategy, path, *outside, "", _graphs(captured))
            for i, (e_, g) in enumerate(zip(expected, got)):
                if not same_result(e_, g):
                    bad.append(f"output {i} ({program.returns[i]}): {_diff(e_, g)}")
        for p, e_, g in zip(program.params, eager_inputs, inputs):
            if not same_result(e_, g):
                bad.append(f"input {p} after the call: {_diff(e_, g)}")
        if not bad and oracle is None:
            unseen = memory_seen(eager_seen, compiled_seen)
            if unseen:  # right values, but only for this op body's order of reads and writes
                return Failure(program, strategy, path, "memory", unseen, "", _graphs(captured))
        if not bad:  # a fresh output must be fresh, a view of an input one (run_against_eager)
            ours, eagers = output_aliasing(got, inputs), output_aliasing(expected, eager_inputs)
            if ours != eagers:
                bad.append(
                    f"output aliasing: the inputs each output shares memory with are {ours}, "
                    f"in eager {eagers}"
                )
        if bad:
            return Failure(
                program,
                strategy,
                path,
                "mismatch",
                bad[0].split("\n")[0],
                "\n".join(bad),
                _graphs(captured),
            )
        if captured is not None and captured.reports:
            from ..report_copies import check_report_copies

            try:  # the report counts every copy of the graphs (Note [Every copy in the report])
                check_report_copies(captured, own)
            except AssertionError as e:
                first = (str(e).splitlines() or [""])[0][:200]
                return Failure(program, strategy, path, "report", first, str(e), _graphs(captured))
        return None
    finally:
        caches.__exit__(None, None, None)
        fake_log.setLevel(level)
        for r in regs:
            r.remove()
        torch._dynamo.reset()


def _graphs(captured: Any) -> str:
    if captured is None:
        return ""
    parts = []
    for i, (f, r) in enumerate(itertools.zip_longest(captured.functional, captured.reinplaced)):
        if f:
            parts.append(f"-- functional forward graph {i}\n{f}")
        if r:
            parts.append(f"-- after autofunc.reinplace {i}\n{r}")
    if captured.report.calls:
        parts.append(f"-- report\n{captured.report}")
    return "\n".join(parts)
