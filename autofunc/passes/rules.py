"""Step 3b's decision in the re-inplace pass (Note [Pipeline] in ``reinplace.py``): the
soundness rules. Each rule looks at one buffer of one call (a :class:`Query`) and returns why it
must be cloned, or ``None``; ``RULES`` asks them in order and :func:`decide` returns the first
objection. What a rule must respect about the backend (the rules "a layout the backend
chooses", "graph input: copied back, not returned" and "a read the backend evaluates late") it
asks ``ctx.policy`` (``policy.py``). Nothing here rewrites the graph.

The rules, in the order ``RULES`` asks them, and the reasons each gives (a test checks this
table against ``RULES``). The labels R1, R2, ... belong to this table only; code and prose name
a rule by its name (``Rule.name``), so a rule inserted renumbers nothing else. A new rule is
a ``Rule`` at its place in ``RULES``, its row here, a :class:`Reason` member below where no
existing one fits, and its case in tests/passes/test_rules.py: nothing else changes.

==== =================================== ==================================================
R1   disabled                            ``DISABLED``: ``enable=False``
R2   no fake value                       ``NO_VALUE``: nothing to analyse
R3   module constant                     ``CONSTANT``
R4   buffer overlaps itself              ``OVERLAPS_ITSELF``: a stride-0 value the graph computes
R5   a layout the backend chooses        ``UNFIXED_LAYOUT``, ``LAYOUT_FIXED_LATE``
                                         (``Policy.chooses_layout``)
R6   one memory, two mutable buffers     ``SAME_BUFFER_TWICE``: an overlapping buffer of the
                                         call is already written in place
R7   read by the same call               ``READ_BY_CALL``: another argument reads what it writes
R8   graph input: copied back, not       ``GRAPH_INPUT``, ``VIEW_OF_INPUT``, ``RETURNED_INPUT``,
     returned                            ``SAVED_OUTPUT``, ``RETURNED_VERSION``
R9   a read the backend evaluates late   ``LAZY_READ`` (``Policy.late_reads``)
R10  old value read later                ``READ_LATER``
==== =================================== ==================================================
"""

from __future__ import annotations

import enum
from typing import Any, Callable, NamedTuple

import torch.fx as fx

from ..symbolic import contiguous_or_false, overlaps_itself, nbytes_hint
from .memory_ops import SCATTER_VIEWS
from .context import Buffer, Pass, Provided, Query, written_regions
from .facts import aliased_args, other_tensor_args, output_of, output_positions
from .scatters import SAME_BYTES, all_scatters_fold
from .walks import users_through_views, view_root, view_walk

__all__ = ["RULES", "Reason", "Rule", "Ruling", "Verdict", "decide"]

class Reason(enum.Enum):
    """Why a buffer was written in place (``INPLACE``) or kept its clone: the rules' objections
    (the table above), and the report's vocabulary (``report.py`` re-exports it)."""

    INPLACE = "written in place"
    DISABLED = "re-inplacing is disabled"
    READ_LATER = "its old value is read later"
    READ_BY_CALL = "another argument of the same call reads the memory it writes"
    SAME_BUFFER_TWICE = "the same memory is passed as two mutable buffers"
    GRAPH_INPUT = (
        "a graph input the graph copies no value back into after the call (it must keep its "
        "old value)"
    )
    SAVED_OUTPUT = (
        "a graph input whose new value a training graph also returns (saved for backward)"
    )
    RETURNED_INPUT = (
        "a graph input whose new value the graph also returns (the output would alias the input)"
    )
    RETURNED_VERSION = (
        "a graph input: the graph returns a view of the value written here, and copying a later "
        "value back into the input would overwrite it"
    )
    LAZY_READ = "a value read from it earlier is used after the call (Inductor may compute it late)"
    VIEW_OF_INPUT = "a view of a graph input (its mutation is scattered back, not copied)"
    CONSTANT = "a constant of the module"
    UNFIXED_LAYOUT = (
        "Inductor chooses this computed buffer's layout, and the views the op gets assume the "
        "recorded strides, which are not contiguous"
    )
    LAYOUT_FIXED_LATE = (
        "Inductor would fix this computed buffer's layout (its recorded strides are not "
        "contiguous) only at the call, after other nodes used the layout it had"
    )
    REWRITTEN_ROOT = (
        "Inductor may turn the scatter this buffer views into a write into other memory (its "
        "input's buffer, or a clone), laid out otherwise than the graph records"
    )
    OVERLAPS_ITSELF = (
        "it overlaps itself (a stride-0 view the graph computes); the op gets a dense copy"
    )
    NO_VALUE = "no fake value to analyse"


