"""The re-inplace pass: turn each autofunc HOP call into a direct call of its mutable op that
writes straight into the caller's buffers, keeping only the clones that are needed.

Works on any functional ATen graph with ``meta["val"]`` fake tensors (post-grad Inductor graphs,
``aot_eager`` graphs, exported graphs). Knows nothing about Inductor's configuration; the
decisions are made by querying :class:`~autofunc.passes.alias.AliasAnalysis`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import operator
from typing import Any, Callable, NamedTuple

import torch
import torch.fx as fx
from torch.multiprocessing.reductions import StorageWeakRef
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from .. import views
from .. import hops as _hops  # noqa: F401 - registers the v1 and v2 adapters
from ..hops.adapter import Mutation, adapter_for, mutation_targets
from ..hops.common import Distinct, unpack_outputs
from ..errors import GraphError
from .alias import SCATTER_VIEWS, VIEW_OPS, AliasAnalysis
from .emit import (
    NO_VAL,
    emit,
    emit_clone,
    emit_fresh_alias,
    emit_view,
    fake_mode_of,
    fake_values,
    getitem_of,
    inherit_unbacked_bindings,
    pin_layout,
)
from ..regions import Region, overlaps
from ..symbolic import contiguous_or_false, overlaps_itself
from .report import CallReport, Decision, Reason, Report
from .share_views import share_input_views

__all__ = ["reinplace", "RULES", "Rule"]

log = logging.getLogger("autofunc.reinplace")

_aten = torch.ops.aten


def reinplace(
    gm: fx.GraphModule,
    *,
    enable: bool = True,
    is_inference: bool | None = None,
    for_inductor: bool = False,
) -> Report:
    """Rewrite every autofunc HOP call in ``gm`` into a direct call of its op.

    Before (v2, ``foo`` mutates ``x``)::

        out = autofunc_v2("mylib::foo.default", _bases=[buf], _views=<buf[0]>)
        new_buf = out[0]
        use(new_buf)

    After, when nothing later reads the old ``buf``::

        select = aten.select.int(buf, 0, 0)
        foo = mylib.foo.default(select)
        use(buf)

    Otherwise ``buf`` is first cloned (``aten.clone``, or ``empty_strided`` + ``copy_`` to keep
    exact strides) and the op writes the clone.

    Soundness: a buffer is written in place only when (1) no node after the call reads, through
    any version that shares its memory, an element of the regions the op writes; (2) no other
    argument of the same call reads those regions; (3) it is not passed twice as a mutable
    buffer; (4) when it is a graph input, the graph itself copies the final value back into it
    (``copy_(input, new)``), which then becomes a self-copy and is removed, and that value is
    not also an output (the returned tensor would be the input itself, which eager never
    returns for a fresh tensor; in a training graph AOTAutograd may also donate saved outputs
    to the backward, which would then overwrite the input), nor is a view of this call's value
    an output when a later value is copied back (Note [A returned value the copy-back
    overwrites]). Anything unproven keeps its clone, and
    the report says why. ``RULES`` holds these rules as (name, check) pairs, asked in order.

    Args:
        gm: the graph module, rewritten in place.
        enable: ``False`` only decomposes the HOPs, cloning every buffer.
        is_inference: whether ``gm`` is an inference graph; ``None`` (unknown) is treated as a
            training graph (only the reason rule (4) names depends on it).
        for_inductor: emit clones and aliased arguments the way Inductor lowers soundly
            (Note [Clones for Inductor]), and keep the clone of a buffer that Inductor may read
            lazily after the write (``Reason.LAZY_READ``, Note [Lazy reads under Inductor]).

    Returns:
        A :class:`Report` with one :class:`CallReport` per HOP call.
    """
    hops = _mutation_nodes(gm.graph)
    report = Report(graph=type(gm).__name__)
    if not hops:
        return report
    _check_vals(hops)
    mutations = {n: adapter_for(n.target).read(n) for n in hops}
    if for_inductor:
        _keep_old_copy_sources(gm.graph)
        _as_strided_of_roots(gm.graph)
    ctx = _Pass(
        gm=gm,
        analysis=AliasAnalysis(
            gm.graph, lazy_reader=_lazy_under_inductor if for_inductor else None
        ),
        epilogue=_epilogue_copies(gm.graph),
        finals=_final_versions(hops, mutations),
        outputs=_output_nodes(gm.graph),
        fake_mode=fake_mode_of([n.meta.get("val") for n in gm.graph.nodes]),
        enable=enable,
        training=not is_inference,
        for_inductor=for_inductor,
    )
    for node in hops:
        # Read again: rewriting an earlier call replaced the nodes this one takes.
        report.calls.append(_rewrite_call(ctx, node, adapter_for(node.target).read(node)))
    _remove_self_copies(gm.graph)
    if for_inductor:
        _separate_outputs_from_inputs(ctx)
        share_input_views(gm.graph)  # fewer view nodes for Inductor to lower
        if _inductor_drops_view_offsets():
            _explicit_as_strided_offsets(gm.graph)
    else:  # Inductor lints the graph itself once its post-grad passes are done
        gm.graph.lint()
    gm.recompile()
    return report


def _mutation_nodes(graph: fx.Graph) -> list[fx.Node]:
    """The calls of every registered functional mutation node, in graph order (looked up by
    target, not by scanning the graph)."""
    return sorted(
        n for t in mutation_targets() for n in graph.find_nodes(op="call_function", target=t)
    )


@dataclasses.dataclass
class _Pass:
    """What one run of the pass knows: the analysis and the facts gathered before rewriting."""

    gm: fx.GraphModule
    analysis: AliasAnalysis
    epilogue: dict[fx.Node, fx.Node]  # placeholder -> copy_(placeholder, new)
    finals: dict[tuple[fx.Node, int], fx.Node | None]  # (HOP, output) -> last version
    outputs: list[fx.Node]  # tensors the graph returns
    fake_mode: FakeTensorMode
    enable: bool
    training: bool
    for_inductor: bool


# -- step 1: what each call writes ------------------------------------------------------------


@dataclasses.dataclass
class _Buffer:
    """One mutable buffer of a call: a v2 base or a v1 mutable tensor, and its output slot."""

    node: fx.Node
    out_index: int  # index into the HOP's flat outputs
    args: list[str]  # labels of the mutable arguments regenerated from it
    chains: list[views.ViewChain]  # the chain of each, relative (Note [Relative chains])
    written: list[Region] | None = None  # memo of _written()


def _buffers(m: Mutation) -> list[_Buffer]:
    bufs = [_Buffer(b, m.info.num_returns + i, [], []) for i, b in enumerate(m.buffers)]
    for slot in m.slots:
        bufs[slot.buffer].args.append(slot.label)
        bufs[slot.buffer].chains.append(slot.relative_chain)
    return bufs


def _written(analysis: AliasAnalysis, buf: _Buffer) -> list[Region]:
    """The regions of ``buf``'s version that the op may write (computed once per buffer)."""
    if buf.written is None:
        val = buf.node.meta["val"]
        geom = (tuple(val.shape), tuple(val.stride()), val.storage_offset())
        itemsize = val.element_size()
        buf.written = [
            analysis.region_of_geometry(
                buf.node,
                _values(c).shifted(geom[2]).geometry(*geom, itemsize=itemsize),
                c.dtype(val.dtype).itemsize,  # Note [Dtype views]: regions are in bytes
            )
            for c in buf.chains
        ]
    return buf.written


