"""What autofunc supports: the mutable-argument layout of an op, read off its schema.

``op_info(op)`` returns an :class:`OpInfo` or raises :class:`UnsupportedOpError` naming the op and
the argument at fault. Nothing here imports HOP, FX or Inductor modules.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import re

import torch
from torch._ops import OpOverload

from .errors import UnsupportedOpError

__all__ = ["ArgKind", "MutableArg", "OpInfo", "RESERVED_KWARGS", "op_info", "resolve"]

# Keyword names the HOPs use for their own bookkeeping; an op argument may not be called this.
RESERVED_KWARGS = ("_op", "_bases", "_views", "_aliases", "_reads", "_read_views", "_same")


class ArgKind(enum.Enum):
    """The layout of a mutable argument. A list's elements may be optional (``Tensor(a!)?[]``):
    every consumer skips ``None`` elements as it skips a ``None`` argument."""

    TENSOR = "Tensor(a!)"
    OPTIONAL = "Tensor(a!)?"
    LIST = "Tensor(a!)[]"  # also Tensor(a!)?[]
    OPTIONAL_LIST = "Tensor(a!)[]?"  # also Tensor(a!)?[]?

    @property
    def is_list(self) -> bool:
        return self in (ArgKind.LIST, ArgKind.OPTIONAL_LIST)


@dataclasses.dataclass(frozen=True)
class MutableArg:
    name: str
    kind: ArgKind
    kwarg_only: bool


@dataclasses.dataclass(frozen=True)
class OpInfo:
    """The facts about one op overload that the HOPs and the pass need."""

    op: OpOverload
    qualname: str  # "ns::name.overload", the HOPs' wire name for the op
    arg_names: tuple[str, ...]
    mutable_args: tuple[MutableArg, ...]
    num_returns: int  # the op's fresh outputs (the HOPs return these, then the new values)
    # For an op tagged ``inplace`` or ``out`` whose every output is one of its mutable
    # arguments (Note [Ops that return their arguments]): those arguments, in output order.
    returned_args: tuple[str, ...] = ()
    # the arguments a call passes by position (every one not keyword-only), in schema order
    positional_names: tuple[str, ...] = ()
    # the arguments that are lists of tensors, mutable or not (``_classify``)
    tensor_list_args: frozenset[str] = frozenset()

    @property
    def mutable_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.mutable_args)


def qualname(op: OpOverload) -> str:
    return f"{op._schema.name}.{op._overloadname}"


def _is_tensor(t: torch._C.JitType, optional: bool = False) -> bool:
    """``Tensor`` (or, with ``optional``, also ``Tensor?``)."""
    if optional and isinstance(t, torch.OptionalType):
        t = t.getElementType()
    return isinstance(t, torch.TensorType)


def _classify(arg: torch._C.Argument) -> ArgKind | None:
    t = arg.type
    if _is_tensor(t):
        return ArgKind.TENSOR
    if isinstance(t, torch.OptionalType):
        inner = t.getElementType()
        if _is_tensor(inner):
            return ArgKind.OPTIONAL
        if isinstance(inner, torch.ListType) and _is_tensor(inner.getElementType(), True):
            return ArgKind.OPTIONAL_LIST
    if isinstance(t, torch.ListType) and _is_tensor(t.getElementType(), True):
        return ArgKind.LIST
    return None


def _check(op: OpOverload) -> OpInfo:
    schema = op._schema
    name = qualname(op)
    mutable = []
    write_sets: dict[tuple, str] = {}
    for arg in schema.arguments:
        if arg.name in RESERVED_KWARGS:
            raise UnsupportedOpError(
                name,
                "the name is reserved for autofunc's HOP keywords",
                arg=arg.name,
                hint="Rename the argument",
            )
        info = arg.alias_info
        if info is None or not info.is_write:
            continue
        kind = _classify(arg)
        if kind is None:
            raise UnsupportedOpError(
                name,
                "mutable arguments must be Tensor(a!), Tensor(a!)? or a list of them "
                f"(Tensor(a!)[], Tensor(a!)?[], optional or not), got {arg.type}",
                arg=arg.name,
                hint="Pass mutable tensors directly, not inside nested containers",
            )
        key = tuple(sorted(info.before_set)) or _element_alias_set(str(schema), arg.name)
        if key in write_sets:
            raise UnsupportedOpError(
                name,
                f"it shares the alias set {set(key)} with argument '{write_sets[key]}', so the "
                "schema promises the two alias; autofunc cannot regenerate that aliasing",
                arg=arg.name,
                hint="Give each mutable argument its own alias set",
            )
        write_sets[key] = arg.name
        mutable.append(MutableArg(arg.name, kind, arg.kwarg_only))
    if not mutable:
        raise UnsupportedOpError(
            name, "it mutates no argument, so there is nothing to functionalize"
        )
    returns = list(schema.returns)
    if len(returns) == 1 and isinstance(returns[0].type, torch.NoneType):
        returns = []  # "-> None": the op returns nothing, like "-> ()"
    returned = _returned_args(op, returns, mutable, write_sets)
    if returned:
        returns = []
    for i, ret in enumerate(returns):
        if ret.alias_info is not None:
            aliased = sorted(ret.alias_info.before_set)
            culprit = next(
                (
                    a.name
                    for a in schema.arguments
                    if a.alias_info is not None and set(aliased) & set(a.alias_info.before_set)
                ),
                None,
            )
            raise UnsupportedOpError(
                name,
                f"output {i} ({ret.type}) aliases it (alias set {', '.join(aliased)})",
                arg=culprit,
                hint="Return nothing (the mutation is visible through the argument) or a fresh "
                "tensor; an op that returns its mutable arguments themselves needs the tag "
                "torch.Tag.inplace or torch.Tag.out",
            )
        if not _is_supported_return(ret.type):
            raise UnsupportedOpError(name, f"return type {ret.type} is not supported")
    return OpInfo(
        op=op,
        qualname=name,
        arg_names=tuple(a.name for a in schema.arguments),
        mutable_args=tuple(mutable),
        num_returns=len(returns),
        returned_args=returned,
        positional_names=tuple(a.name for a in schema.arguments if not a.kwarg_only),
        tensor_list_args=frozenset(
            a.name for a in schema.arguments if (k := _classify(a)) is not None and k.is_list
        ),
    )


# The tags under which an op returns the tensors it mutates (Note [Ops that return their
# arguments]); a torch older than the tag (``inplace`` came in 2026) has fewer.
RETURNING_TAGS = tuple(
    tag for tag in (getattr(torch.Tag, name, None) for name in ("inplace", "out")) if tag
)


def _returned_args(
    op: OpOverload, returns: list, mutable: list[MutableArg], write_sets: dict[tuple, str]
) -> tuple[str, ...]:
    """The mutable arguments an ``inplace``/``out``-tagged op returns, or ``()``.

    Note [Ops that return their arguments]
    An op tagged ``torch.Tag.inplace`` (``foo_(Tensor(a!) x) -> Tensor(a!)``) or
    ``torch.Tag.out`` (``foo.out(..., Tensor(a!) out) -> Tensor(a!)``) returns the tensors it
    mutates, as aten's in-place and out= ops do; PyTorch's built-in accepts such custom ops.
    When every output is one mutable tensor argument (its alias set is that argument's), the
    HOPs treat the op as returning nothing and the functionalization rule returns the argument
    objects themselves after the write-back, so the caller gets what eager gives: the tensor it
    passed, holding the new value. Untagged ops, outputs that alias lists or optional
    arguments, and mixes of fresh and aliased outputs stay refused.
    """
    tags = getattr(op, "tags", ())
    if not returns or not any(tag in tags for tag in RETURNING_TAGS):
        return ()
    by_name = {a.name: a for a in mutable}
    out = []
    for ret in returns:
        info = ret.alias_info
        if info is None or not isinstance(ret.type, torch.TensorType):
            return ()
        arg = write_sets.get(tuple(sorted(info.before_set)))
        if arg is None or by_name[arg].kind is not ArgKind.TENSOR:
            return ()
        out.append(arg)
    return tuple(out)


def _element_alias_set(schema: str, name: str) -> tuple[str, ...]:
    """The alias set of a ``Tensor(a!)[] name`` argument (``Tensor?(a!)[]``, either optional
    or not), read off the schema text (the Python binding exposes a list's alias info without
    the set its elements belong to)."""
    m = re.search(rf"Tensor\??\((\w+)!?\)\??\[\]\?? {re.escape(name)}\b", schema)
    return (m.group(1),) if m else (f"<{name}>",)


def _is_supported_return(t: torch._C.JitType) -> bool:
    if isinstance(
        t, (torch.TensorType, torch.IntType, torch.FloatType, torch.BoolType, torch.SymIntType)
    ):
        return True
    if isinstance(t, torch.ListType):
        return isinstance(t.getElementType(), torch.TensorType)
    if isinstance(t, torch.OptionalType):
        return isinstance(t.getElementType(), torch.TensorType)
    return False


@functools.lru_cache(maxsize=None)
def op_info(op: OpOverload) -> OpInfo:
    """Return what autofunc needs to know about ``op``.

    Raises:
        UnsupportedOpError: the schema has an aliasing output, a mutable argument that is not a
            tensor, an optional tensor or a (possibly optional) list of (possibly optional)
            tensors, two mutable arguments in one alias set, an argument named like a HOP
            keyword, or no mutable argument at all.
    """
    return _check(op)


def resolve(name: str) -> OpOverload:
    """``"ns::name.overload"`` -> the OpOverload (the HOPs carry ops by this name).

    Not cached: a library that is destroyed and defines the op again (a test fixture, a
    reloaded module) frees the old operator handle, and calling a stale OpOverload crashes the
    process. ``torch.ops`` lookups are a dictionary access each.
    """
    ns, rest = name.split("::", 1)
    op_name, _, overload = rest.partition(".")
    packet = getattr(getattr(torch.ops, ns), op_name)
    return getattr(packet, overload or "default")
