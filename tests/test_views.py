"""Tests for autofunc.views: view-chain inference, rendering, wire format."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from autofunc.views import (
    AsStrided,
    DtypeView,
    Select,
    Slice,
    View,
    ViewChain,
    decode_chain,
    encode_chain,
    infer_dtype_view,
    infer_view,
    infer_view_of,
    read_chain,
)
from autofunc.views import steps
from autofunc.views.steps import STEPS

# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _root(n: int) -> torch.Tensor:
    """A flat storage whose values are their own storage indices."""
    return torch.arange(n, dtype=torch.int64)


def _geom(t: torch.Tensor) -> tuple:
    return tuple(t.size()), tuple(t.stride()), t.storage_offset()


def _assert_same_view(regen: torch.Tensor, view: torch.Tensor) -> None:
    assert _geom(regen) == _geom(view)
    assert regen.untyped_storage().data_ptr() == view.untyped_storage().data_ptr()
    assert torch.equal(regen, view)  # values are storage indices: same elements, same order


def _check(base: torch.Tensor, view: torch.Tensor) -> ViewChain:
    chain = infer_view_of(base, view)
    _assert_same_view(chain.apply(base), view)
    assert chain.geometry(*_geom(base)) == _geom(view)
    assert decode_chain(encode_chain(chain)) == chain
    return chain


# --------------------------------------------------------------------------------------------
# Hand-picked table
# --------------------------------------------------------------------------------------------


def _from_root(n: int, make_base):
    """A case's maker: a fresh root of ``n`` elements, and ``make_base(root)``."""

    def make():
        root = _root(n)
        return root, make_base(root)

    return make


def _contig(*shape: int):
    return _from_root(math.prod(shape), lambda r: r.view(*shape))


def _offset_base():
    root = _root(60)
    return root, root.view(6, 10)[1:5, 2:7]