def _values(chain: views.ViewChain) -> views.ViewChain:
    """A chain read off graph kwargs holds symbolic values as nodes; use their fake values."""
    if not any(_holds_node(s) for s in chain.steps):
        return chain

    def fake(x: Any) -> Any:
        return fake_values(x)

    steps = tuple(
        type(s)(**{f.name: fake(getattr(s, f.name)) for f in dataclasses.fields(s)})
        for s in chain.steps
    )
    return views.ViewChain(steps)


# -- step 2: decide ---------------------------------------------------------------------------


@dataclasses.dataclass
class _Query:
    """What one decision looks at: a buffer of a call, and the pass's facts about it."""

    ctx: _Pass
    node: fx.Node  # the HOP call
    m: Mutation
    buf: _Buffer
    bufs: list[_Buffer]  # every buffer of the call, ``buf`` among them

    @functools.cached_property
    def root(self) -> fx.Node:
        analysis = self.ctx.analysis
        return analysis.root[analysis.version[self.buf.node]]

    @functools.cached_property
    def written(self) -> list[Region]:
        return _written(self.ctx.analysis, self.buf)


Verdict = tuple[Reason, str] | None  # a reason to clone (and its detail), or None: no objection


def _disabled(q: _Query) -> Verdict:
    return None if q.ctx.enable else (Reason.DISABLED, "")


def _no_value(q: _Query) -> Verdict:
    return None if q.buf.node in q.ctx.analysis.version else (Reason.NO_VALUE, q.buf.node.name)


def _constant(q: _Query) -> Verdict:
    return (Reason.CONSTANT, q.root.name) if q.root.op == "get_attr" else None


def _overlapping_buffer(q: _Query) -> Verdict:
    # Note [A buffer that overlaps itself] in emit.py: writing it in place would write several
    # elements into one location.
    if q.buf.node.op != "placeholder" and overlaps_itself(q.buf.node.meta["val"]):
        return Reason.OVERLAPS_ITSELF, q.buf.node.name
    return None


def _unfixed_layout(q: _Query) -> Verdict:
    """Note [Layouts Inductor chooses]
    Inductor lays out a buffer it computes as it likes (densely) whatever strides the graph
    records, and an ``as_strided`` of it (a pinned layout, an ``as_strided`` step of a chain)
    reinterprets that buffer with the recorded strides: for a gappy or permuted buffer that
    reads and writes the wrong elements, or past the allocation (fuzz seed 20261129 #45: heap
    corruption). Such a buffer, taken other than whole, is cloned into a span whose layout is
    fixed (Note [Clones for Inductor]); contiguous buffers, graph inputs and whole buffers keep
    their own layout."""
    ctx, buf = q.ctx, q.buf
    if not ctx.for_inductor or buf.node.op == "placeholder":
        return None
    whole = all(c.is_alias for c in buf.chains) and not _aliased_args(buf, q.written)
    if whole or (
        contiguous_or_false(buf.node.meta["val"]) and contiguous_or_false(q.root.meta["val"])
    ):
        return None
    return Reason.UNFIXED_LAYOUT, buf.node.name


