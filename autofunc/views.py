"""View-chain inference: regenerate a view of a base tensor with standard view ops.

This module owns the ``ViewChain`` data model (``Select`` / ``Slice`` / ``DtypeView`` /
``AsStrided`` steps), the inference of the cheapest chain that reproduces a view geometry
*exactly* from its base geometry (across dtypes too, in bytes), and the HOP-kwargs wire format
(``encode_chain`` / ``read_chain`` / ``decode_chain``).  It is pure arithmetic on sizes, strides
and offsets (ints or ``torch.SymInt``): it must not import HOP, FX-graph or Inductor modules, and
it never installs guards (only ``statically_known_true`` decisions).
"""

from __future__ import annotations

import logging

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from .errors import MalformedViewsError
from .symbolic import cached_when_static
from .symbolic import known as _known

log = logging.getLogger("autofunc.views")


__all__ = [
    "IntLike",
    "Select",
    "Slice",
    "AsStrided",
    "DtypeView",
    "Step",
    "ViewChain",
    "infer_view",
    "infer_view_of",
    "infer_dtype_view",
    "dtype_view_geometry",
    "encode_chain",
    "decode_chain",
    "read_chain",
]

IntLike = int | torch.SymInt

# Upper bound on nodes visited while decomposing an offset (keeps pathological bases cheap).
_SEARCH_BUDGET = 20_000


@dataclass(frozen=True)
class Select:
    """``aten.select.int(t, dim, index)``: drops ``dim``."""

    dim: int
    index: IntLike


@dataclass(frozen=True)
class Slice:
    """``aten.slice.Tensor(t, dim, start, stop, step)``."""

    dim: int
    start: IntLike
    stop: IntLike
    step: int = 1


@dataclass(frozen=True)
class AsStrided:
    """``aten.as_strided.default(t, size, stride, storage_offset)``: the last resort.

    The offset is absolute (counted from the start of the storage, like
    ``Tensor.storage_offset()``) in a chain applied to the tensor it was inferred from. The
    chains a HOP carries (``hops.v2.ArgView``, ``hops.adapter.Slot``) count it from their base's
    own offset instead (Note [Relative chains] in hops/adapter.py); ``ViewChain.shifted``
    converts one into the other.
    """

    size: tuple[IntLike, ...]
    stride: tuple[IntLike, ...]
    storage_offset: IntLike

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", tuple(self.size))
        object.__setattr__(self, "stride", tuple(self.stride))


@dataclass(frozen=True)
class DtypeView:
    """``aten.view.dtype(t, dtype)``: the same bytes read as ``dtype``.

    Note [Dtype views]
    With the same element size the geometry is unchanged. Otherwise (ATen's rule) the last dim
    must have stride 1 and is rescaled by the ratio of element sizes, as are the other strides
    and the storage offset (a narrower dtype multiplies them, a wider one divides them, which must
    be exact). Geometry is therefore measured in elements of the *current* dtype: a chain's
    ``geometry`` needs the base's element size once a step changes it.
    """

    dtype: torch.dtype


Step = Select | Slice | AsStrided | DtypeView


class _Geom(NamedTuple):
    size: tuple[IntLike, ...]
    stride: tuple[IntLike, ...]
    offset: IntLike


# --------------------------------------------------------------------------------------------
# Guard-free arithmetic helpers
# --------------------------------------------------------------------------------------------


def _as_int(x) -> int | None:
    """``x`` as a Python int when it is one (or a constant SymInt), else ``None``."""
    if isinstance(x, int):
        return x
    if isinstance(x, torch.SymInt):
        return x.node.maybe_as_int()
    return None


def _hint(x: IntLike) -> int | None:
    """The example value of ``x`` (steers searches only; never used without verification)."""
    if isinstance(x, int):
        return x
    node = x.node
    return node.hint if node.has_hint() else None


def _simplify(x: IntLike) -> IntLike:
    """Turn constant SymInts into plain ints (keeps chains and wire tuples readable)."""
    value = _as_int(x)
    return x if value is None else value


def _all_known_eq(xs: Sequence[IntLike], ys: Sequence[IntLike]) -> bool:
    return len(xs) == len(ys) and all(_known(x == y) for x, y in zip(xs, ys))