CASES = {
    "x[3]": (_contig(5, 12), lambda x: x[3], (Select(0, 3),)),
    "kv[layer, 0]": (
        _contig(3, 2, 4, 2, 2, 4),
        lambda kv: kv[1, 0],
        (Select(0, 1), Select(0, 0)),
    ),
    "x[1, :, 2:5]": (_contig(4, 6, 8), lambda x: x[1, :, 2:5], (Select(0, 1), Slice(1, 2, 5))),
    "x[:, 0]": (_contig(4, 6), lambda x: x[:, 0], (Select(1, 0),)),
    "x[..., 3]": (_contig(2, 3, 4), lambda x: x[..., 3], (Select(2, 3),)),
    "x[::2]": (_contig(8, 3), lambda x: x[::2], (Slice(0, 0, 8, 2),)),
    "x[1:7:3]": (_contig(8, 3), lambda x: x[1:7:3], (Slice(0, 1, 7, 3),)),
    "x[:, 1:6:2]": (_contig(3, 7), lambda x: x[:, 1:6:2], (Slice(1, 1, 7, 2),)),
    "alias": (_contig(4, 6), lambda x: x, ()),
    "x.t()": (_contig(4, 6), lambda x: x.t(), (AsStrided((6, 4), (1, 6), 0),)),
    # the diagonal as every 6th element of the flattened base: view ops only (Note [Inferring
    # view steps]), where it was as_strided((5,), (6,), 0)
    "x.diagonal()": (_contig(5, 5), lambda x: x.diagonal(), (View((25,)), Slice(0, 0, 25, 6))),
    "x[0].unsqueeze(0)": (_contig(4, 6), lambda x: x[0].unsqueeze(0), (Slice(0, 0, 1),)),
    "x[2:2]": (_contig(5, 12), lambda x: x[2:2], (AsStrided((0, 12), (12, 1), 24),)),
    "transposed base [2]": (
        _from_root(24, lambda r: r.view(4, 6).t()),
        lambda b: b[2],
        (Select(0, 2),),
    ),
    "transposed base [:, 1:3]": (
        _from_root(24, lambda r: r.view(4, 6).t()),
        lambda b: b[:, 1:3],
        (Slice(1, 1, 3),),
    ),
    "sliced base [1:3, ::2]": (
        _offset_base,
        lambda b: b[1:3, ::2],
        (Slice(0, 1, 3), Slice(1, 0, 5, 2)),
    ),
    "expanded base [1]": (
        _from_root(4, lambda r: r.view(1, 4).expand(3, 4)),
        lambda b: b[1],
        (Select(0, 0),),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_table(name: str) -> None:
    make, view_fn, expected = CASES[name]
    _, base = make()
    chain = _check(base, view_fn(base))
    assert chain == ViewChain(expected)
    assert chain.uses_as_strided == any(isinstance(s, AsStrided) for s in expected)
    assert chain.is_alias == (expected == ())

    # Writing through the regenerated view touches exactly the same storage elements.
    root_a, base_a = make()
    root_b, base_b = make()
    view_fn(base_a).fill_(-1)
    chain.apply(base_b).fill_(-1)
    assert torch.equal(root_a, root_b)
    assert (root_a == -1).any() or view_fn(base).numel() == 0


def test_view_before_base_falls_back() -> None:
    root = _root(24).view(4, 6)
    base, view = root[1:], root[0]
    chain = _check(base, view)
    assert chain == ViewChain((AsStrided((6,), (1,), 0),))


def test_unreachable_geometry_falls_back() -> None:
    # Elements outside a non-contiguous base (rows of 6 in a stride-12 storage), index out of
    # bounds, a new size-1 dim whose stride no view gives (view(1, 4) gives (4, 1)), expand.
    assert infer_view((4, 6), (12, 1), 0, (4,), (5,), 0).uses_as_strided
    assert infer_view((4, 6), (6, 1), 0, (6,), (1,), 24).uses_as_strided
    assert infer_view((4,), (1,), 0, (1, 4), (8, 1), 0).uses_as_strided
    assert infer_view((4,), (1,), 0, (1, 4), (1, 1), 0).uses_as_strided
    assert infer_view((4,), (1,), 0, (3, 4), (0, 1), 0).uses_as_strided
    assert infer_view((4, 6), (6, 1), 0, (2, 6), (0, 1), 0).uses_as_strided


def test_size_one_dim_strides_are_exact() -> None:
    # A stride on a size-1 view dim is reproduced by a slice step, or else by as_strided.
    assert infer_view((1, 6), (6, 1), 0, (1, 6), (12, 1), 0) == ViewChain((Slice(0, 0, 1, 2),))
    assert infer_view((4, 6), (6, 1), 0, (1, 6), (999, 1), 0).uses_as_strided
    assert infer_view((4, 6), (6, 1), 0, (4, 1), (6, 1), 2) == ViewChain((Slice(1, 2, 3),))


def test_negative_strides_fall_back() -> None:
    assert infer_view((4,), (-1,), 3, (2,), (-1,), 2).uses_as_strided


def test_prefers_fewest_steps() -> None:
    # A size-1 view dim matches base dim 0 (with a step) or 1; both regenerate it exactly.
    chain = infer_view((4, 4), (4, 1), 0, (1, 4), (8, 1), 4)
    assert chain == ViewChain((Slice(0, 1, 3, 2),))
    assert chain.geometry((4, 4), (4, 1), 0) == ((1, 4), (8, 1), 4)


def test_rank_mismatch_raises() -> None:
    with pytest.raises(ValueError):
        infer_view((4, 6), (6,), 0, (4,), (6,), 0)


# --------------------------------------------------------------------------------------------
# Rendering, geometry, wire format
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "steps, text",
    [
        ((), "alias"),
        ((Select(0, 3),), "[3]"),
        ((Select(0, 3), Select(0, 0)), "[3, 0]"),
        ((Select(0, 1), Slice(1, 2, 5)), "[1, :, 2:5]"),
        ((Select(1, 0),), "[:, 0]"),
        ((Slice(0, 0, 8, 2),), "[:8:2]"),
        ((Slice(0, 1, 7, 3),), "[1:7:3]"),
        ((AsStrided((2, 3), (1, 4), 5),), "as_strided((2, 3), (1, 4), 5)"),
        ((Slice(0, 2, 6), Slice(0, 0, 4, 2)), "[2:6] -> [:4:2]"),
        ((Select(0, 1), AsStrided((2,), (1,), 4)), "[1] -> as_strided((2,), (1,), 4)"),
    ],
)
def test_str(steps: tuple, text: str) -> None:
    assert str(ViewChain(steps)) == text


def test_geometry_matches_aten_normalization() -> None:
    assert ViewChain((Select(0, -1),)).geometry((4, 5), (5, 1), 0) == ((5,), (1,), 15)
    assert ViewChain((Slice(0, 2, 100),)).geometry((4, 5), (5, 1), 3) == ((2, 5), (5, 1), 13)
    assert ViewChain((Slice(1, -3, 5, 2),)).geometry((4, 5), (5, 1), 0) == ((4, 2), (5, 2), 2)
    x = torch.empty(4, 5)
    assert ViewChain((Slice(1, -3, 5, 2),)).apply(x).stride() == (5, 2)


def test_alias_apply_returns_base() -> None:
    x = torch.zeros(3)
    assert ViewChain().apply(x) is x


def test_wire_round_trip() -> None:
    chains = [
        ViewChain(),
        ViewChain((Select(0, 3), Slice(1, 2, 5, 1))),
        ViewChain((Slice(0, 0, 8, 2),)),
        ViewChain((AsStrided((2, 3), (1, 4), 5),)),
        ViewChain((Select(1, 0), AsStrided([2], [1], 0))),
    ]
    for chain in chains:
        wire = encode_chain(chain)
        # Note [A flat wire format]: flat ints only, so torch.export can serialize it.
        assert isinstance(wire, tuple) and all(type(v) is int for v in wire)
        assert decode_chain(wire) == chain
        assert decode_chain(list(wire)) == chain  # as it comes back from deserialization
    assert encode_chain(chains[0]) == (0,)
    assert encode_chain(chains[1]) == (2, 0, 0, 3, 1, 1, 2, 5, 1)
    assert read_chain((7, *encode_chain(chains[4]), 9), 1) == (chains[4], 10)
    for bad in [(1, 9, 0, 0), (1, 0, 0), (0, 5)]:  # unknown tag, truncated, trailing
        with pytest.raises(ValueError):
            decode_chain(bad)


# One example per step kind, with its rendering: a kind added to STEPS adds one here.
STEP_EXAMPLES = {
    Select: (Select(1, 2), "[:, 2]"),
    Slice: (Slice(0, 1, 4, 2), "[1:4:2]"),
    AsStrided: (AsStrided((2, 2), (3, 1), 1), "as_strided((2, 2), (3, 1), 1)"),
    DtypeView: (DtypeView(torch.int16), "view(torch.int16)"),
    View: (View((2, 2, 6)), "view(2, 2, 6)"),
}


def test_every_step_kind_has_an_example() -> None:
    assert set(STEP_EXAMPLES) == set(STEPS.values())


@pytest.mark.parametrize("tag", sorted(STEPS))
def test_step_kind(tag: int) -> None:
    # A step on the wire is its tag, then its own fields; what it applies to a tensor and what
    # its arithmetic says about the geometry agree.
    step, text = STEP_EXAMPLES[STEPS[tag]]
    chain = ViewChain((step,))
    wire = encode_chain(chain)
    assert wire == (1, tag, *step.encode())
    assert read_chain((7, *wire, 7), 1) == (chain, 1 + len(wire))
    assert str(chain) == text
    base = _root(24).view(4, 6)
    view = chain.apply(base)
    assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    assert chain.geometry(*_geom(base), itemsize=base.element_size()) == _geom(view)
    assert chain.dtype(base.dtype) == view.dtype


@dataclass(frozen=True)
class _Transpose:
    """A step kind of the test's own: ``aten.transpose.int(t, d0, d1)``."""

    d0: int
    d1: int

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        return t.transpose(self.d0, self.d1)

    def geometry(self, geom, itemsize):
        size, stride = list(geom.size), list(geom.stride)
        size[self.d0], size[self.d1] = size[self.d1], size[self.d0]
        stride[self.d0], stride[self.d1] = stride[self.d1], stride[self.d0]
        return type(geom)(tuple(size), tuple(stride), geom.offset), itemsize

    def emit(self, x, graph):
        return graph.call(torch.ops.aten.transpose.int, (x, self.d0, self.d1))

    def box(self, box, dims):
        dims = list(dims)
        dims[self.d0], dims[self.d1] = dims[self.d1], dims[self.d0]
        return box, tuple(dims)

    def encode(self) -> tuple:
        return (self.d0, self.d1)

    @classmethod
    def decode(cls, wire, pos):
        return cls(*wire[pos : pos + 2]), pos + 2

    def __str__(self) -> str:
        return f"transpose({self.d0}, {self.d1})"

    def subscript(self) -> None:
        return None


def test_a_step_kind_added_in_its_test(monkeypatch) -> None:
    """A step kind added to ``STEPS`` here, changing nothing else (recipe "A view step" in
    docs/architecture.md): chains take it, the wire carries it, its geometry is exact, and its
    ATen call is what the pass's emitter inserts."""
    step = _Transpose(0, 1)
    with pytest.raises(TypeError, match="unknown view step"):
        ViewChain((step,))  # refused until it is a kind of STEPS
    monkeypatch.setitem(steps.STEPS, 99, _Transpose)
    chain = ViewChain((Slice(0, 1, 4, 1), step))
    wire = encode_chain(chain)
    assert read_chain(wire, 0) == (chain, len(wire))
    assert str(chain) == "[1:4] -> transpose(0, 1)"
    base = _root(24).view(4, 6)
    view = chain.apply(base)
    assert torch.equal(view, base[1:4].t())
    assert chain.geometry(*_geom(base), itemsize=base.element_size()) == _geom(view)
    graph = torch.fx.Graph()
    x = graph.placeholder("x")

    class _FxGraph:  # the emitter's Graph protocol on a plain FX graph
        arith = None

        def call(self, target, args):
            return graph.call_function(target, args)

    out = x
    for s in chain.steps:
        out = s.emit(out, _FxGraph())
    graph.output(out)
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    assert torch.equal(gm(base), view)
    assert [n.target for n in graph.nodes if n.op == "call_function"] == [
        torch.ops.aten.slice.Tensor,
        torch.ops.aten.transpose.int,
    ]


# --------------------------------------------------------------------------------------------
# SymInt smoke test (unbacked symbols: no Dynamo import needed)
# --------------------------------------------------------------------------------------------


def test_inference_makes_no_reference_cycles() -> None:
    # Each call used to leave its recursive search closures in reference cycles: garbage only
    # the cyclic GC frees, made for every view the pass and the HOPs infer.
    import gc

    from autofunc.views import inference

    inference._infer.cache_clear()
    # only the call's own garbage counts: every object tracked before it is kept alive through
    # it, and what one collection after it finds unreachable is kept (DEBUG_SAVEALL) and listed
    gc.collect()
    before = gc.get_objects()
    debug = gc.get_debug()
    gc.disable()
    gc.set_debug(debug | gc.DEBUG_SAVEALL)
    try:
        chain = infer_view((4, 6, 8), (48, 8, 1), 0, (3, 4), (8, 1), 52)  # x[1, 1:4, 4:]
        gc.collect()
        garbage = list(gc.garbage)
        gc.garbage.clear()
    finally:
        gc.set_debug(debug)
        gc.enable()
        del before
    assert not chain.uses_as_strided
    assert garbage == [], [type(o).__name__ for o in garbage[:20]]


def test_symint_no_guards() -> None:
    from torch.fx.experimental.symbolic_shapes import ShapeEnv, statically_known_true

    env = ShapeEnv()
    u0, u1 = env.create_unbacked_symint(), env.create_unbacked_symint()
    torch._check(u0 >= 0)
    torch._check(u0 < 3)
    torch._check(u1 >= 2)
    guards = len(env.guards)

    chain = infer_view((3, 2, 4), (8, 4, 1), 0, (4,), (1,), 8 * u0)  # kv[u0, 0]
    assert [type(s) for s in chain.steps] == [Select, Select]
    assert statically_known_true(chain.steps[0].index == u0)
    assert chain.steps[1] == Select(0, 0)
    assert str(chain) == "[u0, 0]"

    chain = infer_view((u1, 4), (4, 1), 0, (u1,), (4,), 1)  # x[:, 1]
    assert chain == ViewChain((Select(1, 1),))

    chain = infer_view((4, u1), (u1, 1), 0, (u1,), (1,), 2 * u1)  # x[2]
    assert chain == ViewChain((Select(0, 2),))

    chain = infer_view((u1, 4), (4, 1), 0, (u1,), (1,), 4 * u0)  # not provably in bounds
    assert chain.uses_as_strided

    chain = infer_view((u1, 4), (4, 1), 0, (4, u1), (1, 4), 0)  # transpose
    assert chain.uses_as_strided
    assert len(env.guards) == guards


def test_unbacked_size_that_may_be_zero_kept_whole() -> None:
    # t[:, 1] of t = torch.ones(n.item(), 2): u0 may be 0, but the dim is taken whole.
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    u0 = env.create_unbacked_symint()
    torch._check(u0 >= 0)
    chain = infer_view((u0, 2), (2, 1), 0, (u0,), (2,), 1)
    assert chain == ViewChain((Select(1, 1),))
    chain = infer_view((u0, 2), (2, 1), 0, (u0, 1), (2, 1), 1)  # t[:, 1:2]
    assert chain == ViewChain((Slice(1, 1, 2, 1),))
    assert not env.guards


def test_backed_symint_example_guided_no_guards() -> None:
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

    env = ShapeEnv()

    def sym(value: int, name: str) -> torch.SymInt:
        source = ConstantSource(name)
        expr = env.create_symbol(value, source=source, dynamic_dim=DimDynamic.DYNAMIC)
        return env.create_symintnode(expr, hint=value, source=source)

    s0, s1 = sym(5, "s0"), sym(7, "s1")
    guards = len(env.guards)
    # x[1, :, 2] on a contiguous (s0, s1, 3) base: (3*s1 + 2) // (3*s1) does not simplify, so
    # the coefficients come from the example values and are then proven symbolically.
    chain = infer_view((s0, s1, 3), (3 * s1, 3, 1), 0, (s1,), (3,), 3 * s1 + 2)
    assert chain == ViewChain((Select(0, 1), Select(1, 2)))
    # x[2, :, 2] is not provably in bounds (s0 >= 2 only): fall back rather than guard.
    chain = infer_view((s0, s1, 3), (3 * s1, 3, 1), 0, (s1,), (3,), 6 * s1 + 2)
    assert chain.uses_as_strided
    assert len(env.guards) == guards


# --------------------------------------------------------------------------------------------
# Property tests
# --------------------------------------------------------------------------------------------


@st.composite
def _bases(draw):
    """A base over an index-valued storage: maybe offset, strided, permuted or expanded."""
    ndim = draw(st.integers(1, 4))
    sizes = draw(st.lists(st.integers(1, 5), min_size=ndim, max_size=ndim))
    steps = draw(st.lists(st.integers(1, 2), min_size=ndim, max_size=ndim))
    starts = draw(st.lists(st.integers(0, 1), min_size=ndim, max_size=ndim))
    parent = [a + (n - 1) * k + 1 for n, k, a in zip(sizes, steps, starts)]
    offset = draw(st.integers(0, 3))
    root = _root(offset + math.prod(parent))
    base = root[offset:].view(parent)
    base = base[tuple(slice(a, None, k) for a, k in zip(starts, steps))]
    base = base[tuple(slice(0, n) for n in sizes)]
    base = base.permute(draw(st.permutations(range(ndim))))
    if draw(st.booleans()) and 1 in base.shape:
        dim = base.shape.index(1)
        base = base.expand(*[3 if d == dim else -1 for d in range(base.dim())])
    return base


def _random_op(data, t: torch.Tensor, weird: bool) -> torch.Tensor | None:
    kinds = ["select", "slice"] + (["transpose", "diagonal", "unsqueeze"] if weird else [])
    kind = data.draw(st.sampled_from(kinds))
    if t.dim() == 0:
        return None
    dim = data.draw(st.integers(0, t.dim() - 1))
    n = t.shape[dim]
    if kind == "select":
        return t.select(dim, data.draw(st.integers(0, n - 1))) if n else None
    if kind == "slice" and n:
        start = data.draw(st.integers(0, n - 1))
        stop = data.draw(st.integers(start + 1, n))
        step = data.draw(st.integers(1, 3))
        return t[(slice(None),) * dim + (slice(start, stop, step),)]
    if kind == "unsqueeze":
        return t.unsqueeze(dim)
    other = data.draw(st.integers(0, t.dim() - 1))
    if kind == "transpose":
        return t.transpose(dim, other)
    return t.diagonal(0, dim, other) if other != dim else None


@settings(max_examples=200, deadline=None, derandomize=True)
@given(base=_bases(), data=st.data())
def test_property_select_slice_chains(base: torch.Tensor, data) -> None:
    view = base
    for _ in range(data.draw(st.integers(0, 4))):
        nxt = _random_op(data, view, weird=False)
        view = view if nxt is None else nxt
    chain = _check(base, view)
    if view.numel() > 0:
        assert not chain.uses_as_strided, (str(chain), _geom(base), _geom(view))
    assert chain.is_alias == (_geom(view) == _geom(base))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(base=_bases(), data=st.data())
def test_property_any_view_is_exact(base: torch.Tensor, data) -> None:
    view = base
    for _ in range(data.draw(st.integers(1, 4))):
        nxt = _random_op(data, view, weird=True)
        view = view if nxt is None else nxt
    chain = _check(base, view)
    # (a View step may come with a select/slice per dim of the base split at the view's strides)
    assert len(chain.steps) <= 1 + 2 * max(base.dim(), view.dim()) or chain.uses_as_strided


# --------------------------------------------------------------------------------------------
# Dtype views (Note [Dtype views])
# --------------------------------------------------------------------------------------------

F8 = torch.float8_e4m3fn


def _dgeom(t: torch.Tensor) -> tuple:
    return (*_geom(t), t.dtype)


def _check_dtype(base: torch.Tensor, view: torch.Tensor) -> ViewChain:
    chain = infer_view_of(base, view)
    regen = chain.apply(base)
    assert _dgeom(regen) == _dgeom(view)
    assert regen.untyped_storage().data_ptr() == view.untyped_storage().data_ptr()
    assert chain.geometry(*_geom(base), itemsize=base.element_size()) == _geom(view)
    assert chain.dtype(base.dtype) == view.dtype
    assert decode_chain(encode_chain(chain)) == chain
    return chain


def _u8(*shape: int) -> torch.Tensor:
    return torch.zeros(*shape, dtype=torch.uint8)


DTYPE_CASES = {
    "kv[l, 0].view(fp8)": (
        lambda: _u8(3, 2, 8),
        lambda kv: kv[1, 0].view(F8),
        (Select(0, 1), Select(0, 0), DtypeView(F8)),
    ),
    "kv.view(fp8)": (lambda: _u8(3, 2, 8), lambda kv: kv.view(F8), (DtypeView(F8),)),
    "kv.view(int32)[:, :, 1:]": (
        lambda: _u8(3, 2, 8),
        lambda kv: kv.view(torch.int32)[:, :, 1:],
        (Slice(2, 4, 8), DtypeView(torch.int32)),
    ),
    "x.view(int32)[:, 2:]": (
        lambda: torch.zeros(4, 8),
        lambda x: x.view(torch.int32)[:, 2:],
        (Slice(1, 2, 8), DtypeView(torch.int32)),
    ),
    "x[1].view(uint8)[4:12]": (
        lambda: torch.zeros(4, 8),
        lambda x: x[1].view(torch.uint8)[4:12],
        (Select(0, 1), Slice(0, 1, 3), DtypeView(torch.uint8)),
    ),
    "x.view(uint8)[:, 1::4]": (
        lambda: torch.zeros(4, 8),
        lambda x: x.view(torch.uint8)[:, 1::4],
        (DtypeView(torch.uint8), Slice(1, 1, 32, 4)),
    ),
    "x[:, 2:].view(float64)[1:]": (
        lambda: torch.zeros(4, 8),
        lambda x: x[:, 2:].view(torch.float64)[1:],
        (Slice(0, 1, 4), Slice(1, 2, 8), DtypeView(torch.float64)),
    ),
    "x.view(float32), same dtype": (lambda: torch.zeros(4, 8), lambda x: x.view(torch.float32), ()),
}


@pytest.mark.parametrize("name", list(DTYPE_CASES))
def test_dtype_table(name: str) -> None:
    make, view_of, steps = DTYPE_CASES[name]
    base = make()
    chain = _check_dtype(base, view_of(base))
    assert chain.steps == steps
    assert not chain.uses_as_strided


def test_dtype_view_wire_and_str() -> None:
    chain = ViewChain((Select(0, 1), Select(0, 0), DtypeView(F8)))
    # Three steps: select(0, 1), select(0, 0), then the dtype view (tag 3, float8_e4m3fn = 23).
    assert encode_chain(chain) == (3, 0, 0, 1, 0, 0, 0, 3, 23)
    assert decode_chain([1, 3, 23]) == ViewChain((DtypeView(F8),))
    assert decode_chain(list(encode_chain(chain))) == chain
    assert str(chain) == "[1, 0] -> view(torch.float8_e4m3fn)"
    with pytest.raises(ValueError, match="unknown dtype code"):
        decode_chain([1, 3, 999])


def test_dtype_view_geometry_needs_the_itemsize() -> None:
    chain = ViewChain((DtypeView(torch.int32),))
    with pytest.raises(ValueError, match="element size"):
        chain.geometry((4, 8), (8, 1), 0)
    assert chain.geometry((4, 8), (8, 1), 4, itemsize=1) == ((4, 2), (2, 1), 1)
    # the same element size leaves the geometry unchanged
    assert ViewChain((DtypeView(F8),)).geometry((4, 8), (8, 1), 8, 1) == ((4, 8), (8, 1), 8)


def test_dtype_view_symint_no_guards() -> None:
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    n = env.create_unbacked_symint()
    torch._check(n >= 1)
    before = len(env.guards)
    # kv: (2, n) uint8, view kv[1].view(fp8): offset n
    chain = infer_dtype_view(((2, n), (n, 1), 0), torch.uint8, ((n,), (1,), n), F8)
    assert chain.steps == (Select(0, 1), DtypeView(F8))
    assert len(env.guards) == before


@st.composite
def _dtypes(draw):
    return draw(st.sampled_from([torch.uint8, torch.int16, torch.int32, torch.float64, F8]))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(base=_bases(), dtype=_dtypes(), data=st.data())
def test_property_dtype_view_chains(base: torch.Tensor, dtype, data) -> None:
    # select/slice, then view(dtype), then select/slice: exact, without as_strided, whenever
    # the dtype view comes first or last (a dtype view in the middle may need as_strided)
    pre, post = data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))
    view = base
    for _ in range(pre):
        nxt = _random_op(data, view, weird=False)
        view = view if nxt is None else nxt
    try:
        view = view.view(dtype)
    except RuntimeError:
        return  # ATen refuses this dtype view (last stride, alignment)
    for _ in range(post):
        nxt = _random_op(data, view, weird=False)
        view = view if nxt is None else nxt
    first_or_last = post == 0 or pre == 0
    try:
        chain = _check_dtype(base, view)
    except ValueError:
        assert not first_or_last, (_geom(base), _dgeom(view))
        return
    if first_or_last and view.numel() > 0:
        assert not chain.uses_as_strided, (str(chain), _geom(base), _dgeom(view))