# -- step 3b: decide --------------------------------------------------------------------------


# a reason to clone (and its detail), consent on a condition, or None: no objection
Verdict = tuple[Reason, str] | Provided | None


class Ruling(NamedTuple):
    """What ``decide`` rules for one buffer: in place (``Reason.INPLACE``) or why not, and the
    action that must come first where a rule consented on a condition."""

    reason: Reason
    detail: str
    realize: Any = None  # the policy's plan (``Provided.realize``)


def _disabled(q: Query) -> Verdict:
    return None if q.ctx.enable else (Reason.DISABLED, "")


def _no_value(q: Query) -> Verdict:
    return None if q.buf.node in q.ctx.analysis.version else (Reason.NO_VALUE, q.buf.node.name)


def _constant(q: Query) -> Verdict:
    return (Reason.CONSTANT, q.root.name) if q.root.op == "get_attr" else None


def _overlapping_buffer(q: Query) -> Verdict:
    # Note [A buffer that overlaps itself] in emit.py: writing it in place would write several
    # elements into one location.
    if q.buf.node.op != "placeholder" and overlaps_itself(q.buf.node.meta["val"]):
        return Reason.OVERLAPS_ITSELF, q.buf.node.name
    return None


def _unfixed_layout(q: Query) -> Verdict:
    """Note [Layouts Inductor chooses]
    Inductor lays out a buffer it computes as it likes (densely) whatever strides the graph
    records, and an ``as_strided`` of it (a pinned layout, an ``as_strided`` step of a chain)
    reinterprets that buffer with the recorded strides: for a gappy or permuted buffer that
    reads and writes the wrong elements, or past the allocation (fuzz seed 20261129 #45: heap
    corruption). Such a buffer, taken other than whole, is cloned into a span whose layout is
    fixed (Note [Clones for Inductor]); contiguous buffers, graph inputs and whole buffers keep
    their own layout, and so do buffers whose root the pass pins (the policy does not count
    them as chosen: Note [A pinned root keeps its layout] in backends/inductor/policy.py)."""
    ctx, buf = q.ctx, q.buf
    if ctx.policy.rewrites_root(buf.node):  # Note [A pinned scatter Inductor rewrites]
        return None if ctx.policy.takes_any_layout(q) else (Reason.REWRITTEN_ROOT, buf.node.name)
    if contiguous_or_false(buf.node.meta["val"]) and contiguous_or_false(q.root.meta["val"]):
        return None
    if not ctx.policy.chooses_layout(buf.node):
        return None
    whole = all(c.is_alias for c in buf.chains) and not aliased_args(buf, q.written)
    if not whole or not q.m.fixes_layouts:  # Note [Region operands keep no computed layout]
        if ctx.policy.takes_any_layout(q):  # Note [A write no one reads]
            return None
        return Reason.UNFIXED_LAYOUT, buf.node.name
    # Note [A layout fixed after it was used]
    # A whole buffer keeps Inductor's layout until the op, which needs exactly the recorded
    # strides, fixes it: Inductor changes a flexible layout in place then, also when another
    # node already took a view of the buffer under the layout it had (``v = b.t()`` read by an
    # extern kernel before ``op(b)``): that view then reads the wrong elements (fuzz seed
    # 20261249 #3; PyTorch's built-in is wrong the same way). Such a buffer is cloned.
    if any(u is not q.node and u < q.node for u in users_through_views(buf.node)):
        return Reason.LAYOUT_FIXED_LATE, buf.node.name
    return None


