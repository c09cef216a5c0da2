"""The ``autofunc_fuzz`` ops the random programs call (registered when imported)."""

from __future__ import annotations

import types

import torch

_NS = "autofunc_fuzz"
PATHS = ("aot_eager", "capture", "inductor")
# "builtin" leaves the ops to PyTorch's own auto_functionalized handling (for triage).
# v1/v2: the fuzz ops registered with autofunc; builtin: PyTorch's handling; pytorch_v1/_v2:
# PyTorch's own nodes (its v1 or v2) decided by autofunc's pass (reinplace_pytorch_nodes)
STRATEGIES = ("v1", "v2", "builtin", "pytorch_v1", "pytorch_v2")

# Contractions (|factor| <= 1) and means keep values bounded however many calls a program makes.


@torch.library.custom_op(f"{_NS}::m1", mutates_args={"x"})
def m1(x: torch.Tensor, y: torch.Tensor) -> None:
    """x = x * 0.5 + mean(y) + 1"""
    s = y.mean()
    x.mul_(0.5).add_(s + 1)


@torch.library.custom_op(f"{_NS}::m2", mutates_args={"a", "b"})
def m2(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
    """a = a * 0.5 + mean(c); then b = -0.75 * b + mean(new a) (order-sensitive when a, b alias)"""
    s = c.mean()
    a.mul_(0.5).add_(s)
    b.mul_(-0.75).add_(a.mean())


@torch.library.custom_op(f"{_NS}::m3", mutates_args={"xs"})
def m3(xs: list[torch.Tensor], y: torch.Tensor) -> None:
    """for i, x in xs: x = -0.5 * x + s + i; s = 0.5 * s + mean(new x); starting at s = mean(y)"""
    s = y.mean()
    for i, x in enumerate(xs):
        x.mul_(-0.5).add_(s + i)
        s = s * 0.5 + x.mean()


@torch.library.custom_op(f"{_NS}::mopt", mutates_args={"x"})
def mopt(x: torch.Tensor | None, y: torch.Tensor) -> None:
    """x = 0.25 * x + mean(y) - 1 when x is given"""
    s = y.mean()
    if x is not None:
        x.mul_(0.25).add_(s - 1)


@torch.library.custom_op(f"{_NS}::m3way", mutates_args={"a", "b", "c"})
def m3way(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
    """a = 0.5 a + 1; b = -0.5 b + mean(a); c = 0.75 c - mean(b), in this order"""
    a.mul_(0.5).add_(1)
    b.mul_(-0.5).add_(a.mean())
    c.mul_(0.75).sub_(b.mean())


@torch.library.custom_op(f"{_NS}::mret", mutates_args={"x"})
def mret(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x = 0.5 x - mean(y); returns a fresh contiguous 3 * new x + mean(y)"""
    s = y.mean()
    x.mul_(0.5).sub_(s)
    return (x * 3 + s).contiguous()


@mret.register_fake
def _(x, y):
    return x.new_empty(x.shape)


@torch.library.custom_op(f"{_NS}::mlate", mutates_args={"x"})
def mlate(x: torch.Tensor, y: torch.Tensor) -> None:
    """x = 0.5 x, *then* x += mean(y): reads y after writing x (the generator keeps y disjoint
    from x, so a compiled program that makes them share memory shows up)"""
    x.mul_(0.5)
    x.add_(y.mean())


OPS = (m1, m2, m3, mopt, m3way, mret, mlate)
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