def _same_buffer_twice(q: _Query) -> Verdict:
    analysis = q.ctx.analysis
    for other in q.bufs:
        if other is not q.buf and analysis.may_overlap(
            other.node, _written(analysis, other), q.buf.node, q.written
        ):
            return Reason.SAME_BUFFER_TWICE, f"with {other.node.name}"
    return None


def _read_by_call(q: _Query) -> Verdict:
    analysis = q.ctx.analysis
    for arg in _other_tensor_args(q.m):
        if not analysis.same_memory(arg, q.buf.node):
            continue  # (no region to compute)
        if analysis.may_overlap(arg, [analysis.region(arg)], q.buf.node, q.written):
            return Reason.READ_BY_CALL, arg.name
    return None


def _graph_input(q: _Query) -> Verdict:
    ctx, root = q.ctx, q.root
    if root.op != "placeholder":
        return None
    if q.buf.node is not root:
        reason = _view_of_input(ctx, q.node, q.buf, root)
        return None if reason is None else (reason, root.name)
    final = ctx.finals.get((q.node, q.buf.out_index))
    copy = ctx.epilogue.get(root)
    if copy is None or copy.args[1] is not final:
        return Reason.GRAPH_INPUT, root.name
    if any(ctx.analysis.same_memory(o, final) for o in ctx.outputs):
        # The graph returns a fresh tensor holding the value it copies back: written in place,
        # the output would be the input itself (pytorch#195451); in a training graph
        # AOTAutograd may also donate it to the backward.
        return (Reason.SAVED_OUTPUT if ctx.training else Reason.RETURNED_INPUT), root.name
    returned = _overwritten_output(ctx, _output_of(q.node, q.buf), copy)
    if returned is not None:
        return Reason.RETURNED_VERSION, f"{root.name}, by {returned.name}"
    return None


def _output_of(node: fx.Node, buf: _Buffer) -> fx.Node | None:
    """The ``getitem`` of HOP ``node`` that holds ``buf``'s new value (``None``: unused)."""
    return next((u for u in node.users if u.args[1] == buf.out_index), None)


def _overwritten_output(ctx: _Pass, own: fx.Node | None, copy: fx.Node) -> fx.Node | None:
    """A graph output that views ``own`` (the value a call writes into a graph input), when
    the graph copies a later value into that input, or ``None``.

    Note [A returned value the copy-back overwrites]
    Written in place, the call's value lives in the input's memory: the HOP's output and, for a
    view of the input, the scatters that put it back (folded into the input). When a later call
    makes the value the graph copies back at its end (``copy.args[1]`` is none of those), an
    output viewing this call's value (``t = x[1].clone()`` after the call, the clone dropped by
    Inductor as a no-op) would read the copied-back value instead (fuzz seed 20261227 #49,
    v1 and v2; PyTorch's built-in gives the same wrong result). The later call decides for
    itself, so this one keeps its clone.
    """
    if own is None:
        return None
    values, todo = {own}, [own]
    while todo:  # the value, its dtype views, and the scatters that write it back
        src = todo.pop()
        for user in src.users:
            if user not in values and (
                user.target in _SAME_BYTES
                or (user.target in SCATTER_VIEWS and len(user.args) > 1 and user.args[1] is src)
            ):
                values.add(user)
                todo.append(user)
    if copy.args[1] in values:
        return None
    analysis = ctx.analysis
    return next((o for o in ctx.outputs for v in values if analysis.same_memory(o, v)), None)


def _lazy_read(q: _Query) -> Verdict:
    # Note [Lazy reads under Inductor]: Inductor computes a pointwise read (or a reduction over
    # one element) only where its result is needed, which can be after an opaque op wrote that
    # memory in place: it does not order such pending reads before a custom op's mutation.
    # PyTorch's own re-inplacing miscompiles this case.
    if not q.ctx.for_inductor:
        return None
    lazy = q.ctx.analysis.read_before_used_after(q.node, q.buf.node, q.written)
    return None if lazy is None else (Reason.LAZY_READ, f"by {lazy.name}")


def _read_later(q: _Query) -> Verdict:
    reader = q.ctx.analysis.first_read_after(q.node, q.buf.node, q.written)
    return None if reader is None else (Reason.READ_LATER, f"by {reader.name}")


class Rule(NamedTuple):
    """One soundness rule: ``check`` returns why the buffer must be cloned, or ``None``."""

    name: str
    check: Callable[[_Query], Verdict]


# The rules, in the order they are asked; a buffer is written in place when none objects. The
# first three say the analysis cannot reason about the buffer at all; the numbers are those of
# ``reinplace``'s docstring.
RULES: tuple[Rule, ...] = (
    Rule("disabled", _disabled),
    Rule("no fake value", _no_value),
    Rule("module constant", _constant),
    Rule("buffer overlaps itself", _overlapping_buffer),
    Rule("layout Inductor chooses", _unfixed_layout),
    Rule("(3) one memory, two mutable buffers", _same_buffer_twice),
    Rule("(2) read by the same call", _read_by_call),
    Rule("(4) graph input: copied back, not returned", _graph_input),
    Rule("(1) lazy read under Inductor", _lazy_read),
    Rule("(1) old value read later", _read_later),
)