def test_regions_are_in_bytes_across_dtypes() -> None:
    from autofunc.regions import contains, overlaps, region_of

    kv = _u8(2, 2, 16)
    r = lambda t: region_of(t, kv)
    layer0, layer1 = r(kv[0].view(F8)), r(kv[1])
    assert not overlaps(layer0, layer1) and overlaps(layer0, r(kv[0, 1]))
    assert contains(r(kv[0]), r(kv[0, 1].view(F8))) and not contains(r(kv[0, 1]), r(kv[0]))
    assert (layer1.lo, layer1.hi) == (32, 64)
    # a wider view: int32 columns of a uint8 root keep their box (interleaved, disjoint)
    x = _u8(4, 16)
    col0, col1 = (region_of(x.view(torch.int32)[:, i], x) for i in (0, 1))
    assert col0.box is not None and not overlaps(col0, col1)
    assert overlaps(col0, region_of(x[:, 3], x)) and not overlaps(col0, region_of(x[:, 4], x))
    # a narrower view: bytes of float32 columns
    y = torch.zeros(4, 8)
    b1 = region_of(y.view(torch.uint8)[:, 4:8], y)
    assert contains(region_of(y[:, 1], y), b1) and not overlaps(b1, region_of(y[:, 2], y))
    # a misaligned byte range keeps only its interval (never a widened box)
    odd = region_of(y.view(torch.uint8)[:, 5:7], y)
    assert odd.box is None and overlaps(odd, region_of(y[:, 1], y))


