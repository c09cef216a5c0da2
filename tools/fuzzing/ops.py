"""The ``autofunc_fuzz`` ops the random programs call (registered when imported)."""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator

import torch
from torch._subclasses.fake_tensor import is_fake

_NS = "autofunc_fuzz"
PATHS = ("aot_eager", "capture", "inductor")
# "builtin" leaves the ops to PyTorch's own auto_functionalized handling (for triage).
# v1/v2: the fuzz ops registered with autofunc; builtin: PyTorch's handling; pytorch_v1/_v2:
# PyTorch's own nodes (its v1 or v2) decided by autofunc's pass (reinplace_pytorch_nodes)
# builtin_v1/_v2: PyTorch's handling with its v1 or v2 node chosen (Inductor's
# ``enable_auto_functionalized_v2``; "builtin" keeps the setting as it is, v2 on torch 2.13).
STRATEGIES = ("v1", "v2", "builtin", "builtin_v1", "builtin_v2", "pytorch_v1", "pytorch_v2")

# Contractions (|factor| <= 1) and means keep values bounded however many calls a program makes.


def _bits(y: torch.Tensor) -> torch.Tensor:
    """An integer ``y`` (an int64 or int32 view of float64 memory, Features.over_reads) as
    values in [0, 1): the residues mod 1000 of its top 20 bits, so that a float computed one
    ulp apart (Inductor's fused arithmetic against eager's) reads the same (seed 20261403
    #175 read all the bits, and eager and the compiled program differed by 0.001).

    An int64 view whose float64 is below 2**-30 in magnitude reads as 0: such a value is what
    a sum left after its terms cancelled (the sum of a tensor a call made zero-mean), and its
    bits are rounding noise that another reduction order changes from the top (seed 20261905
    #48: eager's 3.06e-14 against Inductor's 3.15e-14). An int32 view reads its bits as they
    are."""
    if y.element_size() == 8:
        y = torch.where(y.view(torch.float64).abs() < 2.0**-30, 0, y)
    shift = 8 * y.element_size() - 20
    return ((y >> shift) % 1000).to(torch.float64) / 1000


# Note [The memory each call sees]
# The fuzz ops record, for every call on real tensors while ``seen()`` is open, which of their
# tensor arguments share memory (a byte of one storage) with each argument the call writes: the
# aliasing the op body observes. An op reads and writes in some order, so eager's answer is part
# of the program's meaning whatever the values come out as (``m2(b, b, t)`` with ``t =
# b.clone()``: a compiled program that hands the op ``b`` for ``t`` is right only while the op
# reads ``t`` before it writes). The check compares the calls' records, eager's against the
# compiled program's (``check._check_once``).
_SEEN: list | None = None


@contextlib.contextmanager
def seen() -> Iterator[list]:
    """Record the memory each fuzz op call sees (Note [The memory each call sees]) into the
    list it yields: one ``(op name, overlaps)`` per call, ``overlaps`` a tuple per written
    tensor of whether it shares memory with each tensor argument, in argument order."""
    global _SEEN
    before, _SEEN = _SEEN, []
    try:
        yield _SEEN
    finally:
        _SEEN = before


def _saw(name: str, written: tuple, *others: object) -> None:
    """Record one call of ``name`` (``written``: its mutable arguments, then ``others``), after
    checking that every argument lies inside its storage (Note [Arguments inside their
    storage])."""
    flat = tensors_in((written, others))
    if any(is_fake(t) for t in flat):
        return
    _inside_storage(name, flat)
    if _SEEN is None:
        return
    mutable = tensors_in(written)
    _SEEN.append((name, tuple(tuple(_meet(w, t) for t in flat) for w in mutable)))


# Note [Arguments inside their storage]
# Compiled code hands an op views of its own buffers (``reinterpret_tensor`` in Inductor's
# wrapper), which nothing checks against the allocation: a view whose geometry reaches past its
# buffer lets the op read and write memory that is not the tensor's, and the process dies later,
# somewhere else, or computes a wrong value by chance (fuzz seed 20261806 #261). Every fuzz op
# checks its arguments first and raises, naming the argument, before it reads or writes any: the
# program fails where it went wrong instead of corrupting the process that runs the sweep.


