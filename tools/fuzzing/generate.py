"""Building random programs: every statement is simulated on real tensors as it is chosen, so
shapes, view validity and memory overlap are exact and the program runs in eager by
construction. The generator is split by concern: ``state`` (the program and its simulation,
inputs, picking), ``view_stmts`` (view statements), and here the buffers, reads, in-place ops,
op calls and the driver."""

from __future__ import annotations

import dataclasses
import random

from .program import _F64, FuzzProgram
from .state import Features, _elems, _shape, _storage
from .view_stmts import _Views

__all__ = ["Features", "generate", "program_for"]


class _Gen(_Views):
    """Chooses statements until the program has its size (``run``)."""

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
        # Not a scalar that is one of v's own elements: eager reads it while the op writes v,
        # so its result depends on the kernel's order ("inplace with aliasing arguments"), which
        # no functional program reproduces (the built-in differs too; seed 20261209 #211).
        scalars = [s for s in self.order if self.t(s).dim() == 0 and not self._overlaps(s, v)]
        if scalars and rng.random() < 0.5:
            text = f"{v}.add_({rng.choice(scalars)})"
        else:
            text = f"{v}.mul_({rng.choice(['0.5', '-1.0', '2.0'])})"
        return self._try(text, (), "inplace")

    def _overlaps(self, a: str, b: str) -> bool:
        ta, tb = self.t(a), self.t(b)
        return _storage(ta) == _storage(tb) and bool(_elems(ta) & _elems(tb))

    def _region(self) -> bool:
        """``r = regions.m1(x, y)``, and often a second call on a tensor of ``x``'s geometry
        (the region's inputs may not share a storage: Dynamo refuses aliasing inputs)."""
        rng = self.rng
        x = self._pick(self._mutable(call=True))
        tx = self.t(x)
        others = [v for v in self.order if _storage(self.t(v)) != _storage(tx)]
        if not others:
            return False
        y = self._pick(others)
        name = self._fresh("g")
        if not self._try(f"{name} = regions.m1({x}, {y})", (name,), "buffer"):
            return False
        twins = [
            v
            for v in self._mutable(call=True)
            if v != x
            and _storage(self.t(v)) != _storage(self.t(y))
            and self.t(v).shape == tx.shape
            and self.t(v).stride() == tx.stride()
        ]
        if twins and rng.random() < 0.7:
            again = self._fresh("g")
            self._try(f"{again} = regions.m1({rng.choice(twins)}, {y})", (again,), "buffer")
        return True

    def _call(self) -> bool:
        rng = self.rng
        ops, weights = ["m1", "m2", "m3", "mopt", "m3way", "mret", "mlate"], [3, 3, 2, 1, 2, 2, 1]
        if self.features.regions:
            ops, weights = [*ops, "region"], [*weights, 4]
        if self.features.over_reads or self.features.late_reads:
            ops, weights = [*ops, "over"], [*weights, 10]
        if self.features.cache_ops:
            ops, weights = [*ops, "mcache", "mlist", "moptr"], [*weights, 3, 2, 1]
        op = rng.choices(ops, weights=weights)[0]
        if op == "region":
            return self._region()
        if op == "over":
            return self._over_call()
        if op == "mcache":
            return self._cache()
        if op in ("mlist", "moptr"):
            return self._read_list(op)
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

    # -- what serving and training code passes (Features.over_reads, late_reads, cache_ops) ----

    def _over(self, x: str) -> str:
        """A read argument over ``x``'s memory: ``x`` itself, a variable overlapping it (its
        base, a view of it), or an inline transpose/permute/view/dtype view of one of those."""
        rng = self.rng
        near = [v for v in self.order if v != x and self._overlaps(v, x)]
        base = x if not near or rng.random() < 0.5 else self._pick(near)
        t = self.t(base)
        forms = ["itself", "itself", "view", "flat", "int64"]
        if t.dim() >= 2:
            forms += ["transpose", "transpose", "permute"]
        if t.dim() >= 1 and t.stride(-1) == 1 and t.shape[-1] % 2 == 0:
            forms.append("int32")
        form = rng.choice(forms)
        if form == "transpose":
            d1, d2 = rng.sample(range(t.dim()), 2)
            expr = f"{base}.t()" if t.dim() == 2 else f"{base}.transpose({d1}, {d2})"
        elif form == "permute":
            perm = list(range(t.dim()))
            while perm == sorted(perm):
                rng.shuffle(perm)
            expr = f"{base}.permute({', '.join(map(str, perm))})"
        elif form == "view":
            new = self._reshape_target(list(t.shape))
            expr = base if new is None else f"{base}.view{_shape(new)}"
        elif form == "flat":
            expr = f"{base}.flatten()"
        elif form in ("int64", "int32"):
            expr = f"{base}.view(torch.{form})"
        else:
            expr = base
        try:  # views only: evaluating one changes nothing
            eval(expr, self.env)
        except Exception:  # noqa: BLE001 - not a valid view of this layout: the tensor itself
            expr = base
        return expr

    def _over_call(self) -> bool:
        """A registered op given a read argument over the memory it writes (``op(x, x.t())``,
        ``mlret(x.view(4, 8), x)``), ops that read after they write among them."""
        rng = self.rng
        ops = ["m1", "mret", "m2"] if self.features.over_reads else []
        ops += ["mlate", "mlate2", "mlret", "mlret"] if self.features.late_reads else []
        op = rng.choice(ops)
        x = self._pick_mut([])
        y = self._over(x)
        if op == "m2":
            b = self._pick_mut([x])
            return self._try(f"ops.m2({x}, {b}, {y})", (), "call")
        if op in ("mret", "mlret"):
            name = self._fresh("o")
            return self._try(f"{name} = ops.{op}({x}, {y})", (name,), "buffer")
        return self._try(f"ops.{op}({x}, {y})", (), "call")

    def _cache(self) -> bool:
        """``ops.mcache(cache, rows, torch.tensor([...]))``: ``index_put_`` of rows into distinct
        slots of a cache; rows of the slots' shape where one exists (the cache's own rows
        among them), else any tensor (the op writes its mean)."""
        rng = self.rng
        pool = [v for v in self._mutable(call=True) if self.t(v).dim() >= 1]
        if not pool:
            return False
        cache = self._pick(pool)
        shape = list(self.t(cache).shape)
        n = shape[0]
        k = rng.randint(1, min(n, 3))
        slots = [i - n if rng.random() < 0.2 else i for i in rng.sample(range(n), k)]
        fits = [v for v in self.order if list(self.t(v).shape) == [k, *shape[1:]]]
        if rng.random() < 0.3 and self.features.over_reads:
            start = rng.randint(0, n - k)
            rows = f"{cache}[{start}:{start + k}]"
        elif fits and rng.random() < 0.7:
            rows = self._pick(fits)
        else:
            rows = self._pick(self.order)
        return self._try(f"ops.mcache({cache}, {rows}, torch.tensor({slots}))", (), "call")

    def _read_list(self, op: str) -> bool:
        """``ops.mlist(x, [y, ...])`` or ``ops.moptr(x, y | None)``, reads over ``x`` too."""
        rng = self.rng
        x = self._pick_mut([])
        reads = [
            self._over(x) if rng.random() < 0.4 and self.features.over_reads
            else self._pick(self.order)
            for _ in range(rng.choice([0, 1, 2, 3]) if op == "mlist" else 1)
        ]
        if op == "moptr":
            arg = "None" if rng.random() < 0.3 else reads[0]
            return self._try(f"ops.moptr({x}, {arg})", (), "call")
        return self._try(f"ops.mlist({x}, [{', '.join(reads)}])", (), "call")

    def _returned_views(self, returns: list[str]) -> None:
        """Views of buffers the calls used, made after them and returned (Features.
        returned_views); sometimes read as well."""
        rng = self.rng
        for _ in range(rng.choice([0, 1, 1, 2])):
            used = [v for v in dict.fromkeys(self.called) if v in self.env]
            if not used:
                return
            src = self._pick(used)
            if not self._view(src):
                continue
            view = self.order[-1]
            if rng.random() < 0.3:
                self._read_of(view)
            if view not in returns:
                returns.append(view)
            if rng.random() < 0.3 and src not in returns:
                returns.append(src)

    def _read_of(self, src: str) -> bool:
        name = self._fresh("r")
        return self._try(f"{name} = {src}.sum() * 0.5", (name,), "read")

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
        if self.features.returned_views:
            self._returned_views(returns)
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
