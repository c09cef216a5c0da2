"""Differential random-program testing of autofunc: eager vs. compiled.

* Ops in the ``autofunc_fuzz`` namespace (:data:`OPS`) with one, two or three mutable tensors,
  a list, an optional, a fresh-tensor return. Every op reads its non-mutable arguments *before*
  writing anything (so a read argument that aliases a mutable one has the same meaning in eager
  and in a functional program), except ``mlate``, which the generator only calls with a read
  argument disjoint from its mutable one.
* :func:`generate` builds a straight-line program as source text (``def prog(a, b): ...``) plus
  an input factory, simulating every statement on real tensors as it goes, so shapes, view
  validity and memory overlap are exact and the program runs in eager by construction.
* :func:`check` compiles a program on one path (``aot_eager``, ``capture`` = AOTAutograd with the
  re-inplace pass, ``inductor``) with the ops registered with one strategy and compares outputs
  and the final values of the inputs with eager.
* :func:`shrink` / :func:`shrink_failure` greedily delete statements while the failure persists;
  :func:`write_repro` saves a self-contained pytest-style script.

``scripts/fuzz_sweep.py`` runs long sweeps; ``tests/test_fuzz.py`` runs a bounded one in CI.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import linecache
import logging
import random
import re
import textwrap
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ..symbolic import span_extent

__all__ = [
    "OPS",
    "PATHS",
    "STRATEGIES",
    "Stmt",
    "FuzzProgram",
    "Features",
    "Failure",
    "EagerError",
    "generate",
    "program_for",
    "check",
    "shrink",
    "shrink_failure",
    "triage",
    "write_repro",
]

_NS = "autofunc_fuzz"
PATHS = ("aot_eager", "capture", "inductor")
# "builtin" leaves the ops to PyTorch's own auto_functionalized handling (for triage).
STRATEGIES = ("v1", "v2", "builtin")

# -- ops ----------------------------------------------------------------------------------------
# Contractions (|factor| <= 1) and means keep values bounded however many calls a program makes.


@torch.library.custom_op(f"{_NS}::m1", mutates_args={"x"})
def m1(x: torch.Tensor, y: torch.Tensor) -> None:
    """x = x * 0.5 + mean(y) + 1"""
    s = y.mean()
    x.mul_(0.5).add_(s + 1)


@torch.library.custom_op(f"{_NS}::m2", mutates_args={"a", "b"})
def m2(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
    """a = a * 0.5 + mean(c); then b = -0.75 * b + mean(new a) (order-sensitive when a, b alias)"""
    s = c.mean()
    a.mul_(0.5).add_(s)
    b.mul_(-0.75).add_(a.mean())


@torch.library.custom_op(f"{_NS}::m3", mutates_args={"xs"})
def m3(xs: list[torch.Tensor], y: torch.Tensor) -> None:
    """for i, x in xs: x = -0.5 * x + s + i; s = 0.5 * s + mean(new x); starting at s = mean(y)"""
    s = y.mean()
    for i, x in enumerate(xs):
        x.mul_(-0.5).add_(s + i)
        s = s * 0.5 + x.mean()


@torch.library.custom_op(f"{_NS}::mopt", mutates_args={"x"})
def mopt(x: torch.Tensor | None, y: torch.Tensor) -> None:
    """x = 0.25 * x + mean(y) - 1 when x is given"""
    s = y.mean()
    if x is not None:
        x.mul_(0.25).add_(s - 1)


@torch.library.custom_op(f"{_NS}::m3way", mutates_args={"a", "b", "c"})
def m3way(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
    """a = 0.5 a + 1; b = -0.5 b + mean(a); c = 0.75 c - mean(b), in this order"""
    a.mul_(0.5).add_(1)
    b.mul_(-0.5).add_(a.mean())
    c.mul_(0.75).sub_(b.mean())


@torch.library.custom_op(f"{_NS}::mret", mutates_args={"x"})
def mret(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x = 0.5 x - mean(y); returns a fresh contiguous 3 * new x + mean(y)"""
    s = y.mean()
    x.mul_(0.5).sub_(s)
    return (x * 3 + s).contiguous()


@mret.register_fake
def _(x, y):
    return x.new_empty(x.shape)


@torch.library.custom_op(f"{_NS}::mlate", mutates_args={"x"})
def mlate(x: torch.Tensor, y: torch.Tensor) -> None:
    """x = 0.5 x, *then* x += mean(y): reads y after writing x (the generator keeps y disjoint
    from x, so a compiled program that makes them share memory shows up)"""
    x.mul_(0.5)
    x.add_(y.mean())


OPS = (m1, m2, m3, mopt, m3way, mret, mlate)
OP_NAMES = tuple(op._qualname for op in OPS)

# -- programs -----------------------------------------------------------------------------------

_F64 = "dtype=torch.float64"
_NAME = re.compile(r"(?<![.\w])([A-Za-z_]\w*)")