def _wrap_index(index: IntLike, n: IntLike) -> IntLike:
    if isinstance(index, int) and isinstance(n, int) and index < 0:
        return index + n
    return index


def _slice_start_len(step: Slice, n: IntLike) -> tuple[IntLike, IntLike]:
    """(start, length) of ``aten.slice`` on a dim of size ``n`` (clamped like ATen for ints)."""
    start, stop, k = step.start, step.stop, step.step
    if all(isinstance(v, int) for v in (start, stop, n)):
        start = min(max(start + n if start < 0 else start, 0), n)
        stop = min(max(stop + n if stop < 0 else stop, start), n)
    return start, (stop - start + k - 1) // k


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------


def _fmt_call(step: Step) -> str:
    if isinstance(step, DtypeView):
        return f"view({step.dtype})"
    if isinstance(step, Select):
        return f"select({step.dim}, {step.index})"
    if isinstance(step, Slice):
        return f"slice({step.dim}, {step.start}, {step.stop}, {step.step})"
    return f"as_strided({tuple(step.size)}, {tuple(step.stride)}, {step.storage_offset})"


def _fmt_index(step: Select | Slice) -> str:
    if isinstance(step, Select):
        return str(step.index)
    start = "" if _as_int(step.start) == 0 else str(step.start)
    text = f"{start}:{step.stop}"
    return text if step.step == 1 else f"{text}:{step.step}"


def _render(steps: Sequence[Step]) -> str:
    """Merge runs of select/slice on distinct dims into one subscript; join runs with ' -> '."""
    dims = (s.dim for s in steps if isinstance(s, (Select, Slice)))
    width = len(steps) + 1 + max(dims, default=0)
    parts: list[str] = []
    entries: dict[int, str] = {}  # original dim (at the run's input) -> subscript entry
    alive: list[int] = list(range(width))  # current dim -> original dim

    def flush() -> None:
        if entries:
            items = (entries.get(d, ":") for d in range(max(entries) + 1))
            parts.append("[" + ", ".join(items) + "]")
        entries.clear()
        alive[:] = range(width)

    for step in steps:
        if isinstance(step, (AsStrided, DtypeView)) or step.dim < 0:
            flush()
            parts.append(_fmt_call(step))
            continue
        if alive[step.dim] in entries:
            flush()
        entries[alive[step.dim]] = _fmt_index(step)
        if isinstance(step, Select):
            del alive[step.dim]
    flush()
    return " -> ".join(parts)