# --------------------------------------------------------------------------------------------
# View steps (Note [View steps], Note [Inferring view steps])
# --------------------------------------------------------------------------------------------


def _qkv(tokens: int = 4) -> torch.Tensor:
    """SGLang/vLLM's fused projection: tokens x (4 query heads + 2 key + 2 value heads) x 16."""
    return _root(tokens * 128).view(tokens, 128).clone()


VIEW_CASES = {
    # qkv.split(...)[i].view(-1, H, D): the written views of SGLang's in-place rope
    "q.view(-1, 4, 16)": (
        _qkv,
        lambda t: t.split([64, 32, 32], -1)[0].view(-1, 4, 16),
        (Slice(1, 0, 64), View((4, 4, 16))),
    ),
    "k.view(-1, 2, 16)": (
        _qkv,
        lambda t: t.split([64, 32, 32], -1)[1].view(-1, 2, 16),
        (Slice(1, 64, 96), View((4, 2, 16))),
    ),
    # vLLM's attention output: the whole buffer, split into heads
    "output.view(-1, 8, 16)": (_qkv, lambda t: t.view(-1, 8, 16), (View((4, 8, 16)),)),
    "rows merged: x[1:3].view(-1)": (_qkv, lambda t: t[1:3].view(-1), (Slice(0, 1, 3), View((256,)))),
    "unsqueeze as a view": (_qkv, lambda t: t[:, 96:].view(4, 1, 32), (Slice(1, 96, 128), View((4, 1, 32)))),
    # the base split first, then indexed (kv.view(L, 2, ...)[l, 0] in vLLM's caches)
    "x.view(2, 4, 16)[:, 1:3]": (
        lambda: _root(128).view(8, 16).clone(),
        lambda t: t.view(2, 4, 16)[:, 1:3],
        (View((2, 4, 16)), Slice(1, 1, 3)),
    ),
}