@dataclasses.dataclass(frozen=True)
class Stmt:
    """One line of a program. ``src`` is set for a view whose uses may be renamed to it."""

    text: str
    defs: tuple[str, ...]
    kind: str  # "buffer" | "view" | "read" | "call" | "inplace"
    src: str | None = None

    def uses(self, known: set[str] | frozenset[str]) -> set[str]:
        # The right-hand side only: ``v1, v2 = t0.split(...)`` uses t0.
        rhs = self.text.split("=", 1)[1] if self.defs else self.text
        return {n for n in _NAME.findall(rhs) if n in known}

    def rename(self, old: str, new: str) -> "Stmt":
        pat = re.compile(rf"(?<![.\w]){re.escape(old)}(?!\w)")
        if self.defs:
            lhs, rhs = self.text.split("=", 1)
            return dataclasses.replace(self, text=lhs + "=" + pat.sub(new, rhs))
        return dataclasses.replace(self, text=pat.sub(new, self.text))


@dataclasses.dataclass(frozen=True)
class FuzzProgram:
    params: tuple[str, ...]
    inputs: tuple[str, ...]  # one expression per param (may refer to earlier params)
    input_seed: int
    stmts: tuple[Stmt, ...]
    returns: tuple[str, ...]
    origin: str = ""  # e.g. "seed=0 index=12"

    # -- text ----------------------------------------------------------------------------------

    def source(self) -> str:
        body = [s.text for s in self.stmts]
        ret = ", ".join(self.returns)
        body.append(f"return ({ret},)" if self.returns else "return ()")
        head = f"def prog({', '.join(self.params)}):\n"
        return head + textwrap.indent("\n".join(body), "    ") + "\n"

    def inputs_source(self) -> str:
        lines = [f"torch.manual_seed({self.input_seed})"]
        lines += [f"{p} = {e}" for p, e in zip(self.params, self.inputs)]
        lines.append(f"return ({', '.join(self.params)},)" if self.params else "return ()")
        return "def make_inputs():\n" + textwrap.indent("\n".join(lines), "    ") + "\n"

    def full_source(self) -> str:
        return self.source() + "\n\n" + self.inputs_source()

    @property
    def digest(self) -> str:
        return hashlib.sha1(self.full_source().encode()).hexdigest()[:10]

    # -- execution -----------------------------------------------------------------------------

    def build(self) -> tuple[Callable, Callable[[], tuple]]:
        """Fresh ``(prog, make_inputs)`` function objects."""
        src = self.full_source()
        filename = f"<autofunc-fuzz-{self.digest}>"
        linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
        ns: dict[str, Any] = {"torch": torch, "ops": getattr(torch.ops, _NS)}
        exec(compile(src, filename, "exec"), ns)
        return ns["prog"], ns["make_inputs"]

    def run_eager(self) -> tuple[Any, tuple]:
        """(outputs, inputs after the call); raises :class:`EagerError` if eager raises."""
        prog, make_inputs = self.build()
        inputs = make_inputs()
        try:
            out = prog(*inputs)
        except Exception as e:  # noqa: BLE001
            raise EagerError(f"{type(e).__name__}: {e}") from e
        return out, inputs

    def runs_in_eager(self) -> bool:
        try:
            out, inputs = self.run_eager()
        except EagerError:
            return False
        return all(bool(torch.isfinite(t).all()) for t in _tensors((out, inputs)))

    @property
    def defined(self) -> frozenset[str]:
        return frozenset(self.params) | frozenset(d for s in self.stmts for d in s.defs)


class EagerError(Exception):
    """The program itself raises in eager: not a finding, regenerate it."""


def _tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for y in x for t in _tensors(y)]
    return []


# -- generator ----------------------------------------------------------------------------------


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _elems(t: torch.Tensor) -> frozenset[int]:
    """The storage indices ``t`` covers (tiny tensors: enumerate them)."""
    return _geom_elems(t.shape, t.stride(), t.storage_offset())


def _geom_elems(sizes: Sequence[int], strides: Sequence[int], offset: int) -> frozenset[int]:
    idx = torch.full((), offset, dtype=torch.int64)
    for size, stride in zip(sizes, strides):
        idx = idx.unsqueeze(-1) + torch.arange(size, dtype=torch.int64) * stride
    return frozenset(idx.reshape(-1).tolist())


def _dims(shape: Sequence[int]) -> str:
    return ", ".join(str(s) for s in shape)