def _decide(q: _Query) -> tuple[Reason, str]:
    """Whether ``q.buf`` may be written in place (Reason.INPLACE) or why it must be cloned."""
    for rule in RULES:
        verdict = rule.check(q)
        if verdict is not None:
            return verdict
    return Reason.INPLACE, ""


def _view_of_input(ctx: _Pass, node: fx.Node, buf: _Buffer, root: fx.Node) -> Reason | None:
    """Why a buffer that is a view of graph input ``root`` must be cloned, or ``None``.

    Note [Views of graph inputs]
    A mutated view whose base the HOP could not see (a dtype view has no ``_base``:
    ``kv[l].view(torch.float8_e4m3fn)``) is the HOP's buffer itself; the functional program
    scatters its new value back into the input, and the graph copies that back into the input.
    Writing the view in place writes the input before that copy-back, which is sound when the
    copy-back exists (else the input must keep its old value): the scatters read around what
    they replace (Note [Scatters read around what they replace]), every other later read of the
    old input is checked like any other buffer's, and each scatter of the written view into
    itself is then removed (``_fold_scatters``). Under Inductor every such scatter must fold
    (Inductor cannot lower a scatter of a dtype view of an input's view). The value copied back
    must not also be an output (it would become the input itself, pytorch#195451; in a training
    graph, rule 4 of ``reinplace``).
    """
    copy = ctx.epilogue.get(root)
    if copy is None or not _is_view_chain(buf.node, root):
        return Reason.VIEW_OF_INPUT
    out = _output_of(node, buf)
    if ctx.for_inductor and out is not None and not _all_scatters_fold(ctx.analysis, out, buf.node):
        return Reason.VIEW_OF_INPUT
    if any(ctx.analysis.same_memory(o, copy.args[1]) for o in ctx.outputs):
        # As for a whole input: the output would be the input itself (pytorch#195451).
        return Reason.SAVED_OUTPUT if ctx.training else Reason.RETURNED_INPUT
    if ctx.training and any(ctx.analysis.same_memory(o, root) for o in ctx.outputs):
        return Reason.SAVED_OUTPUT
    if _overwritten_output(ctx, out, copy) is not None:
        return Reason.RETURNED_VERSION
    return None


def _is_view_chain(node: fx.Node, root: fx.Node) -> bool:
    """Whether ``node`` is ``root`` through view ops only."""
    while node is not root:
        if node.op != "call_function" or node.target not in VIEW_OPS or not node.args:
            return False
        node = node.args[0]
    return True


# Views that keep the bytes and the geometry (up to the element size).
_SAME_BYTES = frozenset({_aten.view.dtype, _aten.alias.default, _aten.detach.default})


def _strip_dtype_views(node: Any) -> Any:
    while isinstance(node, fx.Node) and node.target in _SAME_BYTES:
        node = node.args[0]
    return node


def _fold_scatters(ctx: _Pass, buf: fx.Node) -> None:
    """Remove the scatters of ``buf`` (just written in place) into the memory it views.

    ``select_scatter(x, buf', 0, l)``, where ``buf'`` is ``buf`` up to dtype views and ``buf``
    is ``select(x, 0, l)`` up to dtype views (``x`` the same node or the same chain of views),
    puts back what is already there: it is ``x`` (in memory). Its readers now read ``x``'s
    memory, whose version joins ``x``'s memory class, so later writes into it are checked
    against the old readers of both. ``x`` may itself be scattered into its base next (the
    write-back of a view of a view): it is folded the same way.
    """
    graph, analysis = ctx.gm.graph, ctx.analysis
    starts = [buf]
    while starts:
        start = starts.pop()
        view = _strip_dtype_views(start)
        if not isinstance(view, fx.Node) or view.op != "call_function" or not view.args:
            continue
        todo, seen = [start], {start}
        while todo:
            src = todo.pop()
            for user in list(src.users):
                if user.target in _SAME_BYTES and user not in seen:
                    seen.add(user)
                    todo.append(user)
                elif _folds(analysis, user, src, view):
                    target = user.args[0]
                    analysis.merge(target, user)
                    analysis.forget(user)
                    user.replace_all_uses_with(target)
                    graph.erase_node(user)
                    starts.append(target)


def _folds(analysis: AliasAnalysis, user: fx.Node, src: fx.Node, view: fx.Node) -> bool:
    """Whether ``user`` scatters ``src`` (the bytes of ``view``) back where ``view`` took them."""
    return (
        user.target in SCATTER_VIEWS
        and len(user.args) > 1
        and user.args[1] is src
        and SCATTER_VIEWS[user.target] is view.target
        and _same_view(user.args[0], view.args[0])
        and _same_view_args(user, view)
        and src.meta["val"].dtype == user.meta["val"].dtype
        and user in analysis.version
        and user.args[0] in analysis.version
    )