@pytest.mark.parametrize("name", list(VIEW_CASES))
def test_view_step_inference(name: str) -> None:
    make, view_fn, expected = VIEW_CASES[name]
    base = make()
    view = view_fn(base)
    chain = _check(base, view)
    assert chain == ViewChain(expected)
    assert not chain.uses_as_strided
    # writing through the regenerated view writes exactly the elements the view has
    a, b = make(), make()
    view_fn(a).fill_(-1)
    chain.apply(b).fill_(-1)
    assert torch.equal(a, b)


def test_what_no_view_step_makes_stays_as_strided() -> None:
    qkv = _qkv()
    # A transposed slice split into heads: its dims are out of the base's order, which no
    # view/select/slice chain changes.
    assert _check(qkv, qkv.t()[:3].view(3, 2, 2)).uses_as_strided
    # A merge of dims that are not contiguous with each other: columns 0-7 of rows 0 and 1 of
    # a (4, 8) base whose rows are 16 apart, as one flat run of 16 (a view would read the
    # storage between the rows, outside the base).
    assert infer_view((4, 8), (16, 1), 0, (16,), (1,), 0).uses_as_strided
    # A size-1 dim whose stride a view does not give (view(4, 1, 32) gives it 32).
    assert infer_view((4, 128), (128, 1), 0, (4, 1, 32), (128, 5, 1), 96).uses_as_strided