def _inside_storage(name: str, tensors: list[torch.Tensor]) -> None:
    """Raise ``RuntimeError`` if one of ``tensors`` (the arguments of a call of ``name``)
    reaches past its storage (Note [Arguments inside their storage])."""
    for i, t in enumerate(tensors):
        if not t.numel():
            continue
        last = t.storage_offset() + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
        end, have = (last + 1) * t.element_size(), t.untyped_storage().nbytes()
        if end > have:
            raise RuntimeError(
                f"{_NS}::{name}: tensor argument {i} ends at byte {end} of a {have}-byte storage"
                " (a view past its buffer)"
            )


def tensors_in(args: object) -> list[torch.Tensor]:
    """The tensors of ``args``, through nested lists and tuples, in order."""
    if isinstance(args, torch.Tensor):
        return [args]
    if isinstance(args, (list, tuple)):
        return [t for a in args for t in tensors_in(a)]
    return []


def _meet(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` share a byte of memory, listed byte by byte: the oracle counts
    them apart from ``autofunc.regions``, whose arithmetic it checks."""
    if not a.numel() or not b.numel():
        return False
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    return not _bytes(a).isdisjoint(_bytes(b))


def _bytes(t: torch.Tensor) -> set:
    starts = [t.storage_offset()]
    for n, st in zip(t.shape, t.stride()):
        starts = [x + i * st for x in starts for i in range(n)]
    size = t.element_size()
    return {x * size + k for x in starts for k in range(size)}


def _mean(y: torch.Tensor) -> torch.Tensor:
    """``y.mean()``; an integer ``y`` as the mean of :func:`_bits`."""
    if y.is_floating_point():
        return y.mean()
    return _bits(y).mean()


@torch.library.custom_op(f"{_NS}::m1", mutates_args={"x"})
def m1(x: torch.Tensor, y: torch.Tensor) -> None:
    """x = x * 0.5 + mean(y) + 1"""
    _saw("m1", (x,), y)
    s = _mean(y)
    x.mul_(0.5).add_(s + 1)


@torch.library.custom_op(f"{_NS}::m2", mutates_args={"a", "b"})
def m2(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
    """a = a * 0.5 + mean(c); then b = -0.75 * b + mean(new a) (order-sensitive when a, b alias)"""
    _saw("m2", (a, b), c)
    s = _mean(c)
    a.mul_(0.5).add_(s)
    b.mul_(-0.75).add_(a.mean())


@torch.library.custom_op(f"{_NS}::m3", mutates_args={"xs"})
def m3(xs: list[torch.Tensor], y: torch.Tensor) -> None:
    """for i, x in xs: x = -0.5 * x + s + i; s = 0.5 * s + mean(new x); starting at s = mean(y)"""
    _saw("m3", (xs,), y)
    s = _mean(y)
    for i, x in enumerate(xs):
        x.mul_(-0.5).add_(s + i)
        s = s * 0.5 + x.mean()


@torch.library.custom_op(f"{_NS}::mopt", mutates_args={"x"})
def mopt(x: torch.Tensor | None, y: torch.Tensor) -> None:
    """x = 0.25 * x + mean(y) - 1 when x is given"""
    _saw("mopt", (x,), y)
    s = _mean(y)
    if x is not None:
        x.mul_(0.25).add_(s - 1)


@torch.library.custom_op(f"{_NS}::m3way", mutates_args={"a", "b", "c"})
def m3way(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
    """a = 0.5 a + 1; b = -0.5 b + mean(a); c = 0.75 c - mean(b), in this order"""
    _saw("m3way", (a, b, c))
    a.mul_(0.5).add_(1)
    b.mul_(-0.5).add_(a.mean())
    c.mul_(0.75).sub_(b.mean())


@torch.library.custom_op(f"{_NS}::mret", mutates_args={"x"})
def mret(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x = 0.5 x - mean(y); returns a fresh contiguous 3 * new x + mean(y)"""
    _saw("mret", (x,), y)
    s = _mean(y)
    x.mul_(0.5).sub_(s)
    return (x * 3 + s).contiguous()


@mret.register_fake
def _(x, y):
    return x.new_empty(x.shape)


@torch.library.custom_op(f"{_NS}::mlate", mutates_args={"x"})
def mlate(x: torch.Tensor, y: torch.Tensor) -> None:
    """x = 0.5 x, *then* x += mean(y): reads y after writing x (without Features.late_reads
    the generator keeps y disjoint from x, so a compiled program that makes them share memory
    shows up; with it, y may cover x's memory, and eager sees the new values)"""
    _saw("mlate", (x,), y)
    x.mul_(0.5)
    x.add_(_mean(y))


def _values(y: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """What an op takes from its read argument ``y`` for ``like``: ``y``'s elements (a copy, in
    ``like``'s shape) where the counts agree, else their mean; an integer ``y`` as
    :func:`_bits`."""
    if not y.is_floating_point():
        y = _bits(y)
    if y.numel() == like.numel():
        return y.reshape(like.shape).to(like.dtype).clone()
    return y.mean().to(like.dtype).expand(like.shape)


@torch.library.custom_op(f"{_NS}::mlate2", mutates_args={"dst"})
def mlate2(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst = 0.5 dst, *then* dst += 0.5 src (elementwise where the counts agree, else its mean):
    reads src after writing dst; the generator gives it sources over dst's memory (Features.
    late_reads), where eager sees the new values."""
    _saw("mlate2", (dst,), src)
    dst.mul_(0.5)
    dst.add_(_values(src, dst) * 0.5)


@torch.library.custom_op(f"{_NS}::mlret", mutates_args={"x"})
def mlret(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x = 0.5 x - 1, *then* returns a fresh 2 * y + mean(new x), y read after the write"""
    _saw("mlret", (x,), y)
    x.mul_(0.5).sub_(1)
    return (_values(y, x.new_empty(y.shape)) * 2 + x.mean()).contiguous()


@mlret.register_fake
def _(x, y):
    return y.new_empty(y.shape, dtype=x.dtype)


@torch.library.custom_op(f"{_NS}::mcache", mutates_args={"cache"})
def mcache(cache: torch.Tensor, rows: torch.Tensor, index: torch.Tensor) -> None:
    """cache[index] = rows (``index_put_``, a KV-cache write; rows of another shape: their mean
    + 1): reads rows before writing, only the indexed slots change"""
    _saw("mcache", (cache,), rows, index)
    target = cache[index]
    new = _values(rows, target) if rows.shape == target.shape else _values(rows, target) + 1
    cache.index_put_((index,), new)


@torch.library.custom_op(f"{_NS}::mlist", mutates_args={"x"})
def mlist(x: torch.Tensor, ys: list[torch.Tensor]) -> None:
    """x = 0.5 x + 0.25 sum(mean(y) for y in ys), the ys read before the write"""
    _saw("mlist", (x,), ys)
    s = sum((_values(y, x.new_empty(())) for y in ys), x.new_zeros(()))
    x.mul_(0.5).add_(s * 0.25)


@torch.library.custom_op(f"{_NS}::moptr", mutates_args={"x"})
def moptr(x: torch.Tensor, y: torch.Tensor | None) -> None:
    """x = 0.5 x + (mean(y) when y is given, else 1), y read before the write"""
    _saw("moptr", (x,), y)
    s = x.new_ones(()) if y is None else _values(y, x.new_empty(()))
    x.mul_(0.5).add_(s)


OPS = (m1, m2, m3, mopt, m3way, mret, mlate, mlate2, mlret, mcache, mlist, moptr)
OP_NAMES = tuple(op._qualname for op in OPS)


def _region(fn):
    region = getattr(torch.compiler, "nested_compile_region", None)
    return fn if region is None else region(fn)


@_region
def region_m1(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """m1 inside a ``nested_compile_region``: writes ``x``, returns a fresh value of both (a
    region called twice with inputs of one geometry stays an ``invoke_subgraph``, which PyTorch
    wraps in its ``auto_functionalized_v2``: autofunc's ``hops/subgraph.py``)"""
    m1(x, y)
    return x * 0.5 + y.mean()


# what programs call as ``regions.<name>`` (Features.regions)
REGIONS = types.SimpleNamespace(m1=region_m1)
