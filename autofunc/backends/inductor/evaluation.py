"""When and how Inductor computes a node of the post-grad graph, as the re-inplace pass needs it
(``policy.py`` asks; nothing here rewrites the graph): whether a read may happen later than its
place (``lazy_under_inductor``: the rule "a read the backend evaluates late"), where a lazy value
is computed at the latest (``computed_where_taken``), and which roots a pin gives their recorded
layout (``pinnable_root``). Of Inductor's configuration it reads two settings at compile time
(Notes [Reductions Inductor computes where they stand], [Scans Inductor runs as extern
kernels]) and sets none.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch import fx
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from ...passes.memory_ops import SCATTER_VIEWS, VIEW_OPS, storage_address
from ...passes.policy import LateReads
from ...passes.targets import per_target
from ...passes.walks import users_through_views, view_root, view_walk
from ...symbolic import contiguous_or_false, is_symbolic, known
from .repairs import INPLACEABLE

__all__ = [
    "LATE_READS",
    "computed_where_taken",
    "extern_scan",
    "lazy_kind",
    "lazy_under_inductor",
    "pin_keeps_layout",
    "pinnable_root",
    "pinnable_value",
    "reshape_chain",
    "reshape_view",
    "restrided_for_a_later_region",
    "storage_chain",
    "storage_root",
]

_aten = torch.ops.aten

# -- what Inductor evaluates lazily (rule "a read the backend evaluates late") ----------

# Aten ops Inductor runs as extern kernels at their place in the program (reads by them are
# not deferred); every other aten op may be fused into a kernel that runs where its result is
# first needed.
_EXTERN_READERS = frozenset(
    {
        _aten.mm.default,
        _aten.addmm.default,
        _aten.bmm.default,
        _aten.baddbmm.default,
        _aten.convolution.default,
        _aten.copy_.default,  # the epilogue: it reads the final version, never an old one
    }
)


def lazy_under_inductor(reader: fx.Node) -> bool:
    """Whether Inductor may evaluate ``reader`` later than its place in the graph (an element
    of a lazy node's tuple is as lazy as the node)."""
    if not lazy_kind(reader):
        return False
    if reader.target is operator.getitem:
        return lazy_under_inductor(reader.args[0])
    if reader.target in _REDUCTIONS and _reduction_realized(reader):
        return False
    if extern_scan(reader):
        return False
    return not _returned_realized(reader)


# Scans Inductor lowers through ``ir.Scan.create``, with an extern fallback.
_SCANS = frozenset({_aten.cumsum.default, _aten.cumprod.default, _aten.logcumsumexp.default})


def extern_scan(node: fx.Node) -> bool:
    """Whether ``node`` is a scan Inductor runs as an extern kernel (the Note below)."""
    return node.target in _SCANS and _scan_extern(node)


def _scan_extern(node: fx.Node) -> bool:
    """Note [Scans Inductor runs as extern kernels]
    Inductor lowers ``cumsum``, ``cumprod`` and ``logcumsumexp`` to a scan only where the
    backend has scans (Triton, Halide); the C++ backend has none, so on a CPU with
    ``cpu_backend="cpp"`` (the default) ``ir.Scan.create`` gives nothing and the op runs as an
    extern kernel where the graph has it, reading its input there: ``r = b.cumsum(1); op(b, r);
    return r[:, 1:2]`` needs no value computed before the call (fuzz seed 20261704 #54: a view
    of ``r`` was, 888 B over PyTorch's built-in). A 0-d input is copied, lazily; any other
    device or backend counts as lazy."""
    src = node.args[0] if node.args else None
    inp = src.meta.get("val") if isinstance(src, fx.Node) else None
    if not isinstance(inp, torch.Tensor) or inp.dim() == 0 or inp.device.type != "cpu":
        return False
    try:
        from torch._inductor import config

        return config.cpu_backend == "cpp"
    except (ImportError, AttributeError):
        return False


def lazy_kind(node: fx.Node) -> bool:
    """Whether ``node`` is of a kind Inductor computes lazily, into a buffer whose layout it
    chooses: what a pin is for (``InductorPolicy.pin_root``), whatever the node's place makes
    Inductor compute it early (Notes [Reductions Inductor computes where they stand],
    [Returned values Inductor computes where they stand] answer when, not how it is laid out:
    a realized reduction keeps a flexible layout, and a returned value may be padded)."""
    target = node.target
    if target is operator.getitem and isinstance(node.args[0], fx.Node):
        return lazy_kind(node.args[0])
    return node.op == "call_function" and _lazy_target(target)


# Reductions Inductor lowers through ``make_reduction`` (``mean`` through its ``sum``).
_REDUCTIONS = frozenset(
    {
        _aten.sum.default,
        _aten.sum.dim_IntList,
        _aten.mean.default,
        _aten.mean.dim,
        _aten.amax.default,
        _aten.amin.default,
        _aten.max.default,
        _aten.min.default,
        _aten.prod.default,
        _aten.prod.dim_int,
        _aten.argmax.default,
        _aten.argmin.default,
    }
)


def _reduction_realized(node: fx.Node) -> bool:
    """Note [Reductions Inductor computes where they stand]
    Inductor lowers a reduction into a buffer of its own right where the graph has it
    (``make_reduction`` realizes what ``Reduction.create`` returns), so its reads of the memory a
    later call writes happen before the call, as for an extern kernel: ``r = b.amax(); op(b);
    return r`` needs neither a clone of ``b`` nor ``r`` computed early (PyTorch's built-in writes
    ``b`` in place there). Not when ``Reduction.create`` turns the reduction into a pointwise
    node, which is as lazy as any: over one element, or over fewer elements than the unroll
    threshold unless the result is one element on a CPU. The threshold is read from Inductor's
    configuration at compile time; a reduction whose sizes are not static integers, or one
    whose threshold cannot be read, counts as lazy (as before)."""
    src = node.args[0] if node.args else None
    out = node.meta.get("val")
    inp = src.meta.get("val") if isinstance(src, fx.Node) else None
    if not (isinstance(out, torch.Tensor) and isinstance(inp, torch.Tensor)):
        return False
    if is_symbolic(inp.numel()) or is_symbolic(out.numel()):
        return False  # int() would specialize the size
    n_in, n_out = int(inp.numel()), int(out.numel())
    if n_out == 0 or n_in % n_out:
        return False
    reduced = n_in // n_out
    threshold = _unroll_threshold()
    if threshold is None or reduced <= 1:
        return False
    on_cpu = inp.device.type == "cpu"
    return reduced >= threshold or (n_out == 1 and on_cpu)


def _returned_realized(node: fx.Node) -> bool:
    """Note [Returned values Inductor computes where they stand]
    Inductor gives a tensor the graph returns the strides the graph records when it lowers it
    (``GraphLowering.run_node``: ``require_exact_strides`` of a node with an ``output`` user),
    and a value not computed yet gets them by being computed into a buffer right there
    (``copy_input`` realizes), which every later user reads. So a returned pointwise node
    reads the memory a later call writes before the call: ``r = b * 3; op(b); return r, r[:2]
    * 2`` needs no clone of ``b`` and nothing computed early, even where a later call writes
    ``r`` (PyTorch's built-in writes ``b`` in place there). Not for a 0-d tensor (Inductor fixes
    no strides of one), a view (its base is what is computed), strides with unbacked symbols
    (none fixed), nor a scatter, which Inductor re-inplaces into the input it is copied back to
    and whose returned value a repair may replace by a copy (Note [Returned scatters under
    Inductor] in repairs.py).

    Whether a node is returned is the graph's answer when the pass first asks, as the alias
    analysis does for every node when the pass begins (kept in ``node.meta``): the pass's rewrites
    return more nodes (a folded scatter's target), and a node returned only after a call was
    rewritten counts as lazy throughout, so that the analysis and the later rules agree. No
    rewrite of the pass stops returning a node this admits."""
    returned = node.meta.get(_RETURNED)
    if returned is None:
        returned = node.meta[_RETURNED] = any(u.op == "output" for u in node.users)
    if not returned or node.target in INPLACEABLE:
        return False
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dim() == 0 or val._is_view():
        return False
    return not free_unbacked_symbols(val.stride())


_RETURNED = "autofunc.returned"  # the node's meta key of the answer


def _unroll_threshold() -> int | None:
    try:
        from torch._inductor import config

        return int(config.unroll_reductions_threshold)
    except (ImportError, AttributeError, TypeError, ValueError):
        return None


@per_target  # Note [Facts per target]
def _lazy_target(target: Any) -> bool:
    if not isinstance(target, torch._ops.OpOverload):
        return False  # HOPs, getitem
    return target.namespace in ("aten", "prims") and target not in _EXTERN_READERS


def pinnable_root(node: fx.Node) -> bool:
    """Whether the root of ``node``'s views is a buffer the pass pins when it writes ``node`` in
    place (``InductorPolicy.pin_root`` for a view, ``InductorPolicy.pin`` for the root itself).

    Note [A pinned root keeps its layout]
    Inductor gives a node one of whose users is an ``as_strided`` exactly the strides the graph
    records, where it lowers that node (``GraphLowering.run_node``: ``require_exact_strides``,
    no padding), so every later user, the op's views among them, sees the recorded layout. A
    computed buffer whose recorded strides are not contiguous (a scatter into a gappy input,
    a permuted product) is then written in place through a pin of its root, as PyTorch's
    built-in does, instead of being cloned into a fixed span (fuzz seed 20261701 #59: 288 B
    over the built-in): neither the rule "a layout the backend chooses" nor the layout fixed
    late by the call (Note [A layout fixed after it was used]) holds, since the layout is fixed
    before any other user of the root is lowered. Only a root (never a view: Note [A written
    view of an unrealized buffer]) of a kind Inductor lays out itself, without unbacked sizes,
    whose layout a pin keeps (Note [A pinned scatter Inductor rewrites]): the roots
    ``pin_root`` pins."""
    root = storage_root(node)
    val = root.meta.get("val")
    return (
        isinstance(root.target, torch._ops.OpOverload)
        and isinstance(val, torch.Tensor)
        and lazy_kind(root)
        and not (val._has_symbolic_sizes_strides and free_unbacked_symbols(val))
        and pin_keeps_layout(root)
    )


def storage_root(node: fx.Node) -> fx.Node:
    """The root of ``node``'s views, through reshapes that view their input (Note [A reshape
    that views its input]): the node whose buffer Inductor computes."""
    return storage_chain(node)[-1]


def storage_chain(node: fx.Node) -> list[fx.Node]:
    """``node``, the node it views, ... down to :func:`storage_root`, root last."""
    nodes = list(view_walk(node))
    while reshape_view(nodes[-1]):
        nodes += view_walk(nodes[-1].args[0])
    return nodes


def pin_keeps_layout(root: fx.Node) -> bool:
    """Whether an ``as_strided`` of ``root`` with its recorded geometry (a pin) reads the memory
    Inductor gives ``root`` as the graph records it, whatever Inductor's own re-inplacing makes
    of ``root``.

    Note [A pinned scatter Inductor rewrites]
    Inductor gives the input of an ``as_strided`` its recorded strides (Note [A pinned root keeps
    its layout]), but a scatter (``INPLACEABLE``) need not be that input in the end: Inductor's
    own re-inplacing, which runs after the pass, turns it into a write into its first argument,
    whose memory the value then is, and a diagonal or ``as_strided`` scatter it does not write
    in place into a ``clone`` of that argument written through a view. The pin then reads that
    argument's memory, laid out as Inductor chose for the argument's root, or the clone's,
    laid out densely. With another geometry than the scatter's recorded one it reads other
    elements, or past the allocation (fuzz seed 20261806 #261 under v1: the pinned
    ``slice_scatter`` of a ``diagonal_scatter`` over a computed value recorded with strides
    ``(12, 1)`` and laid out densely; the op wrote 40 bytes past a 192-byte buffer, and the
    process died). So a scatter keeps its layout through a pin only where the argument has the
    scatter's size and strides, its root is a graph input or a computed value recorded
    contiguous (the layout Inductor gives one unasked; on a GPU only with strides too small to
    pad) that keeps its own layout the same way, and, where a clone may stand for it, the
    scatter is recorded dense or Inductor writes it into its input, a graph input, as it does
    where the graph copies a value back into that input and nothing uses the input in between
    (fuzz seed 20261902 #140: ``b.diagonal(-1).add_(r)`` on a strided input, then a call
    writing that diagonal; cloned for a while, 240 B over the built-in); a scatter into such
    a scatter has that input's memory (20261935 #247: a permuted input's diagonal written twice).
    Any other root is no root the pass pins, and a buffer of it is cloned (rule "a layout the
    backend chooses")."""
    if root.target not in INPLACEABLE:
        return True
    val = root.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return False
    if _may_become_a_clone(root) and not _dense(val) and not _written_into_its_input(root):
        return False
    return _argument_kept(root)


def _written_into_its_input(scatter: fx.Node) -> bool:
    """Whether Inductor's re-inplacing writes ``scatter`` into its first argument, a graph
    input, rather than into a clone of it: as Inductor decides it (``can_inplace``), the graph
    copies a value back into that input after the scatter, and nothing between the two uses
    the input's memory (no other scatter into it either, before or after)."""
    inp = scatter.args[0] if scatter.args else None
    if not (isinstance(inp, fx.Node) and inp.op == "placeholder"):
        return False
    copies = [
        u for u in inp.users if u.target is _aten.copy_.default and u.args[0] is inp and u > scatter
    ]
    if not copies:
        return False
    back = max(copies)
    for user in users_through_views(inp):
        if user is scatter or user is back or user.target in VIEW_OPS:
            continue
        if user.target in INPLACEABLE or scatter < user < back:
            return False
    return True


def _argument_kept(scatter: fx.Node) -> bool:
    """Whether ``scatter``'s first argument has its geometry and memory laid out as recorded
    without a pin (Note [A pinned scatter Inductor rewrites])."""
    src = scatter.args[0] if scatter.args else None
    sval, val = getattr(src, "meta", {}).get("val"), scatter.meta.get("val")
    if not (isinstance(sval, torch.Tensor) and isinstance(val, torch.Tensor)):
        return False
    if not _same_geometry(sval, val):
        return False
    base = storage_root(src)
    if base.op == "placeholder":
        return True
    if base.target in INPLACEABLE and _written_into_its_input(base):  # the input (the Note)
        return _argument_kept(base)
    bval = base.meta.get("val")
    if not (isinstance(bval, torch.Tensor) and contiguous_or_false(bval) and _unpadded(bval)):
        return False
    return base.target not in INPLACEABLE or _argument_kept(base)


# Inductor pads only strides above this many elements (``padding_stride_threshold``).
_PADDED_ABOVE = 1024


def _unpadded(val: torch.Tensor) -> bool:
    """Whether Inductor lays out a computed ``val`` it is not asked to lay out otherwise with
    the contiguous strides: on a GPU it pads strides above a threshold to an alignment
    (``comprehensive_padding``, off on a CPU)."""
    if val.device.type == "cpu":
        return True
    return all(not is_symbolic(st) and st <= _PADDED_ABOVE for st in val.stride())


# The views whose scatter Inductor always lowers into a write into a clone of the input when it
# does not write the input itself (``_ALWAYS_MUTATING_SCATTER_OPS`` in its re-inplacing); a
# scatter of another view fuses with one that puts back a view of them.
_CLONED_SCATTERS = frozenset({_aten.diagonal_scatter.default, _aten.as_strided_scatter.default})


def _may_become_a_clone(scatter: fx.Node) -> bool:
    """Whether Inductor may lower ``scatter`` as a write into a clone of its input: it or a
    scatter it puts back (its source, through sources that are scatters) is a diagonal or
    ``as_strided`` scatter, or an ``index_put``."""
    node: Any = scatter
    while isinstance(node, fx.Node) and node.target in INPLACEABLE:
        if node.target in _CLONED_SCATTERS or node.target not in SCATTER_VIEWS:
            return True
        node = node.args[1] if len(node.args) > 1 else None
    return False


def _same_geometry(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` provably have one size and stride (no guard)."""
    return a.dim() == b.dim() and all(
        known(x == y) for x, y in zip((*a.shape, *a.stride()), (*b.shape, *b.stride()))
    )


def _dense(val: torch.Tensor) -> bool:
    """Whether ``val``'s elements provably fill its span without gaps or overlap (a clone keeps
    its strides): contiguous, or a permutation of contiguous for static geometry."""
    if contiguous_or_false(val):
        return True
    if any(is_symbolic(x) for x in (*val.shape, *val.stride())):
        return False
    if 0 in val.shape:
        return True
    expected = 1
    for st, n in sorted((st, n) for n, st in zip(val.shape, val.stride()) if n != 1):
        if st != expected:
            return False
        expected *= n
    return True


def pinnable_value(node: fx.Node) -> bool:
    """Whether a value computed before a call can be computed through a pin of its own (Note
    [A realized value a later call writes] in lazy_reads.py): a root ``pin_root`` would pin, or
    reshapes that view one (``reshape_chain``; the pin goes on that root)."""
    chain = reshape_chain(node)
    return all(view_root(n) is n for n in chain) and pinnable_root(chain[-1])


def reshape_chain(node: fx.Node) -> list[fx.Node]:
    """``node``, then the input of each ``reshape`` that views its input (Note [A reshape that
    views its input]) down to the first node that is no such reshape."""
    chain = [node]
    while reshape_view(chain[-1]):
        chain.append(chain[-1].args[0])
    return chain


def reshape_view(node: Any) -> bool:
    """Note [A reshape that views its input]
    ``aten.reshape`` is no view op in general (it copies where strides do not allow a view), so
    view walks stop at it; where its value shares its input's storage, Inductor lowers it as a
    view, and the buffer Inductor computes is further down. ``pin_root`` pinned such a reshape
    as if it were the root: an ``as_strided`` of a view of a buffer not computed yet, which
    Inductor puts at offset 0 (Note [Pinning a view of a computed buffer] in repairs.py; fuzz
    seed 20261605 #87 under v1: a written select of a scatter result, the op wrote element 0
    of the input, not element 9). The walk goes on through it."""
    if not (
        isinstance(node, fx.Node)
        and node.op == "call_function"
        and node.target is torch.ops.aten.reshape.default
        and isinstance(node.args[0], fx.Node)
    ):
        return False
    out, src = node.meta.get("val"), node.args[0].meta.get("val")
    if not (isinstance(out, torch.Tensor) and isinstance(src, torch.Tensor)):
        return False
    return storage_address(out) == storage_address(src)


def computed_where_taken(user: fx.Node, node: fx.Node) -> bool:
    """Whether Inductor, where it lowers ``user``, has computed the lazy ``node`` into a buffer
    of its own at the latest (so that users lowered after it read that buffer).

    Note [Values computed where they are taken]
    Inductor evaluates a pointwise node where its value is first needed (Note [Lazy reads
    under Inductor]), but an input of ``as_strided`` it computes at once: the graph lowering
    fixes the exact strides of a node one of whose users is an ``as_strided`` where it lowers
    that node, so the value every later user reads is a buffer, and the lowering of
    ``as_strided`` realizes its input again. The pass's pins (``pin_layout``, Note [A written
    view of an unrealized buffer]) are such nodes. Users lowered before the ``as_strided``
    count as computing the node inline all the same (a bound, never relied on to be tight), so
    the alias analysis ends the node's reads at the ``as_strided`` only for the users after it
    (``AliasAnalysis``'s walk, and ``AliasAnalysis.computed_by`` for the pins the pass emits,
    found by ``apply_plan`` on the way to each buffer written in place). A read the rule "a
    read the backend evaluates late" would copy for is then known to happen before a later
    call: ``buf = state * 2; op(buf[1:3]); op(state); return buf`` under v1, where the
    pin of ``buf`` for the first call computes it before the second call writes ``state``
    (autofunc copied ``state``, 4 bytes more than PyTorch's built-in v1).

    An extern kernel taking the node proves nothing: a custom op with a layout constraint
    (every op with ``eager_input_vals``, the pass's direct calls among them) gets a copy of a
    lazy input with the exact strides, computed where the op is lowered, and the node itself
    stays lazy (``y = x * 2; s = op(y); op2(x); return y * 3`` read ``x`` after ``op2``).
    Neither does a view of the node passed to ``as_strided``: Inductor may compute the view's
    elements into a buffer of their own and leave the node lazy.
    """
    return (
        user.target is _aten.as_strided.default
        and user.args[0] is node
        and node.op == "call_function"
        and _own_value(node.target)
    )


@per_target  # Note [Facts per target]
def _own_value(target: Any) -> bool:
    """Whether a lazy node of ``target`` is a value of its own, not a view of another."""
    if not isinstance(target, torch._ops.OpOverload) or target in VIEW_OPS:
        return False
    return not any(r.alias_info is not None for r in target._schema.returns)


LATE_READS = LateReads(
    lazy=lazy_under_inductor, taken=computed_where_taken, taken_by=(_aten.as_strided.default,)
)


def restrided_for_a_later_region(node: fx.Node, call: fx.Node) -> bool:
    """Whether a higher-order op after ``call`` (a region) takes ``node`` while its realized
    copy would have other strides (``empty_like`` lays out a tensor with gaps densely).

    A region called twice with one operand, given the operand itself the first time and its
    realized copy the second, gets two layouts for one argument, which Inductor refuses
    ("subgraph args must have consistent values"; fuzz seed 20261286 #230:
    ``t1 = b.clone(); v2 = t1[3:6:2]; g = region(b, v2); region(g, v2)``, where
    ``remove_noop_ops`` makes ``v2`` a view of ``b``). No such frontier is realized: the call
    keeps its clone (``LAZY_READ``).
    """
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or not _restrided(val):
        return False
    return any(
        u > call and isinstance(u.target, torch._ops.HigherOrderOperator) for u in node.users
    )


def _restrided(val: torch.Tensor) -> bool:
    """Whether ``empty_like(val)`` has other strides than ``val`` (symbolic: assumed so)."""
    if any(is_symbolic(v) for v in (*val.shape, *val.stride())):
        return True
    return tuple(torch.empty_like(val).stride()) != tuple(val.stride())