# --------------------------------------------------------------------------------------------
# ViewChain
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ViewChain:
    """Steps that regenerate a view from its base, applied in order; ``()`` is the base itself."""

    steps: tuple[Step, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))

    @property
    def is_alias(self) -> bool:
        """Whether the view is the base itself (no step)."""
        return not self.steps

    @property
    def uses_as_strided(self) -> bool:
        """Whether any step is an ``as_strided`` (the last-resort fallback)."""
        return any(isinstance(step, AsStrided) for step in self.steps)

    def shifted(self, delta: IntLike) -> "ViewChain":
        """The chain with every ``AsStrided`` offset moved by ``delta`` elements: a chain
        relative to a base's own offset, shifted by that offset, is absolute (and back with
        ``-offset``). Other steps do not depend on the offset."""
        if not self.uses_as_strided:
            return self
        steps = tuple(
            AsStrided(s.size, s.stride, s.storage_offset + delta) if isinstance(s, AsStrided) else s
            for s in self.steps
        )
        return ViewChain(steps)

    def apply(self, base: torch.Tensor) -> torch.Tensor:
        """Applies the steps to ``base`` with ATen view ops.

        Args:
            base: The tensor (real, fake or proxy-traced) the chain was inferred against.

        Returns:
            ``base`` itself for an alias chain, else a view sharing ``base``'s storage.
        """
        out = base
        for step in self.steps:
            if isinstance(step, Select):
                out = torch.ops.aten.select.int(out, step.dim, step.index)
            elif isinstance(step, Slice):
                out = torch.ops.aten.slice.Tensor(out, step.dim, step.start, step.stop, step.step)
            elif isinstance(step, DtypeView):
                out = torch.ops.aten.view.dtype(out, step.dtype)
            else:
                size, stride = list(step.size), list(step.stride)
                out = torch.ops.aten.as_strided.default(out, size, stride, step.storage_offset)
        return out

    def geometry(
        self,
        size: Sequence[IntLike],
        stride: Sequence[IntLike],
        storage_offset: IntLike,
        itemsize: int | None = None,
    ) -> tuple[tuple[IntLike, ...], tuple[IntLike, ...], IntLike]:
        """Pure arithmetic: the geometry obtained by applying the chain to a base geometry.

        Int start/stop/index values are normalized and clamped like ATen does; symbolic ones
        are assumed in range (as ``infer_view`` guarantees).

        Args:
            size: Base sizes.
            stride: Base strides (elements).
            storage_offset: Base storage offset (elements).
            itemsize: The base's element size in bytes; needed when the chain has a
                ``DtypeView`` step (Note [Dtype views]).

        Returns:
            ``(size, stride, storage_offset)`` of the resulting view, in elements of
            ``self.dtype(base dtype)``.

        Raises:
            ValueError: If the chain has a ``DtypeView`` and ``itemsize`` is not given, or the
                geometry does not allow that dtype view.
        """
        sizes, strides, offset = list(size), list(stride), storage_offset
        for step in self.steps:
            if isinstance(step, DtypeView):
                if itemsize is None:
                    raise ValueError(f"{self}: the base's element size is needed")
                geom = _rescale(
                    _Geom(tuple(sizes), tuple(strides), offset), itemsize, step.dtype.itemsize
                )
                if geom is None:
                    raise ValueError(f"{self}: view({step.dtype}) is not valid here")
                sizes, strides, offset = list(geom.size), list(geom.stride), geom.offset
                itemsize = step.dtype.itemsize
                continue
            if isinstance(step, AsStrided):
                sizes, strides = list(step.size), list(step.stride)
                offset = step.storage_offset
                continue
            dim = step.dim + len(sizes) if step.dim < 0 else step.dim
            if isinstance(step, Select):
                offset = offset + _wrap_index(step.index, sizes[dim]) * strides[dim]
                del sizes[dim], strides[dim]
            else:
                start, length = _slice_start_len(step, sizes[dim])
                offset = offset + start * strides[dim]
                sizes[dim], strides[dim] = length, strides[dim] * step.step
        return tuple(sizes), tuple(strides), offset

    def dtype(self, base_dtype: torch.dtype) -> torch.dtype:
        """The dtype of the view the chain makes from a base of ``base_dtype``."""
        return next(
            (s.dtype for s in reversed(self.steps) if isinstance(s, DtypeView)), base_dtype
        )

    def __str__(self) -> str:
        return "alias" if not self.steps else _render(self.steps)


def dtype_view_geometry(
    size: Sequence[IntLike], stride: Sequence[IntLike], offset: IntLike, old: int, new: int
) -> tuple[tuple, tuple, IntLike] | None:
    """The geometry ``view(dtype)`` gives a tensor, in elements of ``new`` bytes.

    Args:
        size: Sizes of the tensor.
        stride: Its strides, in elements of ``old`` bytes.
        offset: Its storage offset, in elements of ``old`` bytes.
        old: Its element size in bytes.
        new: The element size of the dtype it is viewed as.

    Returns:
        ``(size, stride, offset)``, or ``None`` where ATen would refuse the dtype view or it
        cannot be proven allowed without a guard (Note [Dtype views]).
    """
    geom = _rescale(_Geom(tuple(size), tuple(stride), offset), old, new)
    return None if geom is None else tuple(geom)


