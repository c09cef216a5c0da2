"""View-chain inference: the cheapest chain that reproduces a view geometry *exactly*.

``infer_view`` works on geometries, ``infer_view_of`` on two tensors sharing a storage, and
``infer_dtype_view`` across dtypes (in bytes, Note [Dtype views]). Each tries alias, then the
select/slice chain with the fewest steps (``views.search``), then a select/slice chain and one
``View`` (Note [Inferring view steps]), then one ``AsStrided``; every
candidate is verified with ``ViewChain.geometry`` before it is returned. Decisions on SymInts
are ``statically_known_true`` ones: inference never installs a guard and never fails on an
exotic expression (it falls back to ``AsStrided``). Imports only ``autofunc.symbolic`` and the
modules of ``autofunc.views`` below it (not ``wire``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..symbolic import cached_when_static
from ..symbolic import known as _known
from .chain import ViewChain
from .geometry import Geom, IntLike, coalesced, rescale, simplify, split_at
from .search import Matching, is_full, matching_cost, matchings, offset_terms, solve_offset
from .steps import AsStrided, DtypeView, Select, Slice, Step, View
from ..logs import get_logger

log = get_logger("autofunc.views")

__all__ = ["infer_dtype_view", "infer_view", "infer_view_of"]

# Upper bound on nodes visited while decomposing an offset (keeps pathological bases cheap).
_SEARCH_BUDGET = 20_000


def _all_known_eq(xs: Sequence[IntLike], ys: Sequence[IntLike]) -> bool:
    return len(xs) == len(ys) and all(_known(x == y) for x, y in zip(xs, ys))


def _slice_stop(start: IntLike, length: IntLike, step: int, n: IntLike) -> IntLike:
    """``min(start + length * step, n)``; either bound yields the exact length."""
    end = start + length * step
    if _known(end <= n):
        return simplify(end)
    return n if _known(end >= n) else simplify(end)


def _build_chain(base: Geom, view: Geom, match: Matching, coeffs: dict) -> ViewChain:
    """Steps in application order, ascending base dims, dims relative to the current tensor."""
    kept = {i: (j, k) for j, (i, k) in enumerate(match)}
    steps: list[Step] = []
    removed = 0
    for i in range(len(base.size)):
        c, cur = simplify(coeffs[i]), i - removed
        if i not in kept:
            steps.append(Select(cur, c))
            removed += 1
        elif not is_full(base, view, i, *kept[i]):
            j, k = kept[i]
            steps.append(Slice(cur, c, _slice_stop(c, view.size[j], k, base.size[i]), k))
    return ViewChain(tuple(steps))


def _same_geometry(a: Geom, b: Geom) -> bool:
    return (
        _all_known_eq(a.size, b.size)
        and _all_known_eq(a.stride, b.stride)
        and _known(a.offset == b.offset)
    )


def _reproduces(chain: ViewChain, base: Geom, view: Geom) -> bool:
    return _same_geometry(Geom(*chain.geometry(*base)), view)


def _search(base: Geom, view: Geom) -> ViewChain | None:
    """Cheapest verified select/slice chain, or ``None``."""
    delta = view.offset - base.offset
    if len(view.size) > len(base.size) or not _known(delta >= 0):
        return None
    if any(_known(s < 0) for s in base.stride):  # not a PyTorch geometry
        return None
    budget = [_SEARCH_BUDGET]
    matches = matchings(base, view, budget)
    matches.sort(key=lambda m: (matching_cost(base, view, m), [i for i, _ in m]))
    for match in matches:
        terms = offset_terms(base, view, match)
        if terms is None:
            continue
        coeffs = solve_offset(terms, delta, budget)
        if coeffs is not None:
            chain = _build_chain(base, view, match, coeffs)
            if _reproduces(chain, base, view):
                return chain
        if budget[0] < 0:
            return None
    return None


# Note [Inferring view steps]
# A ``view``/``reshape`` that splits or merges dims keeps the elements and their order, so a
# target no select/slice chain reaches may still be a ``View`` of one (the target coalesced:
# ``qkv.split(...)[0].view(T, H, D)`` is ``[:, :H*D] -> view(T, H, D)``), or a select/slice of a
# ``View`` of the base (the base's dims split where the target's strides cut them:
# ``x.view(2, 4, 16)[:, 1:3]`` of an ``(8, 16)`` base is ``view(2, 4, 16) -> [:, 1:3]``). The
# first form is tried on the base itself, on the target coalesced and on that split at the
# base's strides; the second on the base (coalesced or not) split at the target's strides. Each
# candidate is verified with ``ViewChain.geometry``, whose ``View`` arithmetic is ATen's (Note
# [View steps] in geometry.py), so a merge of dims that are not contiguous, or a size-1 dim
# whose stride ``view`` would not give, is never a ``View`` (it is ``as_strided``). A size-1
# dim's stride after a ``view`` may come from size-1 dims of the slice it was made from, which
# coalescing drops: such a view may still need ``as_strided``. Splits are at int strides only;
# symbolic dims are matched whole.


def _view_chain(base: Geom, view: Geom) -> ViewChain | None:
    """A verified chain with one ``View`` step (Note [Inferring view steps]), or ``None``."""
    if not all(_known(n >= 1) for n in view.size):
        return None
    flat = coalesced(view)
    for mid in _distinct((base, flat, split_at(flat, base.stride))):
        found = ViewChain(()) if _same_geometry(base, mid) else _search(base, mid)
        if found is not None:
            chain = ViewChain((*found.steps, View(view.size)))
            if _verified(chain, base, view):
                return chain
    flat = coalesced(base)
    for mid in _distinct((split_at(flat, view.stride), split_at(base, view.stride))):
        if _same_geometry(mid, base):
            continue
        found = ViewChain(()) if _same_geometry(mid, view) else _search(mid, view)
        if found is not None:
            chain = ViewChain((View(mid.size), *found.steps))
            if _verified(chain, base, view):
                return chain
    return None


def _distinct(geoms: Sequence[Geom]) -> list[Geom]:
    """``geoms`` without repeats (compared without hashing: a SymInt has no hash)."""
    out: list[Geom] = []
    for g in geoms:
        if not any(_same_geometry(g, o) for o in out):
            out.append(g)
    return out


def _verified(chain: ViewChain, base: Geom, view: Geom) -> bool:
    try:
        return _reproduces(chain, base, view)
    except ValueError:  # a View the geometry does not allow
        return False


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
    a select/slice chain with one ``View`` step (Note [Inferring view steps]), and finally a
    single ``AsStrided`` step. Every decision on symbolic values is taken with
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
    base, view = Geom(base_size, base_stride, base_offset), Geom(size, stride, offset)
    if _same_geometry(base, view):
        return ViewChain(())
    chain = None
    if not any(_known(n == 0) for n in view.size):
        try:
            chain = _search(base, view)
            if chain is None:
                chain = _view_chain(base, view)
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
    b, v = Geom(*map(_norm, base)), Geom(*map(_norm, view))
    eb, ev = base_dtype.itemsize, view_dtype.itemsize
    step = DtypeView(view_dtype)
    candidates = []
    mid = rescale(v, ev, eb)  # the view in the base's elements: a view of the base, then step
    if mid is not None:
        candidates.append(ViewChain((*infer_view(*b, *mid).steps, step)))
    first = rescale(b, eb, ev)  # the base in the view's elements: step, then a view of it
    if first is not None:
        candidates.append(ViewChain((step, *infer_view(*first, *v).steps)))
    candidates.sort(key=lambda c: (c.uses_as_strided, len(c.steps)))
    for chain in candidates:
        try:
            ok = _same_geometry(Geom(*chain.geometry(*b, itemsize=eb)), v)
        except ValueError:
            ok = False
        if ok and not (chain.uses_as_strided and isinstance(chain.steps[0], DtypeView)):
            return chain  # (an AsStrided after the DtypeView would be in the view's elements)
    raise ValueError(
        f"no view of a {base_dtype} base {tuple(b)} read as {view_dtype} has geometry {tuple(v)}"
    )


def _norm(x):
    return tuple(x) if isinstance(x, (list, tuple, torch.Size)) else x