def _same_buffer_twice(q: Query) -> Verdict:
    """Note [One memory, two mutable buffers]
    A node's semantics give each of its buffers a copy of its own, also when two of them are
    one memory (a kernel given one tensor as two written pointers; ``op(x, y)`` once Inductor
    removed ``y = x.clone()`` as a no-op). One of them may still be written in place: the
    others are copied before the call, from the old value, as the semantics say. So a buffer
    objects only when an overlapping buffer of the same call was already written in place
    (the buffers are decided in turn, Note [Buffers of one call decided in turn])."""
    analysis = q.ctx.analysis
    for other in q.inplace:
        if other is not q.buf and analysis.may_overlap(
            other.node, written_regions(analysis, other), q.buf.node, q.written
        ):
            return Reason.SAME_BUFFER_TWICE, f"with {other.node.name}"
    return None


def _read_by_call(q: Query) -> Verdict:
    analysis = q.ctx.analysis
    for arg in other_tensor_args(q.m):
        if not analysis.same_memory(arg, q.buf.node):
            continue  # (no region to compute)
        if analysis.may_overlap(arg, [analysis.region(arg)], q.buf.node, q.written):
            return Reason.READ_BY_CALL, arg.name
    return None


def _graph_input(q: Query) -> Verdict:
    """Rule "graph input: copied back, not returned": a buffer in a graph input's memory is
    written in place only when the graph copies a value back into that input after the call and
    the outputs cannot tell.

    Note [Copied back later]
    A functional graph denotes a mutated input by copying its final value ``v`` back at the end
    (``copy_(input, v)``). Once the graph does that, what the input holds between the call and
    that copy is the pass's to choose, provided nothing reads the old value there (the rules
    "old value read later" and "read by the same call", which see every read of the input's
    memory) and the outputs do not alias what the op wrote (below). ``v`` need not be this
    call's value, nor the last of a chain of calls: a native in-place op (``kv[1, 0].mul_(2)``),
    an in-place collective (``dist.all_reduce``) or a later call's clone may make it; the copy
    overwrites the whole input either way. Without a copy after the call, the input must keep
    its old value.
    """
    ctx = q.ctx
    root = ctx.analysis.input_of(q.buf.node)  # Note [Values merged into an input's memory]
    if root is None:
        return None
    root = _own_input(q.buf.node, root)
    copy = ctx.epilogue.get(root)
    if copy is None or ctx.analysis.position[copy] < ctx.analysis.position[q.node]:
        return Reason.GRAPH_INPUT, root.name
    out = output_of(q.node, q.buf)
    whole = q.buf.node is root
    if not whole:
        reason = _view_of_input(ctx, q.buf, root, out)
        if reason is not None:
            return reason, root.name
    reason = _returned_copy_back(ctx, copy)
    if reason is None and not whole and ctx.training:
        # a training graph's output anywhere in a view's input may be donated to the backward
        if any(ctx.analysis.same_memory(o, root) for o in ctx.outputs):
            reason = Reason.SAVED_OUTPUT
    if reason is not None:
        return reason, root.name
    returned = _overwritten_output(ctx, out, copy)
    if returned is not None:
        return Reason.RETURNED_VERSION, f"{root.name}, by {returned.name}" if whole else root.name
    return None


def _own_input(node: fx.Node, root: fx.Node) -> fx.Node:
    """The graph input ``node`` is (a view of), where that is another input than ``root``, the
    first input of its storage; else ``root``.

    Note [Inputs that share a storage]
    Inputs that are views of one storage (vLLM's per-layer caches, slices of one buffer) reach
    the graph as placeholders of one fake storage, so the analysis puts them in one version
    rooted at the first, and compares their regions like those of views of one input. Each is
    still a graph input of its own: AOTAutograd copies its final value back into it (not into
    the first), and inputs that overlap would have been merged into one synthetic base. So a
    buffer in the second one is judged by that input's copy-back.
    """
    base = view_root(node)
    return base if base.op == "placeholder" else root


