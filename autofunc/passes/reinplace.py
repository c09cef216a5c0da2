"""The re-inplace pass: turn each autofunc HOP call into a direct call of its mutable op that
writes straight into the caller's buffers, keeping only the clones that are needed.

Works on any functional ATen graph with ``meta["val"]`` fake tensors (post-grad Inductor graphs,
``aot_eager`` graphs, exported graphs). Knows nothing about Inductor's configuration: what the
backend lowering the graph does is the :class:`~autofunc.passes.policy.Policy` it is given, and
the decisions are made by querying :class:`~autofunc.passes.alias.AliasAnalysis`.

Note [Pipeline]
The pass runs these steps, in this order; the modules cite them by number.

0. Views whose fake value lost its base's storage get a value computed from their base
   (``stale_views.py``, Note [Views of a removed copy]): the facts read memory off fake
   storages.
1. Repairs before: the ``repairs_before()`` of the :class:`~autofunc.passes.policy.Policy`
   given, graph rewrites that work around the backend's lowering and that the facts must see.
   ``GENERIC`` has none; Inductor's (``autofunc/backends/inductor/policy.py``) are in
   ``autofunc/backends/inductor/repairs.py``.
2. Facts, once per graph (``facts.py``, ``alias.py``): the graph's epilogue copy-backs, its
   outputs (those AOTAutograd regenerates from inputs apart), the tensors a training forward
   saves, and the alias analysis over versions, memory classes and reads.
3. Each call, in graph order (``_rewrite_call``):

   a. read through its adapter (``hops/adapter.py``) into its buffers and the regions each
      writes (``facts.py``); the copies that put its values back are tagged (``copies.py``);
   b. each buffer in turn (Note [Buffers of one call decided in turn]), first planned, then
      the plan carried out. ``plan_buffer`` edits nothing: ``RULES`` are asked in order
      (``rules.py``; the first objection wins, a rule may consent on a condition, the reads
      to compute before the call), and the plan says whether the op takes a pinned alias of
      a buffer written in place, or which copy a cloned one gets (the policy's ``pin`` and
      ``copy``). ``apply_plan`` is the one place that edits the graph and the pass's state
      for it: the reads computed before the call (the policy's ``realize``), the buffer
      written in place (pinned) or cloned (``emit.py``), its outputs rewired in the alias
      analysis; written in place, the scatters that put back what it wrote are folded
      (``scatters.py``) and the root of its views pinned where the backend has not computed
      it (the policy's ``pin_root``);
   c. the direct op call emitted on the buffers or their clones (the policy's fresh ``alias``
      and ``declare_writes``), the call's outputs rewired.
4. Outputs (``outputs.py``): epilogue copies that became ``copy_(x, x)`` removed, fresh outputs
   in a written input's memory copied at the end, saved ones kept from the backward's reuse.
5. Repairs after: the policy's ``repairs_after()``, rewrites of the rewritten graph.
6. The graph linted (the policy's ``lint``) and recompiled, and every copy it makes counted
   for the report (``copies.py``).

The policy (``policy.py``) also says what the rules "a layout the backend chooses", "graph
input: copied back, not returned", "a read the backend evaluates late" and "old value read
later" respect about the backend.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensor

from .. import hops as _hops  # noqa: F401 - registers the v1 and v2 adapters
from ..errors import GraphError
from ..hops.adapter import (
    RUN_FAKE,
    Mutation,
    accepted,
    mutation_targets,
    read_node,
    reading_once,
)
from ..hops.common import Distinct
from ..symbolic import nbytes_hint
from .alias import AliasAnalysis
from .copies import (
    CopyKind,
    account_copies,
    copy_node_set,
    copying,
    tag_new_copies,
    tag_write_backs,
)
from .emit import (
    CloneKind,
    NO_VAL,
    emit,
    emit_clone,
    emit_view,
    fake_mode_of,
    fake_values,
    getitem_of,
    inherit_unbacked_bindings,
    pin_layout,
)
from .context import Buffer, Pass, Query
from .facts import (
    buffers,
    epilogue_copies,
    output_nodes,
    outputs_regenerated_from_inputs,
    saved_tensors,
)
from .outputs import copy_returned_inputs, keep_saved_inputs, remove_self_copies
from .policy import GENERIC, Policy
from .report import CallReport, Decision, Reason, Report
from .rules import RULES, Rule, decide
from .scatters import fold_scatters
from .stale_views import refresh_stale_views
from .walks import view_root, view_walk
from ..logs import get_logger

__all__ = ["RULES", "Plan", "Rule", "apply_plan", "plan_buffer", "reinplace"]

log = get_logger("autofunc.reinplace")

_aten = torch.ops.aten


def reinplace(
    gm: fx.GraphModule,
    *,
    enable: bool = True,
    is_inference: bool | None = None,
    policy: Policy | None = None,
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

    Soundness: ``RULES`` (``rules.py``, whose docstring holds their table) are asked in order
    for each buffer of a call; the first objection keeps the clone, and the report gives its
    reason.

    "Old value read later" and "a read the backend evaluates late": no node after the call
    reads, through any version that shares its memory, an element of the regions the op writes
    (Inductor may also compute a read made before the call after it). "Read by the same call":
    no other argument of the same call reads those regions. "One memory, two mutable buffers":
    such a memory is written in place once (Note [One memory, two mutable buffers]). "Graph input:
    copied back, not returned": a graph input (or a view of one) is written in place only when
    the graph copies a value back into it after the call (``copy_(input, v)``: the call's value,
    which becomes a self-copy and is removed, or a later one a native in-place op or a
    collective made; Note [Copied back later]), and that value is not also an output (the
    returned tensor would be the input itself; a training graph may donate saved outputs to the
    backward), nor is a view of this call's value an output when a later value is copied back
    (Note [A returned value the copy-back overwrites]). Outputs AOTAutograd regenerates from the
    inputs (``return kv[0]``) are not outputs of the graph's memory (Note [Outputs AOTAutograd
    regenerates from inputs]). Anything unproven keeps its clone.

    Args:
        gm: the graph module, rewritten in place.
        enable: ``False`` only decomposes the HOPs, cloning every buffer.
        is_inference: whether ``gm`` is an inference graph; ``None`` (unknown) is treated as a
            training graph (only the reason the rule "graph input: copied back, not returned"
            gives depends on it).
        policy: what the backend that lowers ``gm`` does that the rules and the rewrite must
            respect (:class:`~autofunc.passes.policy.Policy`); ``None`` is ``GENERIC``, a
            backend that runs the graph as it stands. The Inductor glue passes ``INDUCTOR``
            (``autofunc.backends.inductor.policy``).

    Returns:
        A :class:`Report` with one :class:`CallReport` per HOP call.
    """
    policy = GENERIC if policy is None else policy
    # Note [Several adapters per target] in hops/adapter.py; Note [Fake values read plainly]
    with reading_once(), torch._C.DisableTorchFunctionSubclass():
        return _reinplace(gm, enable, is_inference, policy)


