"""Steps 2 and 3a of the re-inplace pass (Note [Pipeline] in ``reinplace.py``): the facts
gathered before any decision: the graph's epilogue copy-backs, the last version of each buffer
along a chain of calls and the graph's outputs (step 2), and what each call writes, its buffers
and their regions (step 3a). Pure queries of the graph; nothing here rewrites it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from ..hops.adapter import Mutation
from ..regions import overlaps
from .context import Buffer, SavedTensors
from .walks import input_copies
from ..logs import get_logger

__all__ = [
    "aliased_args",
    "buffers",
    "epilogue_copies",
    "flat_outputs",
    "other_tensor_args",
    "output_nodes",
    "output_of",
    "output_positions",
    "outputs_regenerated_from_inputs",
    "saved_tensors",
]

log = get_logger("autofunc.passes.facts")


# -- step 3a: what each call writes -----------------------------------------------------------


def buffers(m: Mutation) -> list[Buffer]:
    bufs = [Buffer(b, m.output_keys(i)[0], [], []) for i, b in enumerate(m.buffers)]
    for slot in m.slots:
        if slot.read_only:  # it writes nothing; the op reads what the buffer holds
            bufs[slot.buffer].read_chains.append(slot.relative_chain)
            continue
        bufs[slot.buffer].args.append(slot.label)
        bufs[slot.buffer].chains.append(slot.relative_chain)
    return bufs


def output_of(node: fx.Node, buf: Buffer) -> fx.Node | None:
    """The ``getitem`` of HOP ``node`` that holds ``buf``'s new value (``None``: unused)."""
    return next((u for u in node.users if u.args[1] == buf.out_index), None)


def aliased_args(buf: Buffer, written: list) -> bool:
    """Whether two of the arguments regenerated from ``buf`` overlap (a read-only one over the
    written memory always does: Note [Read arguments see the written memory])."""
    if buf.read_chains:
        return True
    return any(overlaps(a, b) for i, a in enumerate(written) for b in written[i + 1 :])


def flat_outputs(out: fx.Node) -> tuple | list | None:
    """The output node's flat tuple of returned values (AOTAutograd's graphs), or ``None``."""
    flat = out.args[0] if len(out.args) == 1 else None
    return flat if isinstance(flat, (tuple, list)) else None


def output_nodes(out: fx.Node, regenerated: frozenset[int]) -> list[fx.Node]:
    """The tensors the graph returns whose memory the caller gets: not those at the positions
    ``regenerated`` (Note [Outputs AOTAutograd regenerates from inputs]), whose memory is the
    input's whatever the graph does."""
    flat = flat_outputs(out)
    if flat is None or not regenerated:
        return [a for a in pytree.tree_leaves(out.args) if isinstance(a, fx.Node)]
    return [
        a
        for i, v in enumerate(flat)
        if i not in regenerated
        for a in pytree.tree_leaves(v)
        if isinstance(a, fx.Node)
    ]


def saved_tensors(out: fx.Node) -> SavedTensors | None:
    """The saved tensors of the training forward graph being compiled (Note [Saved values of
    written inputs]), or ``None`` outside a compile or where AOTAutograd's metadata lacks them."""
    try:
        from torch._guards import TracingContext

        meta = getattr(TracingContext.try_get(), "fw_metadata", None)
        donated = getattr(meta, "bw_donated_idxs", None)
        saved = meta.tensors_saved_for_backwards_slice if meta is not None else None
        symints = getattr(meta, "num_symints_saved_for_bw", None)
    except (ImportError, AssertionError, AttributeError):
        log.debug("no saved tensors: AOTAutograd's metadata is out of reach", exc_info=True)
        return None
    if donated is None and meta is not None and not torch._functorch.config.donated_buffer:
        donated = []  # the backward reuses no saved tensor's memory
    if not isinstance(donated, list) or not isinstance(saved, slice) or symints is None:
        return None
    flat = flat_outputs(out)
    if flat is None:
        return None
    return SavedTensors(range(*saved.indices(len(flat))), symints, donated)


def output_positions(out: fx.Node, node: fx.Node) -> list[int]:
    """Where ``node`` stands among the graph's flat outputs."""
    return [i for i, a in enumerate(flat_outputs(out) or ()) if a is node]


def outputs_regenerated_from_inputs(out: fx.Node) -> frozenset[int]:
    """Positions of the graph's outputs that AOTAutograd replaces by the caller's input (or a
    view of it) at run time; empty when that is not known.

    Note [Outputs AOTAutograd regenerates from inputs]
    An output that aliases a graph input in eager (``return kv[0]``, ``return kv``) is not taken
    from the compiled graph's memory: AOTAutograd's runtime wrapper returns the input itself
    (``OutputType.is_input``) or replays the view on it (``OutputType.alias_of_input``),
    using the graph's output only for its metadata. Such an output sharing memory with a value
    the op writes in place is what eager has, so it objects to nothing (pytorch#195451 is about
    *fresh* outputs, which come back from the graph). Known only inside a compile, from the
    ``ViewAndMutationMeta`` AOTAutograd puts on the tracing context for the graph it compiles:
    its user outputs follow the mutated inputs it returns. Outside one (``torch.export``,
    a graph given to the pass by hand) no output is exempt; a backend that compiles ahead of
    time (AOTInductor) says so through its policy (``Policy.outputs_regenerated``).
    """
    try:
        from torch._functorch._aot_autograd.schemas import OutputType
        from torch._guards import TracingContext

        context = TracingContext.try_get()
        meta = getattr(context, "fw_metadata", None)
        infos = getattr(meta, "output_info", None)
        first = getattr(meta, "num_mutated_inp_runtime_indices", None)
    except ImportError:  # pragma: no cover - torch without these internals
        log.debug("no regenerated outputs: AOTAutograd's internals moved", exc_info=True)
        return frozenset()
    flat = flat_outputs(out)
    if infos is None or first is None or flat is None or len(flat) < first + len(infos):
        return frozenset()
    kinds = (OutputType.alias_of_input, OutputType.is_input)
    return frozenset(
        first + i
        for i, info in enumerate(infos)
        if info.output_type in kinds
        and isinstance(flat[first + i], fx.Node)
        and _tensor_output(flat[first + i], info)
    )


def _tensor_output(node: fx.Node, info: Any) -> bool:
    """A check that the metadata lines up with this graph: both say the output is a tensor."""
    raw = getattr(info, "raw_type", None)
    return isinstance(node.meta.get("val"), torch.Tensor) and (
        raw is None or (isinstance(raw, type) and issubclass(raw, torch.Tensor))
    )


def other_tensor_args(m: Mutation) -> list[fx.Node]:
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



def epilogue_copies(graph: fx.Graph) -> dict[fx.Node, fx.Node]:
    """placeholder -> the ``copy_(placeholder, new)`` that writes its final value back."""
    return {dst: copies[-1] for dst, copies in input_copies(graph).items()}