def _all_scatters_fold(analysis: AliasAnalysis, out: fx.Node, buf: fx.Node) -> bool:
    """Whether every scatter of ``out`` (a HOP output, through views keeping its bytes) would
    be folded once ``buf`` is written in place and ``out`` replaced by it: then no scatter of a
    dtype view of a graph input reaches Inductor, whose lowering does not support one."""
    view = _strip_dtype_views(buf)
    if not isinstance(view, fx.Node) or view.op != "call_function" or not view.args:
        # nothing left to fold: ``out`` must not be scattered anywhere else
        return not any(u.target in SCATTER_VIEWS and u.args[1] is out for u in out.users)
    todo, seen = [out], {out}
    while todo:
        src = todo.pop()
        for user in src.users:
            if user.target in _SAME_BYTES and user not in seen:
                seen.add(user)
                todo.append(user)
            elif user.target in SCATTER_VIEWS:
                # and then the scatter of that scatter (the write-back of a view of a view);
                # a scatter *into* these bytes stays a scatter into a view of an input
                if not (
                    user.args[1] is src
                    and _folds(analysis, user, src, view)
                    and _all_scatters_fold(analysis, user, user.args[0])
                ):
                    return False
    return True


def _same_view(a: Any, b: Any) -> bool:
    """Whether two nodes are one tensor, or the same chain of view ops of one tensor."""
    while a is not b:
        if not (
            isinstance(a, fx.Node)
            and isinstance(b, fx.Node)
            and a.op == b.op == "call_function"
            and a.target is b.target
            and a.target in VIEW_OPS
            and a.args[1:] == b.args[1:]
            and a.kwargs == b.kwargs
            and a.args
            and b.args
        ):
            return False
        a, b = a.args[0], b.args[0]
    return True


def _same_view_args(scatter: fx.Node, view: fx.Node) -> bool:
    """Whether a scatter replaces exactly the part of its input that ``view`` selects."""
    try:
        a = scatter.normalized_arguments(None, normalize_to_only_use_kwargs=True)
        b = view.normalized_arguments(None, normalize_to_only_use_kwargs=True)
    except Exception:
        return False
    if a is None or b is None:
        return False
    a = {k: v for k, v in a.kwargs.items() if k not in ("input", "self", "src")}
    b = {k: v for k, v in b.kwargs.items() if k not in ("input", "self")}
    return a == b


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


def _lazy_under_inductor(reader: fx.Node) -> bool:
    """Whether Inductor may evaluate ``reader`` later than its place in the graph."""
    target = reader.target
    if not isinstance(target, torch._ops.OpOverload):
        return False  # HOPs, getitem, output
    return target.namespace in ("aten", "prims") and target not in _EXTERN_READERS


def _aliased_args(buf: _Buffer, written: list) -> bool:
    """Whether two of the arguments regenerated from ``buf`` overlap."""
    return any(overlaps(a, b) for i, a in enumerate(written) for b in written[i + 1 :])


def _output_nodes(graph: fx.Graph) -> list[fx.Node]:
    out = graph.output_node()
    return [a for a in pytree.tree_leaves(out.args) if isinstance(a, fx.Node)]


def _other_tensor_args(m: Mutation) -> list[fx.Node]:
    """The tensors the call reads besides its buffers (a buffer node may appear here too: that
    is exactly the aliasing this check exists for)."""
    return [a for v in m.kwargs.values() for a in _nodes_in(v)]


def _nodes_in(value: Any) -> list[fx.Node]:
    if isinstance(value, fx.Node):
        return [value]
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in _nodes_in(v)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _nodes_in(v)]
    return []


def _holds_node(step: Any) -> bool:
    return any(
        isinstance(x, fx.Node)
        or (isinstance(x, (list, tuple)) and any(isinstance(y, fx.Node) for y in x))
        for x in vars(step).values()
    )


def _epilogue_copies(graph: fx.Graph) -> dict[fx.Node, fx.Node]:
    """placeholder -> the ``copy_(placeholder, new)`` that writes its final value back."""
    out = {}
    for n in graph.find_nodes(op="call_function", target=_aten.copy_.default):
        dst = n.args[0]
        if isinstance(dst, fx.Node) and dst.op == "placeholder":
            out[dst] = n
    return out


def _final_versions(
    hops: list[fx.Node], mutations: dict[fx.Node, Mutation]
) -> dict[tuple[fx.Node, int], fx.Node | None]:
    """(HOP, output index) -> the last version of that buffer along a chain of HOP calls that
    each take the previous one's output as a buffer (layer after layer of a KV cache)."""
    outputs = {}  # (hop, index) -> getitem node
    per_hop: dict[fx.Node, list] = {}
    for hop in hops:
        for user in hop.users:
            if user.target is operator.getitem:
                outputs[(hop, user.args[1])] = user
                per_hop.setdefault(hop, []).append((hop, user.args[1]))
    consumer = {}  # getitem node -> (hop, index) of the call that takes it as a buffer
    for hop in hops:
        for buf in _buffers(mutations[hop]):
            consumer.setdefault(buf.node, (hop, buf.out_index))
    finals: dict[tuple[fx.Node, int], fx.Node | None] = {}
    for hop in reversed(hops):  # a consumer comes later in the graph, so it is done first
        for key in per_hop.get(hop, ()):
            nxt = consumer.get(outputs[key])
            finals[key] = outputs[key] if nxt is None else finals.get(nxt)
    return finals


