"""The HOP-kwargs wire format of a ``ViewChain``: a flat, self-delimiting tuple of ints.

``encode_chain`` writes it, ``read_chain`` reads one chain inside a longer tuple (as
``hops.v2`` packs a chain per tensor) and ``decode_chain`` reads exactly one: the framing of
the format (Note [A flat wire format]). Each step's fields are its own ``encode``/``decode``
and its tag is its ``steps.STEPS`` entry. Saved programs carry the format, so a tag or a dtype
code, once given, keeps its meaning. Imports only ``autofunc.errors``, ``views.steps`` and
``views.chain``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import MalformedViewsError
from .chain import ViewChain
from .steps import STEPS, Step

__all__ = ["decode_chain", "encode_chain", "read_chain"]


# Note [A flat wire format]
# A chain travels in a HOP keyword through FX graphs, pytree, Dynamo and torch.export's
# serializer. The serializer writes HOP arguments without a schema and knows only flat lists
# (of ints, SymInts, strings, ...) and lists of tensors: nested tuples or a mix of strings and
# ints raise SerializeError on ``torch.export.save``. So a chain is a flat, self-delimiting
# tuple of ints (SymInts where a bound is symbolic): the step count, then each step as its tag
# (``steps.STEPS``) followed by its fields (the step's ``encode()``, read back by its
# ``decode``).

# Step kind -> its tag: the inverse of ``steps.STEPS``, the one table of tags.
_TAG_OF = {kind: tag for tag, kind in STEPS.items()}


def _tag_of(kind: type) -> int:
    tag = _TAG_OF.get(kind)
    if tag is None:  # a kind added to ``STEPS`` after this module was imported
        _TAG_OF.update({k: t for t, k in STEPS.items()})
        tag = _TAG_OF[kind]
    return tag


def encode_chain(chain: ViewChain) -> tuple:
    """Encodes a chain as a flat tuple of ints / SymInts (Note [A flat wire format]).

    Args:
        chain: The chain to encode.

    Returns:
        ``(number of steps, *steps)``, each step its tag then its fields: ``x[3, 2:5]`` is
        ``(2, 0, 0, 3, 1, 1, 2, 5, 1)``; an alias is ``(0,)``. A ``DtypeView`` is its tag and
        the dtype's index in ``steps._WIRE_DTYPES``: ``.view(torch.float8_e4m3fn)`` is ``(3, 23)``.
    """
    wire: list = [len(chain.steps)]
    for step in chain.steps:
        wire += (_tag_of(type(step)), *step.encode())
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
            kind = STEPS.get(tag)
            if kind is None:
                raise MalformedViewsError(
                    f"unknown view-chain step tag {tag!r} at {pos - 1} in {wire!r}"
                )
            step, pos = kind.decode(wire, pos)
            steps.append(step)
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