# Note [Fake values read plainly]
# The pass reads the size, strides, offset, dtype and storage of fake values thousands of times
# per graph. Each read on a tensor subclass first asks the subclass's ``__torch_function__``,
# and ``FakeTensor`` has none of its own: ``Tensor.__torch_function__`` runs the read as it is
# (its conversion of a tensor result to the subclass never applies to a FakeTensor, which the
# fake mode's dispatch already returns). So the pass runs with subclass ``__torch_function__``
# disabled, which makes each read about half as costly and changes no result: ``FakeTensor``'s
# own Python attributes (``device``) are still its own, ``__torch_dispatch__`` (the fake mode)
# is untouched, and so are torch-function modes. The graph's values are fake tensors (checked
# for the HOPs' inputs, ``_check_vals``), never a subclass with a ``__torch_function__`` of
# its own: AOTAutograd flattens those before a graph reaches a post-grad or backend pass.


def _reinplace(
    gm: fx.GraphModule, enable: bool, is_inference: bool | None, policy: Policy
) -> Report:
    hops = _mutation_nodes(gm.graph)
    report = Report(graph=type(gm).__name__)
    if not hops:
        report.copies = account_copies(gm.graph)  # all the program's own
        return report
    _check_vals(hops)
    fake_mode = _fake_mode(gm.graph, hops)
    stale = refresh_stale_views(gm.graph)  # step 0
    if stale and enable:
        log.warning(
            "autofunc.reinplace: the fake values of %s do not follow their bases and could not "
            "be recomputed (Note [Views of a removed copy]); every buffer of this graph is "
            "copied", ", ".join(n.name for n in stale[:5]),
        )
        enable = False
    repairs = policy.repairs_before()
    if repairs:
        before = copy_node_set(gm.graph)
        for repair in repairs:  # step 1
            repair(gm.graph)
        tag_new_copies(gm.graph, before, CopyKind.REPAIR)  # Note [Every copy in the report]
    out = gm.graph.output_node()  # step 2: the facts
    regenerated = policy.outputs_regenerated(outputs_regenerated_from_inputs(out))
    ctx = Pass(
        gm=gm,
        analysis=AliasAnalysis(
            gm.graph,
            late=policy.late_reads(),
        ),
        epilogue=epilogue_copies(gm.graph),
        outputs=output_nodes(out, regenerated),
        fake_mode=fake_mode,
        enable=enable,
        training=not is_inference,
        policy=policy,
        saved=None if is_inference else saved_tensors(out),
        regenerated=regenerated,
    )
    for node in hops:  # step 3
        # Read again where rewriting an earlier call replaced the nodes this one takes.
        report.calls.append(_rewrite_call(ctx, node, read_node(node)))
    remove_self_copies(gm.graph)  # step 4
    with copying(ctx, CopyKind.OUTPUT):
        copy_returned_inputs(ctx)
    keep_saved_inputs(ctx)
    repairs = policy.repairs_after()
    if repairs:
        before = copy_node_set(gm.graph)
        with copying(ctx, CopyKind.REPAIR):
            for repair in repairs:  # step 5
                repair(ctx)
        tag_new_copies(gm.graph, before, CopyKind.REPAIR)
        report.written_into_inputs(ctx.into_inputs)
    policy.lint(gm.graph)  # step 6
    gm.recompile()
    report.copies = account_copies(gm.graph)  # Note [Every copy in the report] in copies.py
    return report