def test_view_step_geometry_refuses_what_aten_refuses() -> None:
    t = _root(24).view(4, 6)[:, :4]  # rows of 4 in a storage of rows of 6
    with pytest.raises(RuntimeError):
        t.view(16)
    with pytest.raises(ValueError, match="view\\(16\\)"):
        ViewChain((View((16,)),)).geometry(*_geom(t))
    assert ViewChain((View((4, 2, 2)),)).geometry(*_geom(t)) == _geom(t.view(4, 2, 2))


@st.composite
def _view_shapes(draw, numel: int):
    """A shape of ``numel`` elements: a random factorization, with size-1 dims sprinkled in."""
    shape = []
    n = numel
    while n > 1:
        d = draw(st.sampled_from([d for d in range(2, n + 1) if n % d == 0]))
        shape.append(d)
        n //= d
    for _ in range(draw(st.integers(0, 2))):
        shape.insert(draw(st.integers(0, len(shape))), 1)
    return shape or [1]


@settings(max_examples=400, deadline=None, derandomize=True)
@given(data=st.data())
def test_property_view_strides_are_atens(data) -> None:
    # views.geometry.view_strides (the View step's arithmetic) agrees with Tensor.view: the
    # strides it gives, size-1 dims included, and where it refuses.
    from autofunc.views.geometry import view_strides

    numel = data.draw(st.sampled_from([1, 2, 4, 6, 12, 16, 24, 36]))
    shape = data.draw(_view_shapes(numel))
    perm = data.draw(st.permutations(range(len(shape))))
    t = torch.empty([shape[p] for p in perm]).permute([perm.index(i) for i in range(len(shape))])
    stride = [
        data.draw(st.integers(0, 40)) if n == 1 else st_ * data.draw(st.sampled_from([1, 1, 2]))
        for n, st_ in zip(t.shape, t.stride())
    ]
    t = torch.empty(4096).as_strided(t.shape, stride)
    new = data.draw(_view_shapes(numel))
    try:
        expected = tuple(t.view(new).stride())
    except RuntimeError:
        expected = None
    assert view_strides(t.shape, t.stride(), new) == expected