def _view_of_input(ctx: Pass, buf: Buffer, root: fx.Node, out: fx.Node | None) -> Reason | None:
    """Why a buffer that is a view of graph input ``root`` cannot be written in place whatever
    the copy-back and the outputs (those ``_graph_input`` checks for whole inputs too), or
    ``None``.

    Note [Views of graph inputs]
    A mutated view whose base the HOP could not see (a dtype view has no ``_base``:
    ``kv[l].view(torch.float8_e4m3fn)``) is the HOP's buffer itself; the functional program
    scatters its new value back into the input, and the graph copies that back into the input.
    Writing the view in place writes the input before that copy-back, which is sound when the
    copy-back exists (else the input must keep its old value): the scatters read around what
    they replace (Note [Scatters read around what they replace]), every other later read of the
    old input is checked like any other buffer's, and each scatter of the written view into
    itself is then removed (``fold_scatters``). Under Inductor every such scatter must fold
    (Inductor cannot lower a scatter of a dtype view of an input's view).
    """
    if not any(n is root for n in view_walk(buf.node)):  # ``buf`` is ``root`` through views
        return Reason.VIEW_OF_INPUT
    if (
        ctx.policy.must_fold_scatters(buf.node)
        and out is not None
        and not all_scatters_fold(ctx.analysis, out, buf.node)
    ):
        return Reason.VIEW_OF_INPUT
    return None


def _returned_copy_back(ctx: Pass, copy: fx.Node) -> Reason | None:
    """Why the outputs forbid writing a graph input in place, given the value ``copy`` writes
    back into it, or ``None``.

    Note [Returned values of written inputs]
    An output in the memory of the value the graph copies back is a fresh tensor holding that
    value (``return kv[0].clone()`` whose clone Inductor dropped as a no-op). Written in place,
    that memory becomes the input's, and the output would be a view of the caller's input,
    which eager never returns for a fresh tensor (pytorch#195451, where PyTorch's built-in
    returns exactly that). When each such output *is* that value (the same version, not an
    older one that shares its memory), the input holds it at the end of the graph, so the
    output is copied there (``outputs.copy_returned_inputs``): the copy eager made, never a copy of
    the whole input. In a training graph the output may also be saved for the backward, which
    AOTAutograd may let overwrite it, so the clone stays.
    """
    final = copy.args[1]
    analysis = ctx.analysis
    shared = [o for o in ctx.outputs if analysis.same_memory(o, final)]
    if not shared:
        return None
    if not all(analysis.version.get(o) == analysis.version.get(final) for o in shared):
        return Reason.SAVED_OUTPUT if ctx.training else Reason.RETURNED_INPUT
    if ctx.training and not _only_saved(ctx, shared):
        return Reason.SAVED_OUTPUT
    return None


def _only_saved(ctx: Pass, outputs: list[fx.Node]) -> bool:
    """Whether the forward returns each of ``outputs`` only as a tensor it saves for the
    backward, where the pass can keep the backward from reusing its memory.

    Note [Saved values of written inputs]
    A training forward returns the tensors its backward needs (``h * buf`` saves the new
    ``buf``), and AOTAutograd lets the backward reuse the memory of those it deems its own
    (``bw_donated_idxs``: fresh in the functional graph). Written in place, the saved new value
    is the caller's buffer, which the backward would then overwrite (PyTorch's built-in does
    exactly that: the buffer is wrong after ``backward()``). When every output in that memory
    is such a saved tensor and is the value copied back, the pass writes in place and drops the
    tensor from ``bw_donated_idxs`` (``outputs.keep_saved_inputs``): the backward reads the buffer, as
    eager's backward reads the tensor it saved. A user output there keeps the clone.
    """
    saved = ctx.saved
    if saved is None:
        return False
    out = ctx.gm.graph.output_node()
    return all(
        (places := output_positions(out, o)) and all(p in saved.positions for p in places)
        for o in outputs
    )


def _overwritten_output(ctx: Pass, own: fx.Node | None, copy: fx.Node) -> fx.Node | None:
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
                user.target in SAME_BYTES
                or (user.target in SCATTER_VIEWS and len(user.args) > 1 and user.args[1] is src)
            ):
                values.add(user)
                todo.append(user)
    if copy.args[1] in values:
        return None
    analysis = ctx.analysis
    return next((o for o in ctx.outputs for v in values if analysis.same_memory(o, v)), None)