# -- step 3: rewrite --------------------------------------------------------------------------


def _rewrite_call(ctx: _Pass, node: fx.Node, m: Mutation) -> CallReport:
    info = m.info
    bufs = _buffers(m)
    analysis, graph = ctx.analysis, ctx.gm.graph
    decisions, new_bufs, arg_bases = [], [], []
    outs = {u.args[1]: u for u in node.users if u.target is operator.getitem}
    with graph.inserting_before(node):
        for buf in bufs:
            reason, detail = _decide(_Query(ctx, node, m, buf, bufs))
            decisions.append(
                Decision(
                    tuple(buf.args),
                    buf.node.name,
                    tuple(str(c) for c in buf.chains),
                    reason,
                    _nbytes(buf.node.meta.get("val")),
                    detail,
                )
            )
            log.debug("%s %s %s: %s %s", node.name, info.qualname, buf.args, reason.value, detail)
            out = outs.get(buf.out_index)
            aliased = _aliased_args(buf, _written(analysis, buf)) if ctx.for_inductor else False
            if reason is Reason.INPLACE:
                new_bufs.append(buf.node)
                pin = aliased or _realize_whole(ctx, buf)
                arg_bases.append(pin_layout(ctx, buf.node) if pin else buf.node)
                if out is not None:
                    analysis.merge(buf.node, out)
            else:
                direct = all(c.is_alias for c in buf.chains)
                clone = emit_clone(ctx, buf.node, aliased=aliased, direct=direct)
                new_bufs.append(clone)
                arg_bases.append(clone)
                if out is not None:
                    analysis.track(clone, out)
        call = _emit_call(ctx, node, m, arg_bases)
    for index, user in outs.items():
        if index < info.num_returns:
            repl = call if info.num_returns == 1 else getitem_of(graph, call, index, user)
            if user in analysis.version:
                analysis.track(repl, user)
        else:
            repl = new_bufs[index - info.num_returns]
        user.replace_all_uses_with(repl)
        graph.erase_node(user)
    graph.erase_node(node)
    for buf, decision in zip(bufs, decisions):
        if decision and buf.node.op != "placeholder":
            _fold_scatters(ctx, buf.node)
    return CallReport(node.name, info.qualname, m.strategy, decisions)


def _realize_whole(ctx: _Pass, buf: _Buffer) -> bool:
    """Whether to pin the layout of a buffer written in place through views (``pin_layout``).

    Note [Views of unrealized buffers under Inductor]
    When the op takes a view (``buf[1]``) of a buffer Inductor has not computed yet (``x + 1``),
    Inductor computes that view's elements into a buffer of their own for the op, one more
    allocation of the view's size, and then the buffer itself. An ``as_strided`` alias of the
    whole buffer makes Inductor compute the buffer once, with exactly its strides, and hand the
    op a view of it. Graph inputs are computed already.
    """
    return (
        ctx.for_inductor
        and buf.node.op != "placeholder"
        and not all(c.is_alias for c in buf.chains)
    )


def _emit_call(ctx: _Pass, node: fx.Node, m: Mutation, new_bufs: list[fx.Node]) -> fx.Node:
    """The direct op call, with each mutable argument regenerated from its (new) buffer."""
    info = m.info
    # Note [Arguments keep their identity] in hops/common.py.
    distinct = Distinct(lambda n: emit_fresh_alias(ctx, n), lambda n: n)
    shared: dict = {}  # the chains' common prefixes, emitted once
    kwargs = m.call_kwargs(
        [distinct(emit_view(ctx, new_bufs[s.buffer], s.relative_chain, shared)) for s in m.slots]
    )
    args = tuple(kwargs.pop(a.name) for a in info.op._schema.arguments if not a.kwarg_only)
    # The HOP's fake value already holds the op's outputs: no need to run its fake kernel again.
    hop_val = node.meta.get("val")
    # An op returning its arguments (Note [Ops that return their arguments]) returns what it
    # is given: its fake kernel says so.
    val = (
        NO_VAL
        if hop_val is None or info.returned_args
        else unpack_outputs(info, tuple(hop_val[: info.num_returns]))
    )
    call = emit(ctx, info.op, args, kwargs, val=val)
    inherit_unbacked_bindings(call, node, info.num_returns)  # Note [Unbacked outputs]
    # Note [Why the op travels by name]: Inductor constrains a needs_exact_strides op's inputs
    # to these values, which have exactly the strides eager passes.
    call.meta["eager_input_vals"] = fake_values((args, kwargs))
    return call


def _nbytes(val: Any) -> int:
    if not isinstance(val, torch.Tensor):
        return 0
    numel = val.numel()
    n = numel * val.element_size()
    return int(n) if isinstance(n, int) else int(getattr(n, "node").hint or 0)