@settings(max_examples=200, deadline=None, derandomize=True)
@given(base=_bases(), data=st.data())
def test_property_views_of_slices_need_no_as_strided(base: torch.Tensor, data) -> None:
    # select/slice steps, then a view that splits or merges dims (when Tensor.view allows it):
    # regenerated with select/slice/view steps, never as_strided. (Except where the view has a
    # size-1 dim: view gives it a stride from the size-1 dims of the slice it was made from,
    # which inference does not rebuild; as_strided is exact there too.)
    view = base
    for _ in range(data.draw(st.integers(0, 3))):
        nxt = _random_op(data, view, weird=False)
        view = view if nxt is None else nxt
    if view.numel() == 0 or 0 in base.stride():
        return
    try:
        view = view.view(data.draw(_view_shapes(view.numel())))
    except RuntimeError:
        return  # not a view of those dims
    chain = _check(base, view)
    if 1 not in view.shape:
        assert not chain.uses_as_strided, (str(chain), _geom(base), _geom(view))


def test_view_step_with_symbolic_sizes() -> None:
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    u0 = env.create_unbacked_symint()
    torch._check(u0 >= 1)
    guards = len(env.guards)
    # q.view(-1, 4, 16) of a (u0, 128) qkv: the slice, then the view, with the symbolic row count
    chain = infer_view((u0, 128), (128, 1), 0, (u0, 4, 16), (128, 16, 1), 0)
    assert [type(s) for s in chain.steps] == [Slice, View]
    assert chain.steps[0] == Slice(1, 0, 64)
    assert str(chain) == "[:, :64] -> view(u0, 4, 16)"
    assert decode_chain(encode_chain(chain)) == chain
    size, stride, offset = chain.geometry((u0, 128), (128, 1), 0)
    assert (size[1:], stride, offset) == ((4, 16), (128, 16, 1), 0)
    assert len(env.guards) == guards


def test_unknown_steps_are_refused() -> None:
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Transpose:  # looks like a step, but no tag in STEPS: nothing may guess its behaviour
        dim0: int
        dim1: int

        def apply(self, t):
            return t.transpose(self.dim0, self.dim1)

    with pytest.raises(TypeError, match="unknown view step"):
        ViewChain((Select(0, 1), Transpose(0, 1)))
    with pytest.raises(TypeError, match="unknown view step"):
        ViewChain(((0, 1),))


def test_malformed_view_step_on_the_wire() -> None:
    from autofunc.errors import MalformedViewsError

    assert decode_chain((1, 4, 2, 4, 8)) == ViewChain((View((4, 8)),))
    with pytest.raises(MalformedViewsError):
        decode_chain((1, 4, -1, 4))
    with pytest.raises(MalformedViewsError):
        decode_chain((1, 4, 3, 4, 8))  # truncated
