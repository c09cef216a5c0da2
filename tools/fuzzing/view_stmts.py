"""The generator's view statements: slices, selects, permutes, reshapes, dtype-free views of
any variable, and ``as_strided`` views kept inside their owner's elements."""

from __future__ import annotations

from autofunc.symbolic import span_extent

from .state import _elems, _geom_elems, _shape, _State


class _Views(_State):
    """Statement makers that define a new view of an existing variable."""

    def _view(self, src: str | None = None) -> bool:
        """A view statement of ``src`` (default: a variable drawn, views first)."""
        rng = self.rng
        if src is None:
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