def _check_vals(hops: list[fx.Node]) -> None:
    for hop in hops:
        for arg in hop.all_input_nodes:
            if not isinstance(arg.meta.get("val"), (FakeTensor, torch.SymInt, int)):
                raise GraphError(
                    f"autofunc.reinplace needs fake values in meta['val'] (node {arg.name}, an "
                    f"input of {hop.name}, has none); run FakeTensorProp on the graph first"
                )


def _view_base(node: fx.Node) -> fx.Node:
    while node.op == "call_function" and node.target in VIEW_OPS:
        node = node.args[0]
    return node


def _as_strided_of_roots(graph: fx.Graph) -> None:
    """Rewrite ``as_strided(view, size, stride, offset)`` of a view of a computed buffer into
    ``as_strided(buffer, size, stride, offset)``.

    Note [as_strided of a view under Inductor]
    ``as_strided`` takes its storage offset absolutely, so both forms are one tensor in eager.
    Inductor, though, computes a view of a buffer it has not realized as a buffer of the view's
    elements only and applies the offset to that: the result reaches past it (fuzz seed
    20261125 #242 read uninitialized memory, #121 returned a tensor outside its storage; plain
    aten code does the same). Once the pass moves that buffer's other uses (a clone of it, a
    write in place), nothing else makes Inductor realize it whole, so the pass asks for the
    buffer itself. Only explicit int offsets over a chain of same-dtype views are rewritten.
    """
    for node in list(graph.find_nodes(op="call_function", target=_aten.as_strided.default)):
        src = node.args[0]
        if len(node.args) != 4 or node.kwargs or not isinstance(node.args[3], int):
            continue
        root = _same_dtype_view_root(src)
        if root is src or not isinstance(root, fx.Node) or root.op == "placeholder":
            continue
        sval, rval = src.meta.get("val"), root.meta.get("val")
        if not (isinstance(sval, torch.Tensor) and isinstance(rval, torch.Tensor)):
            continue
        if sval.dtype != rval.dtype or StorageWeakRef(sval.untyped_storage()) != StorageWeakRef(
            rval.untyped_storage()
        ):
            continue
        node.args = (root, *node.args[1:])


@functools.cache
def _inductor_drops_view_offsets() -> bool:
    """Whether this torch's Inductor lowers ``as_strided(view, size, stride)`` (no offset) at
    offset 0 of the view's buffer instead of at the view's own offset (pytorch#175325, fixed by
    pytorch#180581 after torch 2.11). Read off the lowering's source: the fix reads the view's
    layout offset when none is given. Where the source cannot be read, the version decides."""
    import inspect

    from torch._inductor import lowering

    try:
        return "get_layout().offset" not in inspect.getsource(lowering.as_strided)
    except (OSError, TypeError):
        return torch.__version__ < "2.12"


def _explicit_as_strided_offsets(graph: fx.Graph) -> None:
    """Give every offset-less ``as_strided`` of a view the view's root and an explicit offset:
    ``as_strided(view, size, stride)`` -> ``as_strided(root, size, stride, k)``, where ``k`` is
    the view's offset from the root's start (through a ``view(dtype)`` of the root where the
    view has another dtype of the same item size).

    Note [as_strided offsets on torch 2.11]
    The pass emits relative views (Note [Storage offsets]): ``as_strided`` without an offset
    keeps its input's. Inductor up to torch 2.11 drops that offset when the input is a view
    (pytorch#175325): the op then writes and reads at the start of the view's buffer, a silent
    wrong result (on torch 2.11: fuzz seed 1234 #203, seed 0 #0, and the corpus program
    ``kv_fp8_whole_layer`` on CUDA, whose second layer was written over the first). That
    Inductor takes an explicit offset from the start of the memory it holds: a buffer it
    computes starts at offset 0, and a graph input at its own data pointer (later torch rebases
    explicit offsets on inputs, pytorch#184232, and has no such bug, so this runs only where
    the bug is). Only static offsets are rewritten.
    """
    for node in list(graph.find_nodes(op="call_function", target=_aten.as_strided.default)):
        if len(node.args) != 3 or node.kwargs:
            continue
        src = node.args[0]
        root = src
        while (
            isinstance(root, fx.Node)
            and root.op == "call_function"
            and root.target in VIEW_OPS
            and isinstance(root.args[0], fx.Node)
        ):
            root = root.args[0]
        if root is src or not isinstance(root, fx.Node):
            continue
        sval, rval = src.meta.get("val"), root.meta.get("val")
        if not (isinstance(sval, torch.Tensor) and isinstance(rval, torch.Tensor)):
            continue
        offset = sval.storage_offset() - rval.storage_offset()
        if not isinstance(offset, int) or sval.dtype.itemsize != rval.dtype.itemsize:
            continue
        base = root
        if rval.dtype != sval.dtype:
            with graph.inserting_before(node):
                base = graph.call_function(_aten.view.dtype, (root, sval.dtype))
            base.meta["val"] = rval.view(sval.dtype)
        node.args = (base, *node.args[1:], offset)


def _same_dtype_view_root(node: Any) -> Any:
    """The node a chain of same-dtype views starts from (``node`` itself if it is no view)."""
    while (
        isinstance(node, fx.Node)
        and node.op == "call_function"
        and node.target in VIEW_OPS
        and node.target is not _aten.view.dtype
        and isinstance(node.args[0], fx.Node)
    ):
        node = node.args[0]
    return node


