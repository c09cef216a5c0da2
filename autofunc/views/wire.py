"""The HOP-kwargs wire format of a ``ViewChain``: a flat, self-delimiting tuple of ints.

``encode_chain`` writes it, ``read_chain`` reads one chain inside a longer tuple (as
``hops.v2`` packs a chain per tensor) and ``decode_chain`` reads exactly one: the single
definition of the format (Note [A flat wire format]). Saved programs carry it, so a tag or a
dtype code, once given, keeps its meaning. Imports only ``autofunc.errors`` and the
``autofunc.views`` data model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..errors import MalformedViewsError
from .chain import ViewChain
from .steps import AsStrided, DtypeView, Select, Slice, Step

__all__ = ["decode_chain", "encode_chain", "read_chain"]


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
)  # fmt: skip


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