def _lazy_read(q: Query) -> Verdict:
    # Note [Lazy reads under Inductor]: Inductor computes a pointwise read (or a reduction over
    # one element) only where its result is needed, which can be after an opaque op wrote that
    # memory in place: it does not order such pending reads before a custom op's mutation.
    # PyTorch's own re-inplacing miscompiles this case. Where computing those values before the
    # call costs less than a clone of the buffer, the rewrite does that instead (Note [Lazy
    # reads computed before the call] in backends/inductor/lazy_reads.py). Which nodes are
    # lazy, and how to compute them before the call, is the policy's (``Policy.late_reads``,
    # ``Policy.plan_realization``; none under GENERIC).
    ctx = q.ctx
    late = ctx.policy.late_reads()
    if late is None:
        return None
    readers = ctx.analysis.reads_before_used_after(q.node, q.buf.node, q.written)
    # a lazy reader an earlier call moved back before its own call stands after this call for
    # the analysis but before it in the graph, as lazy as before (fuzz seed 20261904 #70: a
    # sum of a copy the second call writes, computed after it)
    # (unless it is computed there, pinned for an earlier buffer or call: Note [Reads moved
    # back before the call])
    pos = ctx.analysis.position[q.node]
    moved = [
        r
        for r in q.reads_after
        if r < q.node and late.lazy(r) and not ctx.analysis.computed_before(r, pos)
    ]
    readers = list(dict.fromkeys([*readers, *moved]))
    if not readers:
        return None
    plan = ctx.policy.plan_realization(q, readers)
    if plan is not None and plan.nbytes < nbytes_hint(q.buf.node.meta.get("val")):
        return Provided(plan, tuple(readers))
    return Reason.LAZY_READ, f"by {readers[0].name}"


def _read_later(q: Query) -> Verdict:
    ctx = q.ctx
    readers = q.reads_after
    # a reader an earlier call moved back before its own call (Note [Reads moved back before
    # the call]) is still at its old position for the analysis
    later = [r for r in readers if r > q.node]
    if not later:
        return None
    # Note [Reads moved back before the call]: where the policy can (reads are lazy)
    plan = ctx.policy.plan_move_back(q, later, readers)
    if plan is not None and plan.nbytes < nbytes_hint(q.buf.node.meta.get("val")):
        return Provided(plan)  # it computes the earlier rule's reads too
    return Reason.READ_LATER, f"by {later[0].name}"


class Rule(NamedTuple):
    """One soundness rule: ``check`` returns why the buffer must be cloned, its consent on a
    condition (:class:`Provided`: an action that must come first), or ``None``. A rule reads
    the graph and the analysis and changes neither."""

    name: str
    check: Callable[[Query], Verdict]


# The rules, in the order they are asked; a buffer is written in place when none objects. The
# first three say the analysis cannot reason about the buffer at all; the read rules come last
# (they are the costly ones). Code and prose cite a rule by its name; the table in
# ``reinplace``'s docstring labels them in this order for the reader.
RULES: tuple[Rule, ...] = (
    Rule("disabled", _disabled),
    Rule("no fake value", _no_value),
    Rule("module constant", _constant),
    Rule("buffer overlaps itself", _overlapping_buffer),
    Rule("a layout the backend chooses", _unfixed_layout),
    Rule("one memory, two mutable buffers", _same_buffer_twice),
    Rule("read by the same call", _read_by_call),
    Rule("graph input: copied back, not returned", _graph_input),
    Rule("a read the backend evaluates late", _lazy_read),
    Rule("old value read later", _read_later),
)


def decide(q: Query) -> Ruling:
    """Whether ``q.buf`` may be written in place (Reason.INPLACE) or why it must be cloned.
    The first objection wins; a rule that consents on a condition (:class:`Provided`) is
    heard by the later ones through ``q.provided``, and the last such condition is the
    action the ruling carries."""
    provided = None
    for rule in RULES:
        verdict = rule.check(q)
        if isinstance(verdict, Provided):
            q.provided = provided = verdict
        elif verdict is not None:
            return Ruling(*verdict)
    return Ruling(Reason.INPLACE, "", provided.realize if provided is not None else None)