def _shape(shape: Sequence[int]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


@dataclasses.dataclass(frozen=True)
class Features:
    """Switches for program features. Those that only hit known PyTorch bugs (PyTorch's own
    handling fails on them too, or native in-place ops do) are off by default, so that a
    failure points at autofunc; ``scripts/fuzz_sweep.py --features`` turns them on or off."""

    # ``b`` a view of ``a``: AOTAutograd's synthetic bases mis-replay views of a mutated input
    # ("incorrect out shape after application of ViewMeta sequence", wrong values), whatever
    # the strategy.
    aliased_inputs: bool = False
    # ``unfold`` whose windows leave gaps: functionalization's view inverse (unfold_backward)
    # zeroes the elements no window covers, so a mutation through it zeroes them (native
    # ``mul_`` too; v1 writes its clone back through the view).
    gappy_unfold: bool = False
    # Graph inputs with a non-zero storage offset (``torch.randn(5, 4)[1:]``). On: they are the
    # commonest trigger of v2 view-regeneration failures; turn off to look past those.
    offset_inputs: bool = True
    # Mutating through ``unfold`` views: Inductor miscompiles the write-back (``unfold_backward``
    # of a transposed input): wrong values and heap corruption that kills the process (native
    # ``mul_`` too; autofunc's v1 writes back through the view, so it hits it).
    mutate_unfold_views: bool = False


class _Gen:
    MAX_NUMEL = 256

    def __init__(self, rng: random.Random, size: int, features: Features = Features()):
        self.rng = rng
        self.size = size
        self.features = features
        self.n = itertools.count()
        self.params: list[str] = []
        self.inputs: list[str] = []
        self.input_seed = rng.randrange(2**31)
        self.stmts: list[Stmt] = []
        self.env: dict[str, Any] = {}
        self.kind: dict[str, str] = {}
        self.order: list[str] = []  # tensor vars in definition order
        self.strided: set[str] = set()  # views that went through as_strided
        self.unfolded: set[str] = set()  # views that went through unfold

    # -- simulation ----------------------------------------------------------------------------

    def _program(self, returns: Sequence[str] = ()) -> FuzzProgram:
        return FuzzProgram(
            tuple(self.params),
            tuple(self.inputs),
            self.input_seed,
            tuple(self.stmts),
            tuple(returns),
        )

    def _replay(self) -> None:
        _, make_inputs = self._program().build()
        self.env = {"torch": torch, "ops": getattr(torch.ops, _NS)}
        self.env.update(zip(self.params, make_inputs()))
        for s in self.stmts:
            exec(s.text, self.env)

    def t(self, name: str) -> torch.Tensor:
        return self.env[name]

    def _fresh(self, prefix: str) -> str:
        return f"{prefix}{next(self.n)}"

    def _try(self, text: str, defs: tuple[str, ...], kind: str, src: str | None = None) -> bool:
        """Run ``text``; keep it if it succeeds and leaves sane values, else undo it."""
        try:
            exec(text, self.env)
            new = [self.env[d] for d in defs]
            ok = all(
                isinstance(t, torch.Tensor) and 0 < t.numel() <= self.MAX_NUMEL and t.dim() <= 4
                for t in new
            )
            ok = ok and all(
                bool(torch.isfinite(self.env[v]).all()) and float(self.env[v].abs().max()) < 1e6
                for v in self.order + list(defs)
            )
        except Exception:  # noqa: BLE001
            ok = False
        if not ok:
            for d in defs:
                self.env.pop(d, None)
            self._replay()
            return False
        self.stmts.append(Stmt(text, defs, kind, src))
        for d in defs:
            if self._owner(self.env[d]) is not None:
                self.kind[d] = "view"
            else:
                self.kind[d] = "read" if kind == "read" else "buffer"
            self.order.append(d)
        return True

    def _owner(self, t: torch.Tensor) -> str | None:
        """The first var (an input or a buffer) defined on ``t``'s storage.

        Storage pointers change on every replay, so this is never cached."""
        st = _storage(t)
        return next((v for v in self.order if _storage(self.env[v]) == st), None)

    # -- inputs --------------------------------------------------------------------------------

    def _make_inputs(self) -> None:
        rng = self.rng
        count = rng.choice([1, 2, 2])
        for p in ("a", "b")[:count]:
            alias = self.features.aliased_inputs and rng.random() < 0.12
            if p == "b" and alias and self.env["a"].dim() >= 1:
                a = self.env["a"]
                expr = rng.choice(["a[1:]", "a[0]", f"a.select({a.dim() - 1}, 1)"])
            else:
                rank = rng.randint(1, 3)
                shape = [rng.randint(2, 6) for _ in range(rank)]
                layout = rng.choice(["contiguous"] * 3 + ["permuted", "strided", "offset"])
                if layout == "offset" and not self.features.offset_inputs:
                    layout = "contiguous"
                if layout == "permuted" and rank >= 2:
                    perm = list(range(rank))
                    while perm == sorted(perm):
                        rng.shuffle(perm)
                    stored = [0] * rank  # stored.permute(perm) has `shape`
                    for i, p_ in enumerate(perm):
                        stored[p_] = shape[i]
                    perm_s = ", ".join(map(str, perm))
                    expr = f"torch.randn({_dims(stored)}, {_F64}).permute({perm_s})"
                elif layout == "strided":
                    big = [shape[0] * 2] + shape[1:]
                    expr = f"torch.randn({_dims(big)}, {_F64})[::2]"
                elif layout == "offset":
                    big = [shape[0] + 1] + shape[1:]
                    expr = f"torch.randn({_dims(big)}, {_F64})[1:]"
                else:
                    expr = f"torch.randn({_dims(shape)}, {_F64})"
            self.params.append(p)
            self.inputs.append(expr)
            self._replay()
            self.kind[p] = "view" if self._owner(self.env[p]) is not None else "input"
            self.order.append(p)

    # -- picking -------------------------------------------------------------------------------

    def _pick(self, names: Sequence[str]) -> str:
        """Prefer recently defined names."""
        weights = [1.0 + i for i in range(len(names))]
        return self.rng.choices(list(names), weights=weights)[0]

    def _mutable(self) -> list[str]:
        return [
            v
            for v in self.order
            if len(_elems(self.t(v))) == self.t(v).numel()
            and (self.features.mutate_unfold_views or v not in self.unfolded)
        ]

    def _pick_mut(self, picked: list[str]) -> str:
        rng = self.rng
        pool = self._mutable()
        if picked and rng.random() < 0.45:
            other = rng.choice(picked)
            if rng.random() < 0.3:
                return other  # the same tensor twice
            st = _storage(self.t(other))
            same = [v for v in pool if _storage(self.t(v)) == st]
            if same:
                return rng.choice(same)
        return self._pick(pool)

    # -- statements ----------------------------------------------------------------------------

    def _buffer(self) -> bool:
        rng = self.rng
        src = self._pick(self.order)
        t = self.t(src)
        name = self._fresh("t")
        if rng.random() < 0.7:
            shape = list(t.shape)
        else:
            shape = [rng.randint(2, 6) for _ in range(rng.randint(1, 3))]
        numel = 1
        for s in shape:
            numel *= s
        choice = rng.choice(["mul1", "clone", "plus", "zeros", "arange", "big"])
        if choice == "mul1":
            text = f"{name} = {src} * 1"
        elif choice == "clone":
            text = f"{name} = {src}.clone()"
        elif choice == "plus":
            scalars = [v for v in self.order if self.t(v).dim() == 0]
            other = rng.choice(scalars) if scalars else "0.25"
            text = f"{name} = {src} + {other}"
        elif choice == "zeros":
            text = f"{name} = torch.zeros({_shape(shape)}, {_F64})"
        elif choice == "arange":
            text = f"{name} = torch.arange({numel}, {_F64}).view{_shape(shape)}"
        else:  # a flat allocation for as_strided / view to carve up
            text = f"{name} = torch.ones({numel * rng.choice([1, 2])}, {_F64})"
        return self._try(text, (name,), "buffer")

    def _view(self) -> bool:
        rng = self.rng
        views = [v for v in self.order if self.kind[v] in ("view",)]
        cands = list(self.order)
        src = self._pick(views) if views and rng.random() < 0.5 else self._pick(cands)
        t = self.t(src)
        d = t.dim()
        name = self._fresh("v")
        ops = ["unsqueeze", "as_strided", "view"]
        if d >= 1:
            ops += ["select", "slice", "slice", "narrow", "index", "split", "unfold"]
        if d >= 2:
            ops += ["transpose", "diagonal", "permute"]
        if any(s == 1 for s in t.shape):
            ops.append("squeeze")
        op = rng.choice(ops)
        shape = list(t.shape)
        dim = rng.randrange(d) if d else 0
        if op == "select":
            i = rng.randrange(-shape[dim], shape[dim])
            if dim == 0 and rng.random() < 0.5:
                text = f"{name} = {src}[{i}]"
            else:
                text = f"{name} = {src}.select({dim}, {i})"
        elif op in ("slice", "narrow"):
            n = shape[dim]
            start = rng.randrange(n)
            if op == "narrow":
                text = f"{name} = {src}.narrow({dim}, {start}, {rng.randint(1, n - start)})"
            else:
                stop = rng.randint(start + 1, n)
                step = rng.choice([1, 1, 2, 3])
                idx = ":, " * dim + f"{start}:{stop}" + (f":{step}" if step != 1 else "")
                text = f"{name} = {src}[{idx}]"
        elif op == "index":  # mixed basic indexing over the leading dims
            parts = []
            for k in range(rng.randint(1, d)):
                n = shape[k]
                r = rng.random()
                if r < 0.35:
                    parts.append(str(rng.randrange(n)))
                elif r < 0.7:
                    a = rng.randrange(n)
                    parts.append(f"{a}:{rng.randint(a + 1, n)}:{rng.choice([1, 2])}")
                else:
                    parts.append(":")
            if rng.random() < 0.2:
                parts.append("None")
            text = f"{name} = {src}[{', '.join(parts)}]"
        elif op == "transpose":
            d1, d2 = rng.sample(range(d), 2)
            if d == 2 and rng.random() < 0.4:
                text = f"{name} = {src}.t()"
            else:
                text = f"{name} = {src}.transpose({d1}, {d2})"
        elif op == "permute":
            perm = list(range(d))
            rng.shuffle(perm)
            text = f"{name} = {src}.permute({', '.join(map(str, perm))})"
        elif op == "unsqueeze":
            text = f"{name} = {src}.unsqueeze({rng.randint(-d - 1, d)})"
        elif op == "squeeze":
            k = rng.choice([i for i, s in enumerate(shape) if s == 1])
            text = f"{name} = {src}.squeeze({k})"
        elif op == "diagonal":
            d1, d2 = rng.sample(range(d), 2)
            off = rng.randint(-shape[d1] + 1, shape[d2] - 1)
            text = (
                f"{name} = {src}.diagonal()"
                if d == 2 and off == 0 and d1 == 0
                else f"{name} = {src}.diagonal({off}, {d1}, {d2})"
            )
        elif op == "unfold":
            n = shape[dim]
            if self.features.gappy_unfold:
                sz = rng.randint(1, n)
                step = rng.randint(sz, n)  # step >= size: windows do not overlap
            else:  # windows tile the dimension exactly
                sz = rng.choice([k for k in range(1, n + 1) if n % k == 0])
                step = sz
            text = f"{name} = {src}.unfold({dim}, {sz}, {step})"
        elif op == "split":
            n = shape[dim]
            if n < 2:
                return False
            k = rng.randint(1, n - 1)
            name2 = self._fresh("v")
            text = f"{name}, {name2} = {src}.split([{k}, {n - k}], {dim})"
            ok = self._try(text, (name, name2), "view")
            if ok and src in self.strided:
                self.strided.update((name, name2))
            if ok and src in self.unfolded:
                self.unfolded.update((name, name2))
            return ok
        elif op == "view":
            new = self._reshape_target(shape)
            if new is None:
                return False
            if t.is_contiguous() or rng.random() < 0.5:
                text = f"{name} = {src}.view{_shape(new)}"  # raises (and is dropped) if invalid
            else:
                text = f"{name} = {src}.reshape{_shape(new)}"  # may copy: then it is a buffer
        else:  # as_strided
            text = self._as_strided(src, name)
            if text is None:
                return False
        ok = self._try(text, (name,), "view", src)
        if ok and (op == "as_strided" or src in self.strided):
            self.strided.add(name)
        if ok and (op == "unfold" or src in self.unfolded):
            self.unfolded.add(name)
        return ok

    def _reshape_target(self, shape: list[int]) -> list[int] | None:
        rng = self.rng
        numel = 1
        for s in shape:
            numel *= s
        opts = [[numel]]
        for i in range(len(shape) - 1):
            opts.append(shape[:i] + [shape[i] * shape[i + 1]] + shape[i + 2 :])
        for i, s in enumerate(shape):
            for f in range(2, s):
                if s % f == 0:
                    opts.append(shape[:i] + [f, s // f] + shape[i + 1 :])
        if numel > 1:
            for f in range(2, numel):
                if numel % f == 0 and len(opts) < 12:
                    opts.append([f, numel // f])
        opts.append([1] + shape)
        return rng.choice(opts)

    def _as_strided(self, src: str, name: str) -> str | None:
        rng = self.rng
        t = self.t(src)
        owner_name = self._owner(t)
        owner = self.t(owner_name)
        if self.kind[owner_name] == "input":
            # A graph input that is a view (offset, holes) or aliases another input is rebased
            # by AOTAutograd, and as_strided then reaches outside it: PyTorch rejects that
            # ("setStorage ... out of bounds"), autofunc has nothing to do with it.
            if len(self.params) > 1 and any(self.kind[p] == "view" for p in self.params):
                return None
            nbytes = owner.untyped_storage().nbytes() // owner.element_size()
            if owner.storage_offset() != 0 or owner.numel() != nbytes:
                return None
        allowed = _elems(owner)
        lo, hi = min(allowed), max(allowed) + 1
        for _ in range(6):
            rank = rng.randint(1, 3)
            sizes = [rng.randint(1, 4) for _ in range(rank)]
            order = list(range(rank))
            rng.shuffle(order)
            strides = [0] * rank
            stride = rng.choice([1, 1, 2])
            for k in order:  # innermost first: each stride covers the dims inside it
                strides[k] = stride
                stride *= sizes[k] * rng.choice([1, 1, 2])
            span = span_extent(sizes, strides)
            if hi - span < lo:
                continue
            offset = rng.randint(lo, hi - span)
            if _geom_elems(sizes, strides, offset) <= allowed:
                return f"{name} = {src}.as_strided({list(sizes)}, {list(strides)}, {offset})"
        return None

    def _read(self) -> bool:
        rng = self.rng
        src = self._pick(self.order)
        t = self.t(src)
        name = self._fresh("r")
        k = rng.choice(["0.5", "1.5", "-2.0", "3.0"])
        same = [v for v in self.order if v != src and self.t(v).shape == t.shape]
        scalars = [v for v in self.order if self.t(v).dim() == 0]
        opts = ["sum", "sum", "copy", "amax"]
        if t.dim() >= 1:
            opts += ["sumdim", "cumsum"]
        if same:
            opts.append("product")
        if scalars:
            opts.append("plus")
        op = rng.choice(opts)
        if op == "sum":
            text = f"{name} = {src}.sum() * {k}"
        elif op == "copy":
            text = f"{name} = {src} * {k}"
        elif op == "amax":
            text = f"{name} = {src}.amax() + {src}.mean()"
        elif op == "sumdim":
            text = f"{name} = {src}.sum({rng.randrange(t.dim())}) * {k}"
        elif op == "cumsum":
            text = f"{name} = {src}.cumsum({rng.randrange(t.dim())})"
        elif op == "product":
            text = f"{name} = {src} * {rng.choice(same)}"
        else:
            text = f"{name} = ({src} + {rng.choice(scalars)}).sum()"
        return self._try(text, (name,), "read")

    def _inplace(self) -> bool:
        rng = self.rng
        # PyTorch bans aten mutations through as_strided views in compile (pytorch#104505).
        pool = [v for v in self._mutable() if v not in self.strided]
        if not pool:
            return False
        v = self._pick(pool)
        scalars = [s for s in self.order if self.t(s).dim() == 0 and s != v]
        if scalars and rng.random() < 0.5:
            text = f"{v}.add_({rng.choice(scalars)})"
        else:
            text = f"{v}.mul_({rng.choice(['0.5', '-1.0', '2.0'])})"
        return self._try(text, (), "inplace")

    def _call(self) -> bool:
        rng = self.rng
        op = rng.choices(
            ["m1", "m2", "m3", "mopt", "m3way", "mret", "mlate"], weights=[3, 3, 2, 1, 2, 2, 1]
        )[0]
        y = self._pick(self.order)
        if op in ("m1", "mret", "mopt", "mlate"):
            x = self._pick_mut([])
            if op == "mopt" and rng.random() < 0.3:
                x = "None"
            if op == "mlate":
                xe = _elems(self.t(x)), _storage(self.t(x))
                disjoint = [
                    v
                    for v in self.order
                    if _storage(self.t(v)) != xe[1] or not (_elems(self.t(v)) & xe[0])
                ]
                if not disjoint:
                    return False
                y = self._pick(disjoint)
            if op == "mret":
                name = self._fresh("o")
                return self._try(f"{name} = ops.mret({x}, {y})", (name,), "buffer")
            return self._try(f"ops.{op}({x}, {y})", (), "call")
        if op == "m3":
            xs: list[str] = []
            for _ in range(rng.choice([0, 1, 1, 2, 2, 3])):
                xs.append(self._pick_mut(xs))
            return self._try(f"ops.m3([{', '.join(xs)}], {y})", (), "call")
        picked: list[str] = []
        for _ in range(2 if op == "m2" else 3):
            picked.append(self._pick_mut(picked))
        args = picked + ([y] if op == "m2" else [])
        return self._try(f"ops.{op}({', '.join(args)})", (), "call")

    # -- driver --------------------------------------------------------------------------------

    def run(self) -> FuzzProgram:
        rng = self.rng
        self.env = {}
        self._make_inputs()
        kinds = [self._view, self._buffer, self._call, self._read, self._inplace]
        weights = [32, 12, 30, 20, 6]
        attempts = 0
        while len(self.stmts) < self.size and attempts < self.size * 8:
            attempts += 1
            rng.choices(kinds, weights=weights)[0]()
        for _ in range(20):
            if any(s.kind == "call" or "ops." in s.text for s in self.stmts):
                break
            self._call()
        tensors = list(self.order)
        nret = min(len(tensors), rng.randint(1, 4))
        weights = [3.0 if self.kind[v] in ("read", "buffer") else 1.0 for v in tensors]
        returns: list[str] = []
        for _ in range(nret):
            v = rng.choices(tensors, weights=weights)[0]
            if v not in returns:
                returns.append(v)
        return self._program(returns)


def generate(rng: random.Random, size: int, features: Features = Features()) -> FuzzProgram:
    """A random straight-line program of about ``size`` statements that runs in eager."""
    for _ in range(50):
        prog = _Gen(rng, size, features).run()
        if prog.runs_in_eager():
            return prog
    raise RuntimeError("could not generate a valid program")  # pragma: no cover


def program_for(
    seed: int, index: int, size: int | None = None, features: Features = Features()
) -> FuzzProgram:
    """The ``index``-th program of the sweep with ``seed`` (what the sweep and the tests use)."""
    rng = random.Random(seed * 1_000_003 + index)
    size = size if size is not None else rng.randint(4, 22)
    return dataclasses.replace(generate(rng, size, features), origin=f"seed={seed} index={index}")


# -- runner -------------------------------------------------------------------------------------


# Exceptions that are documented PyTorch limitations, not autofunc bugs: reported as
# ``kind="limitation"`` (counted by the sweep, never shrunk, not a test failure).
LIMITATIONS = (
    # v1 writes a clone back into the argument, i.e. mutates through the view chain; PyTorch's
    # functionalization refuses when that chain contains as_strided (pytorch#104505).
    (re.compile(r"as_strided\(\) is non-compositional"), "mutation through an as_strided view"),
)


@dataclasses.dataclass
class Failure:
    program: FuzzProgram
    strategy: str
    path: str
    kind: str  # "mismatch" | "exception" | "limitation" (see LIMITATIONS)
    message: str  # one line
    detail: str = ""  # the differing values, or the traceback's tail
    graphs: str = ""  # capture path: the functional and re-inplaced forward graphs

    @property
    def is_bug(self) -> bool:
        return self.kind != "limitation"

    @property
    def signature(self) -> tuple:
        """What "fails the same way" means while shrinking."""
        if self.kind == "mismatch":
            return ("mismatch",)
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


def _compile(fn: Callable, path: str) -> tuple[Callable, Any]:
    if path == "aot_eager":
        return torch.compile(fn, backend="aot_eager", fullgraph=True), None
    if path == "capture":
        from ..testing import compile_capture

        return compile_capture(fn, fullgraph=True)
    if path == "inductor":
        return torch.compile(fn, fullgraph=True), None
    raise ValueError(f"unknown path {path!r}; expected one of {PATHS}")


def _register(strategy: str) -> list:
    if strategy == "builtin":
        return []
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


def check(program: FuzzProgram, strategy: str, path: str) -> Failure | None:
    """Compile ``program`` on ``path`` with the fuzz ops registered with ``strategy`` and compare
    with eager: the outputs, and the final values of the inputs.

    Raises:
        EagerError: the program raises in eager (regenerate it; not a finding).
    """
    from ..testing import same_result

    expected, eager_inputs = program.run_eager()
    regs = _register(strategy)
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
        try:
            compiled, captured = _compile(prog, path)
            got = compiled(*inputs)
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


# -- shrinker -----------------------------------------------------------------------------------


def _without(program: FuzzProgram, drop: set[int]) -> FuzzProgram:
    """``program`` minus statements ``drop`` and everything that depends on what they define."""
    removed: set[str] = set()
    kept = []
    known = program.defined
    for i, s in enumerate(program.stmts):
        if i in drop or s.uses(known) & removed:
            removed.update(s.defs)
            continue
        kept.append(s)
    returns = tuple(r for r in program.returns if r not in removed)
    return dataclasses.replace(program, stmts=tuple(kept), returns=returns)


def _renamed(program: FuzzProgram, i: int) -> FuzzProgram | None:
    """Drop view statement ``i`` and use its source in its place."""
    s = program.stmts[i]
    if s.src is None or len(s.defs) != 1:
        return None
    old = s.defs[0]
    stmts = [t.rename(old, s.src) for t in program.stmts[i + 1 :]]
    returns = tuple(s.src if r == old else r for r in program.returns)
    returns = tuple(dict.fromkeys(returns))
    return dataclasses.replace(program, stmts=program.stmts[:i] + tuple(stmts), returns=returns)


def _drop_param(program: FuzzProgram, k: int) -> FuzzProgram | None:
    p = program.params[k]
    used = {n for s in program.stmts for n in s.uses(frozenset(program.params))}
    used |= set(program.returns)
    used |= {n for j, e in enumerate(program.inputs) if j != k for n in _NAME.findall(e)}
    if p in used:
        return None
    return dataclasses.replace(
        program,
        params=program.params[:k] + program.params[k + 1 :],
        inputs=program.inputs[:k] + program.inputs[k + 1 :],
    )


def _plain_inputs(program: FuzzProgram):
    """Each input in turn replaced by a contiguous tensor of the same shape (no aliasing)."""
    _, make_inputs = program.build()
    shapes = [tuple(t.shape) for t in make_inputs()]
    for k, expr in enumerate(program.inputs):
        plain = f"torch.randn({_dims(shapes[k]) if shapes[k] else '()'}, {_F64})"
        if expr != plain:
            inputs = program.inputs[:k] + (plain,) + program.inputs[k + 1 :]
            yield dataclasses.replace(program, inputs=inputs)


def _candidates(program: FuzzProgram):
    n = len(program.stmts)
    for i in reversed(range(n)):
        yield _without(program, {i})
    for i in reversed(range(n)):
        c = _renamed(program, i)
        if c is not None:
            yield c
    for j in range(len(program.returns)):
        yield dataclasses.replace(program, returns=program.returns[:j] + program.returns[j + 1 :])
    for k in reversed(range(len(program.params))):
        c = _drop_param(program, k)
        if c is not None:
            yield c
    yield from _plain_inputs(program)


def shrink(
    program: FuzzProgram,
    still_fails: Callable[[FuzzProgram], bool],
    *,
    max_checks: int = 400,
    log: Callable[[str], None] | None = None,
) -> FuzzProgram:
    """Greedily delete statements (and their dependents), inline views and drop returns and
    unused inputs while ``still_fails`` holds; candidates that do not run in eager are skipped.
    """
    checks = 0
    progress = True
    while progress and checks < max_checks:
        progress = False
        for cand in _candidates(program):
            if cand.full_source() == program.full_source() or not cand.runs_in_eager():
                continue
            checks += 1
            if still_fails(cand):
                if log:
                    log(f"shrink: {len(program.stmts)} -> {len(cand.stmts)} statements")
                program = cand
                progress = True
                break
            if checks >= max_checks:
                break
    return program


def shrink_failure(failure: Failure, *, max_checks: int = 400, log=None) -> Failure:
    """The smallest program found that still fails like ``failure``, with its failure."""
    last = {"f": failure}

    def still_fails(p: FuzzProgram) -> bool:
        try:
            f = check(p, failure.strategy, failure.path)
        except EagerError:
            return False
        if f is not None and f.signature == failure.signature:
            last["f"] = f
            return True
        return False

    small = shrink(failure.program, still_fails, max_checks=max_checks, log=log)
    f = last["f"]
    return f if f.program == small else (check(small, failure.strategy, failure.path) or f)


def triage(
    program: FuzzProgram,
    paths: Sequence[str] = ("aot_eager", "capture"),
    strategies: Sequence[str] = ("v1", "v2", "builtin"),
) -> dict[str, str]:
    """``"strategy/path" -> "ok" | the failure line`` on the given combinations."""
    out = {}
    for s in strategies:
        for p in paths:
            try:
                f = check(program, s, p)
            except EagerError as e:
                out[f"{s}/{p}"] = f"eager error {e}"
                continue
            out[f"{s}/{p}"] = "ok" if f is None else f"{f.kind}: {f.message}"
    return out


# -- reproducers --------------------------------------------------------------------------------

_REPRO = '''\
"""Minimal reproducer found by autofunc.bench.fuzz ({origin}).

strategy={strategy!r} path={path!r}: {kind}: {message}
{detail}
{triage}
Run: python {filename}   or   pytest {filename}
"""

import torch
import torch._functorch.config
import torch._inductor.config

import autofunc
import autofunc.bench.fuzz as fuzz  # defines the autofunc_fuzz ops (see their docstrings)
from autofunc.testing import compile_capture, same_result

ops = torch.ops.autofunc_fuzz
STRATEGY = {strategy!r}  # "builtin": the ops are left to PyTorch's auto_functionalized
PATH = {path!r}


{program}

def _compile(fn):
    if PATH == "aot_eager":
        return torch.compile(fn, backend="aot_eager", fullgraph=True)
    if PATH == "capture":  # AOTAutograd + autofunc.reinplace on the forward graph, no Inductor
        return compile_capture(fn, fullgraph=True)[0]
    return torch.compile(fn, fullgraph=True)


def test_repro():
    torch._dynamo.reset()
    eager_inputs = make_inputs()
    expected = prog(*eager_inputs)
    regs = []
    if STRATEGY != "builtin":
        regs = [autofunc.register(op, strategy=STRATEGY) for op in fuzz.OPS]
    try:
        inputs = make_inputs()
        # No compile caches: a cached artifact may come from another strategy.
        with torch._functorch.config.patch(enable_autograd_cache=False), \\
                torch._inductor.config.patch(fx_graph_cache=False):
            got = _compile(prog)(*inputs)
    finally:
        for r in regs:
            r.remove()
    for i, (e, g) in enumerate(zip(expected, got)):
        assert same_result(e, g), f"output {{i}}: eager {{e}} vs compiled {{g}}"
    for i, (e, g) in enumerate(zip(eager_inputs, inputs)):
        assert same_result(e, g), f"input {{i}} after the call: eager {{e}} vs compiled {{g}}"


if __name__ == "__main__":
    test_repro()
    print("passed")
{graphs}'''


def _repro_name(failure: Failure) -> str:
    key = f"{failure.program.full_source()}|{failure.strategy}|{failure.path}"
    return f"fuzz_repro_{hashlib.sha1(key.encode()).hexdigest()[:10]}.py"


def repro_source(failure: Failure, triage_result: dict[str, str] | None = None) -> str:
    name = _repro_name(failure)
    tri = ""
    if triage_result:
        rows = "\n".join(f"  {k}: {v}" for k, v in triage_result.items())
        tri = f"Same program elsewhere:\n{rows}\n"
    detail = failure.detail if failure.kind == "mismatch" else failure.detail.split("\n", 1)[0]
    if not detail.startswith(("raised at", "output", "input")):
        detail = ""
    graphs = ""
    if failure.graphs:
        graphs = "\n# " + "\n# ".join(failure.graphs.splitlines()) + "\n"
    return _REPRO.format(
        origin=failure.program.origin or "no origin",
        strategy=failure.strategy,
        path=failure.path,
        kind=failure.kind,
        message=failure.message.replace('"""', "'''"),
        detail=detail.replace('"""', "'''").replace("\\", "\\\\"),
        triage=tri,
        filename=name,
        program=failure.program.full_source(),
        graphs=graphs,
    )


def write_repro(
    failure: Failure, out_dir: str | Path, triage_result: dict[str, str] | None = None
) -> Path:
    """Write ``fuzz_repro_<hash>.py`` (hash of program, strategy and path) into ``out_dir``;
    returns its path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / _repro_name(failure)
    path.write_text(repro_source(failure, triage_result))
    return path