def _keep_old_copy_sources(graph: fx.Graph) -> None:
    """Note [Copies of inputs that the graph mutates]: ``dst[:] = src[:, :]; op(src)`` must
    give ``dst`` the old ``src``. Inductor's ``remove_noop_ops`` (before this pass) replaces the
    functional copy of ``src`` by ``src`` itself, leaving the epilogue ``copy_(dst, src)`` after
    ``copy_(src, new)``: it now reads the new value (pytorch#198131, which also hits a plain
    ``src.add_(1)``). In a functional graph a graph input always denotes its value on entry, so
    such a source is copied where it is defined, before anything writes it; the copy is a lazy
    read Inductor realizes when the input is mutated, and the analysis sees it as a read of the
    old value (the op then writes ``src`` only if that is still sound)."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    first_write: dict[fx.Node, int] = {}
    copies = list(graph.find_nodes(op="call_function", target=_aten.copy_.default))
    for n in copies:
        dst = n.args[0]
        if isinstance(dst, fx.Node) and dst.op == "placeholder":
            first_write.setdefault(dst, order[n])
    for n in copies:
        src = n.args[1]
        if not isinstance(src, fx.Node) or not isinstance(n.args[0], fx.Node):
            continue
        base = _view_base(src)
        if base is _view_base(n.args[0]) or first_write.get(base, order[n]) >= order[n]:
            continue
        inputs = graph.find_nodes(op="placeholder")
        anchor = src if not inputs or order[src] > order[inputs[-1]] else inputs[-1]
        with graph.inserting_after(anchor):
            old = graph.call_function(_aten.clone.default, (src,))
        old.meta["val"] = src.meta["val"].clone()
        n.replace_input_with(src, old)


# Functional ops that Inductor's own re-inplacing (which runs after this pass) may turn into a
# write of their first argument: the result then *is* that argument's buffer.
_INDUCTOR_INPLACEABLE = frozenset(
    {
        _aten.select_scatter.default,
        _aten.slice_scatter.default,
        _aten.diagonal_scatter.default,
        _aten.as_strided_scatter.default,
        _aten.index_put.default,
        _aten._unsafe_index_put.default,
    }
)


def _written_input(node: fx.Node) -> fx.Node | None:
    """The graph input whose buffer ``node``'s value may end up in after Inductor re-inplaces
    the scatters it is built from (through views), or ``None``."""
    scattered = False
    while node.op == "call_function" and (
        node.target in VIEW_OPS or node.target in _INDUCTOR_INPLACEABLE
    ):
        scattered = scattered or node.target in _INDUCTOR_INPLACEABLE
        node = node.args[0]
    return node if scattered and node.op == "placeholder" else None


def _separate_outputs_from_inputs(ctx: _Pass) -> None:
    """Note [Returned scatters under Inductor]: ``y = x.select_scatter(...); op(y[1]);
    x.copy_(y); return y`` returns a tensor of its own in eager. Inductor re-inplaces a scatter
    into a graph input whenever the graph copies a value back into that input, without looking
    at the graph's outputs, so ``y`` would come back as ``x`` itself (pytorch#195451). Each
    output built by scatters into such an input is returned as a copy instead (eager holds two
    tensors as well)."""
    graph = ctx.gm.graph
    copied_back = {
        n.args[0]
        for n in graph.find_nodes(op="call_function", target=_aten.copy_.default)
        if isinstance(n.args[0], fx.Node) and n.args[0].op == "placeholder"
    }
    out = graph.output_node()
    clones: dict[fx.Node, fx.Node] = {}

    def separate(arg: Any) -> Any:
        if not isinstance(arg, fx.Node) or _written_input(arg) not in copied_back:
            return arg
        if arg not in clones:
            with graph.inserting_before(_copy_point(ctx, arg, out)):
                clones[arg] = emit_clone(ctx, arg)
        return clones[arg]

    out.args = fx.node.map_arg(out.args, separate)


def _copy_point(ctx: _Pass, arg: fx.Node, out: fx.Node) -> fx.Node:
    """Where to copy the returned ``arg``: before the first later scatter built on its memory
    (Inductor re-inplaces such a scatter into the input too, and would overwrite ``arg``'s
    memory before a copy placed after it reads it; fuzz seed 20261128 #6), else before the
    output. A graph input is copied at the end: its returned value is the one copied back."""
    if arg.op == "placeholder":
        return out
    node = arg.next
    while node is not out:
        base = node.args[0] if node.op == "call_function" and node.args else None
        if (
            node.target in _INDUCTOR_INPLACEABLE
            and isinstance(base, fx.Node)
            and ctx.analysis.same_memory(base, arg)
        ):
            return node
        node = node.next
    return out


def _remove_self_copies(graph: fx.Graph) -> None:
    """``copy_(x, x)`` is what an epilogue copy-back becomes once its buffer is written in place."""
    for n in list(graph.find_nodes(op="call_function", target=_aten.copy_.default)):
        if n.args[0] is n.args[1]:
            n.replace_all_uses_with(n.args[0])
            graph.erase_node(n)
