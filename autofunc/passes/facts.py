"""Phase 1 of the re-inplace pass (Note [Pipeline] in ``reinplace.py``): the facts gathered
before any decision: what each call writes (its buffers and their regions), the graph's
epilogue copy-backs, the last version of each buffer along a chain of calls, and the graph's
outputs. Pure queries of the graph; nothing here rewrites it.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensorMode

from .. import views
from ..hops.adapter import Mutation
from ..regions import Region, overlaps
from .alias import AliasAnalysis
from .emit import (
    fake_values,
)

_aten = torch.ops.aten



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


def _output_of(node: fx.Node, buf: _Buffer) -> fx.Node | None:
    """The ``getitem`` of HOP ``node`` that holds ``buf``'s new value (``None``: unused)."""
    return next((u for u in node.users if u.args[1] == buf.out_index), None)


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
