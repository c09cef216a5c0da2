"""The generator's state: the program so far, simulated on real tensors (every statement is
run as it is chosen and undone if it fails), its inputs, and how variables are picked."""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Sequence
from typing import Any

import torch

from .ops import _NS, REGIONS
from .program import _F64, FuzzProgram, Stmt


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
    failure points at autofunc; ``python -m tools.fuzz_sweep --features`` turns them on or off."""

    # ``b`` a view of ``a``: AOTAutograd's synthetic bases mis-replay views of a mutated input
    # ("incorrect out shape after application of ViewMeta sequence", wrong values), whatever
    # the strategy.
    aliased_inputs: bool = False
    # ``unfold`` whose windows leave gaps: functionalization's view inverse (unfold_backward)
    # zeroes the elements no window covers, so a native in-place op through it zeroes them;
    # autofunc's v1 hands such calls to v2 (Note [Writing back unfold views]), and native ops
    # never mutate unfold views here unless ``mutate_unfold_views``.
    gappy_unfold: bool = True
    # Graph inputs with a non-zero storage offset (``torch.randn(5, 4)[1:]``). On: they are the
    # commonest trigger of v2 view-regeneration failures; turn off to look past those.
    offset_inputs: bool = True
    # Mutating through ``unfold`` views: Inductor miscompiles the write-back (``unfold_backward``
    # of a transposed input): wrong values and heap corruption that kills the process (native
    # ``mul_`` too; autofunc's v1 writes back through the view, so it hits it).
    mutate_unfold_views: bool = False
    # Registered ops mutating ``unfold`` views (native in-place ops still do not, unless
    # ``mutate_unfold_views``): autofunc functionalizes such a v1 call with v2 (Note [Writing
    # back unfold views]); PyTorch's built-in v1 gives wrong values.
    unfold_call_args: bool = True
    # Calls of a ``nested_compile_region`` that writes its first argument (``regions.m1``),
    # often twice with one geometry so that it stays an ``invoke_subgraph``: PyTorch's
    # ``auto_functionalized_v2`` around it, which autofunc's ``hops/subgraph.py`` reads. Off
    # by default: PyTorch's own handling fails to compile such programs, and drawing them
    # changes every program of a seed.
    regions: bool = False
    # What serving and training code passes, drawn on top of the rest (each changes what a
    # seed draws; all four off, a seed draws the programs it drew before they existed):
    # ``over_reads``: calls whose read argument covers the memory they write, in any geometry
    # (the written tensor itself, its base, or an inline transpose/permute/view/int64-or-int32
    # dtype view of either: ``op(x, x)``, ``op(v, x)`` for ``v = x.t()``), the op reading it
    # before it writes;
    over_reads: bool = True
    # ``late_reads``: such read arguments given to ops that read *after* they write (``mlate``,
    # ``mlate2``, ``mlret``), where eager sees the new values;
    late_reads: bool = True
    # ``cache_ops``: ``index_put_`` into a cache (``mcache``, rows possibly of the cache itself),
    # list and optional read arguments (``mlist``, ``moptr``);
    cache_ops: bool = True
    # ``returned_views``: views of buffers the calls used, made after them and returned.
    returned_views: bool = True

    @classmethod
    def as_drawn_before(cls, **changes: bool) -> Features:
        """The features before those for serving and training code were added: a seed draws
        the programs it drew then (the seeds results/README.md lists before 20261401, the
        programs tests pin by seed and index); ``changes`` as keyword arguments."""
        off = dict(over_reads=False, late_reads=False, cache_ops=False, returned_views=False)
        return cls(**{**off, **changes})


class _State:
    """The program being built and its simulation; statement makers build on it."""

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
        self.called: list[str] = []  # variables a registered op was given (returned_views)

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
        self.env = {"torch": torch, "ops": getattr(torch.ops, _NS), "regions": REGIONS}
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
        if "ops." in text:
            self.called += Stmt(text, defs, kind).uses_in_order(set(self.order))
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

    def _mutable(self, call: bool = False) -> list[str]:
        """Variables a statement may write: an in-place aten op, or (``call``) a registered op."""
        unfold_ok = self.features.mutate_unfold_views or (call and self.features.unfold_call_args)
        return [
            v
            for v in self.order
            if len(_elems(self.t(v))) == self.t(v).numel()
            and (unfold_ok or v not in self.unfolded)
        ]

    def _pick_mut(self, picked: list[str]) -> str:
        rng = self.rng
        pool = self._mutable(call=True)
        if picked and rng.random() < 0.45:
            other = rng.choice(picked)
            if rng.random() < 0.3:
                return other  # the same tensor twice
            st = _storage(self.t(other))
            same = [v for v in pool if _storage(self.t(v)) == st]
            if same:
                return rng.choice(same)
        return self._pick(pool)
