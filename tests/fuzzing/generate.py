"""Building random programs: every statement is simulated on real tensors as it is chosen, so
shapes, view validity and memory overlap are exact and the program runs in eager by
construction."""

from __future__ import annotations

import dataclasses
import itertools
import random
from typing import Any, Sequence
import torch

from autofunc.symbolic import span_extent


from .ops import _NS
from .program import FuzzProgram, Stmt, _F64


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