def _rescale(geom: "_Geom", old: int, new: int) -> "_Geom | None":
    """``geom`` (in elements of ``old`` bytes) as seen by ``view(dtype)`` of ``new`` bytes, or
    ``None`` where ATen would refuse it or it cannot be proven allowed (Note [Dtype views])."""
    if old == new:
        return geom
    if not geom.size or not _known(geom.stride[-1] == 1):
        return None
    size, stride = list(geom.size), list(geom.stride)
    if new < old:
        if old % new:
            return None
        r = old // new
        size[-1] = _simplify(size[-1] * r)
        stride = [_simplify(s * r) for s in stride[:-1]] + [1]
        return _Geom(tuple(size), tuple(stride), _simplify(geom.offset * r))
    if new % old:
        return None
    r = new // old
    if not all(_known(x % r == 0) for x in (size[-1], geom.offset, *stride[:-1])):
        return None
    size[-1] = _simplify(size[-1] // r)
    stride = [_simplify(s // r) for s in stride[:-1]] + [1]
    return _Geom(tuple(size), tuple(stride), _simplify(geom.offset // r))


# --------------------------------------------------------------------------------------------
# Inference
# --------------------------------------------------------------------------------------------


def _kept_step(bsize: IntLike, bstride: IntLike, vsize: IntLike, vstride: IntLike) -> int | None:
    """The slice step mapping a base dim onto a view dim, or ``None`` if impossible/unknown."""
    if isinstance(bstride, int) and isinstance(vstride, int):
        if bstride == 0:
            step = 1 if vstride == 0 else None
        else:
            step = vstride // bstride if vstride % bstride == 0 else None
    elif _known(vstride == bstride):
        step = 1
    elif _known(bstride == 0) or not _known(bstride > 0):
        step = None
    else:
        step = _as_int(vstride // bstride)
        step = step if step is not None and _known(step * bstride == vstride) else None
    if step is None or step < 1:
        return None
    if step == 1 and _known(vsize == bsize):
        return step  # the whole dim, even one that may be empty (an unbacked size)
    if not (_known(vsize >= 1) and _known((vsize - 1) * step <= bsize - 1)):
        return None
    return step


Matching = tuple[tuple[int, int], ...]  # per view dim: (base dim, slice step)


def _matchings(base: _Geom, view: _Geom, budget: list[int]) -> list[Matching]:
    """All order-preserving maps of view dims onto base dims with compatible strides."""
    out: list[Matching] = []
    _extend_matchings(base, view, budget, 0, 0, [], out)
    return out


def _extend_matchings(
    base: _Geom, view: _Geom, budget: list[int], j: int, first: int, acc: list, out: list
) -> None:
    """Depth-first step of ``_matchings``: view dim ``j`` onto base dims from ``first`` on.
    (A module function, not a closure: a recursive closure is a reference cycle, garbage the
    cyclic GC must find, and this runs for every view the pass or a HOP infers.)"""
    nb, nv = len(base.size), len(view.size)
    if j == nv:
        out.append(tuple(acc))
        return
    for i in range(first, nb - (nv - j) + 1):
        budget[0] -= 1
        if budget[0] < 0:
            return
        step = _kept_step(base.size[i], base.stride[i], view.size[j], view.stride[j])
        if step is not None:
            acc.append((i, step))
            _extend_matchings(base, view, budget, j + 1, i + 1, acc, out)
            acc.pop()


def _is_full(base: _Geom, view: _Geom, i: int, j: int, step: int) -> bool:
    return step == 1 and _known(view.size[j] == base.size[i])


def _cost(base: _Geom, view: _Geom, match: Matching) -> int:
    slices = sum(not _is_full(base, view, i, j, k) for j, (i, k) in enumerate(match))
    return len(base.size) - len(view.size) + slices


def _terms(base: _Geom, view: _Geom, match: Matching) -> list[tuple[int, IntLike, IntLike]] | None:
    """Per base dim: (dim, stride, max coefficient) for the offset decomposition."""
    kept = {i: (j, k) for j, (i, k) in enumerate(match)}
    terms = []
    for i, (n, s) in enumerate(zip(base.size, base.stride)):
        j, k = kept.get(i, (None, 1))
        hi = n - 1 if j is None else n - 1 - (view.size[j] - 1) * k
        if not _known(hi >= 0):
            return None
        terms.append((i, s, hi))
    return terms


def _solve_static(terms: list, delta: int, budget: list[int]) -> dict[int, int] | None:
    """Exact bounded decomposition ``delta = sum c_i * s_i`` (0 <= c_i <= hi_i), all ints."""
    terms = sorted(terms, key=_neg_stride)
    reach = [0] * (len(terms) + 1)  # reach[k]: largest sum the terms k.. can produce
    for k in reversed(range(len(terms))):
        reach[k] = reach[k + 1] + terms[k][1] * terms[k][2]
    coeffs: dict[int, int] = {}
    return coeffs if _decompose(terms, reach, coeffs, budget, 0, delta) else None


def _neg_stride(term: tuple) -> int:
    return -term[1]


def _decompose(
    terms: list, reach: list[int], coeffs: dict[int, int], budget: list[int], k: int, rem: int
) -> bool:
    """Depth-first step of ``_solve_static`` (a module function for the reason given in
    ``_extend_matchings``): coefficients of the terms ``k..`` summing to ``rem``."""
    budget[0] -= 1
    if budget[0] < 0 or rem < 0 or rem > reach[k]:
        return False
    if k == len(terms):
        return rem == 0
    dim, s, hi = terms[k]
    if s == 0:
        coeffs[dim] = 0
        return _decompose(terms, reach, coeffs, budget, k + 1, rem)
    lo = max(0, -((reach[k + 1] - rem) // s))
    for c in range(min(hi, rem // s), lo - 1, -1):
        coeffs[dim] = c
        if _decompose(terms, reach, coeffs, budget, k + 1, rem - c * s):
            return True
    return False


def _stride_order(a: tuple, b: tuple) -> int:
    return -1 if _known(a[1] > b[1]) else (1 if _known(a[1] < b[1]) else 0)


def _solve_symbolic(terms: list, delta: IntLike) -> dict[int, IntLike] | None:
    """Greedy decomposition by decreasing stride; every decision must be statically known."""
    coeffs: dict[int, IntLike] = {}
    rem = delta
    for dim, s, hi in sorted(terms, key=functools.cmp_to_key(_stride_order)):
        if _known(s == 0):
            c = 0
        elif _known(s > 0):
            c = _simplify(rem // s)
        else:
            return None
        if not (_known(c >= 0) and _known(c <= hi)):
            return None
        coeffs[dim] = c
        rem = rem - c * s
    return coeffs if _known(rem == 0) else None


def _solve_hinted(terms: list, delta: IntLike, budget: list[int]) -> dict[int, int] | None:
    """Int coefficients found on the example values, kept only if provably in bounds."""
    hinted = [(dim, _hint(s), _hint(hi)) for dim, s, hi in terms]
    delta_hint = _hint(delta)
    if delta_hint is None or any(s is None or hi is None for _, s, hi in hinted):
        return None
    coeffs = _solve_static(hinted, delta_hint, budget)
    if coeffs is None or not all(_known(coeffs[dim] <= hi) for dim, _, hi in terms):
        return None
    return coeffs


def _solve(terms: list, delta: IntLike, budget: list[int]) -> dict[int, IntLike] | None:
    """Offset decomposition: exhaustive for ints, greedy then example-guided for SymInts."""
    values = [delta] + [v for _, s, hi in terms for v in (s, hi)]
    if all(isinstance(v, int) for v in values):
        return _solve_static(terms, delta, budget)
    coeffs = _solve_symbolic(terms, delta)
    return coeffs if coeffs is not None else _solve_hinted(terms, delta, budget)


def _slice_stop(start: IntLike, length: IntLike, step: int, n: IntLike) -> IntLike:
    """``min(start + length * step, n)``; either bound yields the exact length."""
    end = start + length * step
    if _known(end <= n):
        return _simplify(end)
    return n if _known(end >= n) else _simplify(end)


def _build_chain(base: _Geom, view: _Geom, match: Matching, coeffs: dict) -> ViewChain:
    """Steps in application order, ascending base dims, dims relative to the current tensor."""
    kept = {i: (j, k) for j, (i, k) in enumerate(match)}
    steps: list[Step] = []
    removed = 0
    for i in range(len(base.size)):
        c, cur = _simplify(coeffs[i]), i - removed
        if i not in kept:
            steps.append(Select(cur, c))
            removed += 1
        elif not _is_full(base, view, i, *kept[i]):
            j, k = kept[i]
            steps.append(Slice(cur, c, _slice_stop(c, view.size[j], k, base.size[i]), k))
    return ViewChain(tuple(steps))


def _same_geometry(a: _Geom, b: _Geom) -> bool:
    return (
        _all_known_eq(a.size, b.size)
        and _all_known_eq(a.stride, b.stride)
        and _known(a.offset == b.offset)
    )


def _reproduces(chain: ViewChain, base: _Geom, view: _Geom) -> bool:
    return _same_geometry(_Geom(*chain.geometry(*base)), view)


def _search(base: _Geom, view: _Geom) -> ViewChain | None:
    """Cheapest verified select/slice chain, or ``None``."""
    delta = view.offset - base.offset
    if len(view.size) > len(base.size) or not _known(delta >= 0):
        return None
    if any(_known(s < 0) for s in base.stride):  # not a PyTorch geometry
        return None
    budget = [_SEARCH_BUDGET]
    matches = _matchings(base, view, budget)
    matches.sort(key=lambda m: (_cost(base, view, m), [i for i, _ in m]))
    for match in matches:
        terms = _terms(base, view, match)
        if terms is None:
            continue
        coeffs = _solve(terms, delta, budget)
        if coeffs is not None:
            chain = _build_chain(base, view, match, coeffs)
            if _reproduces(chain, base, view):
                return chain
        if budget[0] < 0:
            return None
    return None


def infer_view(
    base_size: Sequence[IntLike],
    base_stride: Sequence[IntLike],
    base_offset: IntLike,
    size: Sequence[IntLike],
    stride: Sequence[IntLike],
    offset: IntLike,
) -> ViewChain:
    """Infers the cheapest chain of view ops regenerating a view geometry from a base geometry.

    Tries, in order: alias (identical geometry), the select/slice chain with the fewest steps,
    and finally a single ``AsStrided`` step. Every decision on symbolic values is taken with
    ``statically_known_true`` (no guard is installed); anything undecidable falls back to
    ``AsStrided``. The returned chain reproduces size, stride and offset exactly.

    Args:
        base_size: Sizes of the base.
        base_stride: Strides of the base, in elements.
        base_offset: Storage offset of the base, in elements.
        size: Sizes of the view.
        stride: Strides of the view, in elements.
        offset: Storage offset of the view, in elements (absolute, same storage as the base).

    Returns:
        The chain; ``ViewChain(())`` for an alias.

    Raises:
        ValueError: If a size and its stride sequence have different lengths.
    """
    base_size, base_stride = tuple(base_size), tuple(base_stride)
    size, stride = tuple(size), tuple(stride)
    if len(base_size) != len(base_stride) or len(size) != len(stride):
        raise ValueError(
            f"size/stride rank mismatch: base {(base_size, base_stride)}, view {(size, stride)}"
        )
    return _infer(base_size, base_stride, base_offset, size, stride, offset)


@cached_when_static(maxsize=4096)  # Note [Memoized geometry]
def _infer(
    base_size: tuple, base_stride: tuple, base_offset: IntLike,
    size: tuple, stride: tuple, offset: IntLike,
) -> ViewChain:  # fmt: skip
    base, view = _Geom(base_size, base_stride, base_offset), _Geom(size, stride, offset)
    if _same_geometry(base, view):
        return ViewChain(())
    chain = None
    if not any(_known(n == 0) for n in view.size):
        try:
            chain = _search(base, view)
        except Exception:  # exotic symbolic expressions: never fail, fall back instead
            log.debug("view inference failed; as_strided instead", exc_info=True)
            chain = None
    return chain if chain is not None else ViewChain((AsStrided(view.size, view.stride, offset),))


def infer_view_of(base: torch.Tensor, view: torch.Tensor) -> ViewChain:
    """``infer_view`` on two tensors; ``view`` must share ``base``'s storage.

    When the dtypes differ the chain contains a ``DtypeView`` (Note [Dtype views]): see
    ``infer_dtype_view``.

    Args:
        base: The base tensor (real or fake).
        view: A tensor aliasing ``base``'s storage.

    Returns:
        The chain regenerating ``view`` from ``base``.
    """
    if view.dtype != base.dtype:
        return infer_dtype_view(
            (tuple(base.size()), tuple(base.stride()), base.storage_offset()),
            base.dtype,
            (tuple(view.size()), tuple(view.stride()), view.storage_offset()),
            view.dtype,
        )
    return infer_view(
        base.size(), base.stride(), base.storage_offset(),
        view.size(), view.stride(), view.storage_offset(),
    )  # fmt: skip


def infer_dtype_view(
    base: tuple, base_dtype: torch.dtype, view: tuple, view_dtype: torch.dtype
) -> ViewChain:
    """The chain regenerating a view of another dtype: select/slice steps and one ``DtypeView``.

    Reasons in bytes (Note [Dtype views]): the ``DtypeView`` goes last when the view's geometry,
    rescaled to the base's element size, is a select/slice view of the base
    (``kv[l, 0].view(torch.float8_e4m3fn)``), else first when the base itself allows the dtype
    view (``x.view(torch.int32)[:, 2:]``). Only when neither order has a select/slice chain is an
    ``AsStrided`` used, in the base's elements and before the ``DtypeView``.

    Args:
        base: ``(size, stride, storage_offset)`` of the base, in its elements.
        base_dtype: The base's dtype.
        view: ``(size, stride, storage_offset)`` of the view, in its elements.
        view_dtype: The view's dtype.

    Returns:
        The chain; it reproduces the view's geometry exactly.

    Raises:
        ValueError: If no dtype view of the base or of a view of it in the base's dtype has the
            view's geometry.
    """
    b, v = _Geom(*map(_norm, base)), _Geom(*map(_norm, view))
    eb, ev = base_dtype.itemsize, view_dtype.itemsize
    step = DtypeView(view_dtype)
    candidates = []
    mid = _rescale(v, ev, eb)  # the view in the base's elements: a view of the base, then step
    if mid is not None:
        candidates.append(ViewChain((*infer_view(*b, *mid).steps, step)))
    first = _rescale(b, eb, ev)  # the base in the view's elements: step, then a view of it
    if first is not None:
        candidates.append(ViewChain((step, *infer_view(*first, *v).steps)))
    candidates.sort(key=lambda c: (c.uses_as_strided, len(c.steps)))
    for chain in candidates:
        try:
            ok = _same_geometry(_Geom(*chain.geometry(*b, itemsize=eb)), v)
        except ValueError:
            ok = False
        if ok and not (chain.uses_as_strided and isinstance(chain.steps[0], DtypeView)):
            return chain  # (an AsStrided after the DtypeView would be in the view's elements)
    raise ValueError(
        f"no view of a {base_dtype} base {tuple(b)} read as {view_dtype} has geometry {tuple(v)}"
    )


def _norm(x):
    return tuple(x) if isinstance(x, (list, tuple, torch.Size)) else x


# --------------------------------------------------------------------------------------------
# Wire format (HOP kwargs): a flat tuple of ints / SymInts
# --------------------------------------------------------------------------------------------

# Note [A flat wire format]
# A chain travels in a HOP keyword through FX graphs, pytree, Dynamo and torch.export's
# serializer. The serializer writes HOP arguments without a schema and knows only flat lists
# (of ints, SymInts, strings, ...) and lists of tensors: nested tuples or a mix of strings and
# ints raise SerializeError on ``torch.export.save``. So a chain is a flat, self-delimiting
# tuple of ints (SymInts where a bound is symbolic): the step count, then each step as its tag
# followed by its fields.

# Step kind -> its tag on the wire (the fields follow the tag, in dataclass order).
_TAG_OF = {
    Select: 0,  # (0, dim, index)
    Slice: 1,  # (1, dim, start, stop, step)
    AsStrided: 2,  # (2, ndim, *size, *stride, storage_offset)
    DtypeView: 3,  # (3, dtype code): see _WIRE_DTYPES
}


def encode_chain(chain: ViewChain) -> tuple:
    """Encodes a chain as a flat tuple of ints / SymInts (Note [A flat wire format]).

    Args:
        chain: The chain to encode.

    Returns:
        ``(number of steps, *steps)``, each step its tag then its fields: ``x[3, 2:5]`` is
        ``(2, 0, 0, 3, 1, 1, 2, 5, 1)``; an alias is ``(0,)``. A ``DtypeView`` is its tag and
        the dtype's index in ``_WIRE_DTYPES``: ``.view(torch.float8_e4m3fn)`` is ``(3, 23)``.
    """
    wire: list = [len(chain.steps)]
    for step in chain.steps:
        wire.append(_TAG_OF[type(step)])
        if isinstance(step, DtypeView):
            wire.append(_dtype_code(step.dtype))
        elif isinstance(step, Select):
            wire += [step.dim, step.index]
        elif isinstance(step, Slice):
            wire += [step.dim, step.start, step.stop, step.step]
        else:
            wire += [len(step.size), *step.size, *step.stride, step.storage_offset]
    return tuple(wire)


def read_chain(wire: Sequence, pos: int = 0) -> tuple[ViewChain, int]:
    """Decodes the chain ``encode_chain`` wrote at ``wire[pos:]``.

    Args:
        wire: A flat sequence holding an encoded chain from ``pos`` on (a list after a
            serialization round trip is fine).
        pos: Where the chain starts.

    Returns:
        The chain and the position just after it.

    Raises:
        ValueError: On an unknown step tag or a truncated entry.
    """
    try:
        count, pos = wire[pos], pos + 1
        steps: list[Step] = []
        for _ in range(count):
            tag, pos = wire[pos], pos + 1
            if tag == _TAG_OF[Select]:
                steps.append(Select(*wire[pos : pos + 2]))
                pos += 2
            elif tag == _TAG_OF[Slice]:
                steps.append(Slice(*wire[pos : pos + 4]))
                pos += 4
            elif tag == _TAG_OF[DtypeView]:
                steps.append(DtypeView(_dtype_of_code(wire[pos])))
                pos += 1
            elif tag == _TAG_OF[AsStrided]:
                ndim, pos = wire[pos], pos + 1
                size, stride = wire[pos : pos + ndim], wire[pos + ndim : pos + 2 * ndim]
                steps.append(AsStrided(tuple(size), tuple(stride), wire[pos + 2 * ndim]))
                pos += 2 * ndim + 1
            else:
                raise MalformedViewsError(
                    f"unknown view-chain step tag {tag!r} at {pos - 1} in {wire!r}"
                )
    except (IndexError, TypeError) as e:
        raise MalformedViewsError(f"malformed view chain at {pos} in {wire!r}") from e
    return ViewChain(tuple(steps)), pos


def decode_chain(wire: Sequence) -> ViewChain:
    """Decodes the output of ``encode_chain`` (exact inverse).

    Args:
        wire: The flat tuple (or list) ``encode_chain`` returned.

    Returns:
        The decoded chain.

    Raises:
        MalformedViewsError: On an unknown step tag, a truncated entry or trailing values.
    """
    chain, end = read_chain(wire, 0)
    if end != len(wire):
        raise MalformedViewsError(f"trailing values after a view chain: {wire!r}")
    return chain


# The dtypes a ``DtypeView`` can name on the wire, by index. Append only: an index, once given,
# names its dtype in every saved program.
_WIRE_DTYPES: tuple[str, ...] = (
    "float32", "float64", "float16", "bfloat16", "complex64", "complex128",
    "uint8", "int8", "int16", "int32", "int64", "bool",
    "uint16", "uint32", "uint64", "complex32",
    "qint8", "quint8", "qint32", "quint4x2", "quint2x4",
    "float8_e5m2", "float8_e5m2fnuz", "float8_e4m3fn", "float8_e4m3fnuz",
    "float8_e8m0fnu", "float4_e2m1fn_x2", "bits8", "bits16",
)


def _dtype_code(dtype: torch.dtype) -> int:
    """``torch.float8_e4m3fn`` -> its index in ``_WIRE_DTYPES``."""
    name = str(dtype).removeprefix("torch.")
    if name not in _WIRE_DTYPES:
        raise ValueError(f"view(dtype) to {dtype} has no wire code")
    return _WIRE_DTYPES.index(name)


def _dtype_of_code(code: Any) -> torch.dtype:
    """Inverse of ``_dtype_code``; ``ValueError`` when the code names no dtype of this torch."""
    name = _WIRE_DTYPES[code] if isinstance(code, int) and 0 <= code < len(_WIRE_DTYPES) else None
    dtype = getattr(torch, name, None) if name else None
    if not isinstance(dtype, torch.dtype):
        raise MalformedViewsError(f"unknown dtype code {code!r} in a view chain")
    return dtype