def _mutation_nodes(graph: fx.Graph) -> list[fx.Node]:
    """The calls of every registered functional mutation node, in graph order (looked up by
    target, not by scanning the graph)."""
    return sorted(
        n
        for t in mutation_targets()
        for n in graph.find_nodes(op="call_function", target=t)
        if accepted(n)
    )


# -- step 3: each call ------------------------------------------------------------------------


def _rewrite_call(ctx: Pass, node: fx.Node, m: Mutation) -> CallReport:
    """Steps 3a-3c of Note [Pipeline] for one call, read as ``m``: each buffer is planned
    (:func:`plan_buffer`, which edits nothing) and the plan applied (:func:`apply_plan`), in
    turn (Note [Buffers of one call decided in turn]); then the direct call."""
    bufs = buffers(m)
    graph = ctx.gm.graph
    outs = {u.args[1]: u for u in node.users if u.target is operator.getitem}
    keys = {i: m.output_keys(i) for i in range(len(bufs))}  # Note [The adapter seam]
    # Note [Every copy in the report]: the copies that write this call's values back
    tag_write_backs((outs[key] for ks in keys.values() for key in ks if key in outs), node.name)
    plans: list[Plan] = []
    arg_bases: list[fx.Node] = []
    # any copy emitted for this call is one of its copies (Note [Every copy in the report])
    with graph.inserting_before(node), copying(ctx, CopyKind.CLONE, node.name):
        for k, buf in enumerate(bufs):  # step 3b
            inplace = tuple(p.buf for p in plans if p.inplace)
            copies = tuple(b for p, b in zip(plans, arg_bases) if not p.inplace)
            plan = plan_buffer(ctx, node, m, buf, bufs, inplace, copies)
            log.debug("%s %s %s: %s", node.name, m.op_name, buf.args, plan)
            mine = [outs.pop(key) for key in keys[k] if key in outs]  # this buffer's outputs
            arg_bases.append(apply_plan(ctx, node, plan, mine))
            plans.append(plan)
        call, num_returns = _emit_call(ctx, node, m, arg_bases)  # step 3c
    for key, user in outs.items():  # what is left: the op's own outputs
        repl = call if num_returns is None else getitem_of(graph, call, key, user)
        if user in ctx.analysis.version:
            ctx.analysis.track(repl, user)
        user.replace_all_uses_with(repl)
        graph.erase_node(user)
    graph.erase_node(node)
    return CallReport(node.name, m.op_name, m.strategy, [p.decision for p in plans], m.note)


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the pass does with one buffer of a call, decided before the graph is touched:
    the decision, and every action it takes. :func:`apply_plan` carries it out."""

    buf: Buffer
    decision: Decision
    # written in place: computed before the call first (the ruling's condition), and whether
    # the op takes a pinned alias of the buffer (``pin_layout``)
    realize: Any = None  # the policy's plan (``rules.Provided``)
    pin: bool = False
    # cloned: the kind of copy (Note [Clones for Inductor])
    clone: CloneKind | None = None

    @property
    def inplace(self) -> bool:
        return bool(self.decision)

    def __str__(self) -> str:
        how = f"pinned={self.pin}" if self.inplace else f"copy={self.clone.name}"
        return f"{self.decision.reason.value} {self.decision.detail} ({how})"


def plan_buffer(
    ctx: Pass,
    node: fx.Node,
    m: Mutation,
    buf: Buffer,
    bufs: list[Buffer],
    inplace: tuple[Buffer, ...],
    copies: tuple[fx.Node, ...] = (),
) -> Plan:
    """The plan for ``buf``, one of the buffers ``bufs`` of the call ``node`` (``inplace``:
    those already written in place; ``copies``: the copies of those already cloned):
    ``RULES`` decide (``rules.decide``), then how the buffer is handed to the op. Reads the
    graph and the analysis; changes neither."""
    q = Query(ctx, node, m, buf, bufs, inplace, copies)
    ruling = decide(q)
    detail = ruling.detail
    if ruling.reason is Reason.INPLACE and ruling.realize is not None:
        detail = str(ruling.realize)
    decision = Decision(
        tuple(buf.args),
        buf.node.name,
        tuple(str(c) for c in buf.chains),
        ruling.reason,
        nbytes_hint(buf.node.meta.get("val")),
        detail,
    )
    # how the buffer is handed to the op is the policy's (Note [Clones for Inductor])
    if decision:
        return Plan(buf, decision, ruling.realize, pin=ctx.policy.pin(q))
    kind = ctx.policy.copy_for(q)
    if ctx.policy.pin_source(ctx, buf.node, node):
        kind = kind.of_pinned_source()
    return Plan(buf, decision, clone=kind)


def apply_plan(ctx: Pass, node: fx.Node, plan: Plan, outputs: list[fx.Node]) -> fx.Node:
    """Carry out ``plan`` before the call ``node``: every graph edit and every change to the
    pass's state it implies (the written inputs, the alias analysis), in one place. The HOP's
    ``outputs`` of the buffer then denote what the op writes. Returns the node the op's
    arguments are regenerated from."""
    graph, analysis, buf = ctx.gm.graph, ctx.analysis, plan.buf.node
    if plan.inplace:
        if plan.realize is not None:
            # Note [Reads moved back before the call], Note [Lazy reads computed before the
            # call]
            with copying(ctx, CopyKind.REALIZED, node.name):
                ctx.policy.realize(ctx, node, plan.realize)
        root = analysis.input_of(buf)
        if root is not None:
            ctx.written_inputs.add(root)
        new, base = buf, (pin_layout(ctx, buf) if plan.pin else buf)
        for o in outputs:
            analysis.merge(buf, o)
    else:
        new = base = emit_clone(ctx, buf, kind=plan.clone)
        analysis.written_copy(new, analysis.position[node])
        for o in outputs:
            analysis.track(new, o)
    for o in outputs:
        o.replace_all_uses_with(new)
        graph.erase_node(o)
    # Note [Buffers of one call decided in turn]
    if plan.inplace and buf.op != "placeholder":
        fold_scatters(ctx, buf)
        # after the fold: the scatters of the next buffers still start from the root (Note
        # [A written view of an unrealized buffer] in backends/inductor/policy.py)
        ctx.policy.pin_root(ctx, buf)
    late = ctx.policy.late_reads()
    if plan.inplace and late is not None:
        # Note [What a call writes is computed by the call]
        # A backend hands an opaque op the memory it writes: where the written value is lazy
        # (``r = b * 1.5; op(r)``), the backend computes it into a buffer no later than the call
        # (Inductor realizes a mutated argument's storage, the base of a written view too, and
        # copies back into it a copy it made for a layout), and every user after the call reads
        # that buffer. So the root's reads end at the call: a later call writing ``b`` is no
        # write under a pending read of ``r`` (fuzz seed 20261907 #217 under v2: ``m2(b, r, v)``
        # then ``mlret(b, b)`` cloned ``b`` for ``r``, returned at the end; 24 B over the
        # built-in, which writes ``b`` in place).
        root = view_root(buf)
        if root.op == "call_function":
            analysis.computed_by(root, analysis.position[node])
    if plan.inplace and late is not None and late.taken is not None:
        # what the pins on the way to the op make the backend compute before the call (Note
        # [Values computed where they are taken] in backends/inductor/policy.py)
        for view in view_walk(base):
            if view.op == "call_function" and view.args and late.taken(view, view.args[0]):
                analysis.computed_by(view.args[0], analysis.position[node], pinned=True)
    return base


# Note [Buffers of one call decided in turn]
# A call may write several views of one graph input (``kernel(kv[l, 0], kv[l, 1])`` through a
# Triton kernel or v1): functionalization scatters the first view's new value into the input,
# then the second's into that result. A buffer written in place has its output replaced by the
# buffer and its scatters folded (``fold_scatters``) before the next buffer of the same call is
# decided, so the next one sees the graph as the rewrite leaves it, as the buffers of a later
# call do: its own scatters then fold into the input too, where deciding all buffers first
# would see the first one's unfolded scatter as a read of the old input and copy the second.


def _emit_call(
    ctx: Pass, node: fx.Node, m: Mutation, new_bufs: list[fx.Node]
) -> tuple[fx.Node, int | None]:
    """The direct call (``m.direct_call``), with each mutable argument regenerated from its
    (new) buffer and the writes ``m.declared_writes`` declared around it (by the policy);
    returns it and how many op outputs it has, ``None`` where the call itself is its one
    output (else they are ``getitem`` of it)."""
    # Note [Arguments keep their identity] in hops/common.py.
    distinct = Distinct(lambda n: ctx.policy.alias(ctx, n), lambda n: n)
    shared: dict = {}  # the chains' common prefixes, emitted once
    tensors: dict[str, fx.Node] = {}  # slot label -> its tensor
    same = dict(m.same_objects)
    for s in m.slots:  # mutable, then read-only ones of their own chains, then exact aliases
        if s.label in same:  # eager's one object as both
            tensors[s.label] = tensors[same[s.label]]
        elif s.read_only:  # Note [A dtype view Inductor keeps]: its steps are the policy's
            view = emit_view(ctx, new_bufs[s.buffer], s.relative_chain, read_only=True)
            tensors[s.label] = distinct(view)
        elif s.same_as is None:
            tensors[s.label] = distinct(
                emit_view(ctx, new_bufs[s.buffer], s.relative_chain, shared)
            )
        elif s.same_object:  # Note [Read arguments eager aliases]: eager's one object
            tensors[s.label] = tensors[s.same_as]
        else:  # eager's other object over that memory
            tensors[s.label] = ctx.policy.alias(ctx, tensors[s.same_as])
    direct = m.direct_call([tensors[s.label] for s in m.slots])
    n = direct.num_returns
    # The HOP's fake value already holds the op's outputs: no need to run its fake kernel again.
    val = m.direct_value(node.meta.get("val"), n)
    val = NO_VAL if val is RUN_FAKE else val
    # Note [Writes Inductor cannot see] in backends/inductor/ops.py: the policy declares them,
    # if need be
    written = list(dict.fromkeys(m.declared_writes(new_bufs)))
    ctx.policy.declare_writes(ctx, written)
    call = emit(ctx, direct.target, direct.args, direct.kwargs, val=val)
    inherit_unbacked_bindings(call, node, n)  # Note [Unbacked outputs]
    if m.eager_input_vals:
        # Note [Why the op travels by name]: Inductor constrains a needs_exact_strides op's
        # inputs to these values, which have exactly the strides eager passes: the slots' as
        # regenerated, the read arguments' as traced (Note [The strides eager passes])
        eager = m.with_traced_reads().direct_call([tensors[s.label] for s in m.slots])
        call.meta["eager_input_vals"] = fake_values((eager.args, eager.kwargs))
    ctx.policy.declare_writes(ctx, written, call, n)
    return call, (None if n == 1 and not m.returns_tuple else n)


def _fake_mode(graph: fx.Graph, hops: list[fx.Node]) -> Any:
    """The graph's fake mode, read off the calls' inputs (every graph value has the one mode;
    the whole graph is read only where those hold no fake tensor)."""
    vals = [a.meta.get("val") for hop in hops for a in hop.all_input_nodes]
    if not any(isinstance(v, FakeTensor) for v in vals):
        vals = [n.meta.get("val") for n in graph.nodes]
    return fake_mode_of(vals)


def _check_vals(hops: list[fx.Node]) -> None:
    for hop in hops:
        for arg in hop.all_input_nodes:
            if arg.op == "get_attr" and not isinstance(
                getattr(arg.graph.owning_module, arg.target, None), torch.Tensor
            ):
                continue  # a subgraph or a constant that is no tensor (a region's schema)
            val = arg.meta.get("val", NO_VAL)
            if val is NO_VAL or (isinstance(val, torch.Tensor) and not isinstance(val, FakeTensor)):
                # Anything else is a value the pass does not model and passes through as it is:
                # a SymInt, an opaque object (Note [Opaque arguments] in hops/adapter.py).
                raise GraphError(
                    f"autofunc.reinplace needs fake values in meta['val'] (node {arg.name}, an "
                    f"input of {hop.name}, has none); run FakeTensorProp on the graph first"
                )
