"""The search space of select/slice chains: dim matchings and the offset decomposition.

A select/slice view of a base keeps some base dims (each sliced with a step) in order and
selects the others. ``matchings`` lists the order-preserving maps of view dims onto base dims
whose strides agree; for one of them, the view's offset must be ``sum(c_i * stride_i)`` with
each coefficient ``c_i`` within its dim's bounds (``offset_terms``), which ``solve_offset``
finds. Pure arithmetic on ints and SymInts (``statically_known_true`` decisions only, no guard);
imports only ``views.geometry``. The work is bounded by a shared ``budget`` (a one-item list).
"""

from __future__ import annotations

import functools

from ..symbolic import known as _known
from .geometry import Geom, IntLike, as_int, hint, simplify

__all__ = ["Matching", "is_full", "matching_cost", "matchings", "offset_terms", "solve_offset"]


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
        step = as_int(vstride // bstride)
        step = step if step is not None and _known(step * bstride == vstride) else None
    if step is None or step < 1:
        return None
    if step == 1 and _known(vsize == bsize):
        return step  # the whole dim, even one that may be empty (an unbacked size)
    if not (_known(vsize >= 1) and _known((vsize - 1) * step <= bsize - 1)):
        return None
    return step


Matching = tuple[tuple[int, int], ...]  # per view dim: (base dim, slice step)


def matchings(base: Geom, view: Geom, budget: list[int]) -> list[Matching]:
    """All order-preserving maps of view dims onto base dims with compatible strides."""
    out: list[Matching] = []
    _extend_matchings(base, view, budget, 0, 0, [], out)
    return out


def _extend_matchings(
    base: Geom, view: Geom, budget: list[int], j: int, first: int, acc: list, out: list
) -> None:
    """Depth-first step of ``matchings``: view dim ``j`` onto base dims from ``first`` on.
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


def is_full(base: Geom, view: Geom, i: int, j: int, step: int) -> bool:
    return step == 1 and _known(view.size[j] == base.size[i])


def matching_cost(base: Geom, view: Geom, match: Matching) -> int:
    slices = sum(not is_full(base, view, i, j, k) for j, (i, k) in enumerate(match))
    return len(base.size) - len(view.size) + slices


def offset_terms(
    base: Geom, view: Geom, match: Matching
) -> list[tuple[int, IntLike, IntLike]] | None:
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
            c = simplify(rem // s)
        else:
            return None
        if not (_known(c >= 0) and _known(c <= hi)):
            return None
        coeffs[dim] = c
        rem = rem - c * s
    return coeffs if _known(rem == 0) else None


def _solve_hinted(terms: list, delta: IntLike, budget: list[int]) -> dict[int, int] | None:
    """Int coefficients found on the example values, kept only if provably in bounds."""
    hinted = [(dim, hint(s), hint(hi)) for dim, s, hi in terms]
    delta_hint = hint(delta)
    if delta_hint is None or any(s is None or hi is None for _, s, hi in hinted):
        return None
    coeffs = _solve_static(hinted, delta_hint, budget)
    if coeffs is None or not all(_known(coeffs[dim] <= hi) for dim, _, hi in terms):
        return None
    return coeffs


def solve_offset(terms: list, delta: IntLike, budget: list[int]) -> dict[int, IntLike] | None:
    """Offset decomposition: exhaustive for ints, greedy then example-guided for SymInts."""
    values = [delta] + [v for _, s, hi in terms for v in (s, hi)]
    if all(isinstance(v, int) for v in values):
        return _solve_static(terms, delta, budget)
    coeffs = _solve_symbolic(terms, delta)
    return coeffs if coeffs is not None else _solve_hinted(terms, delta, budget)
