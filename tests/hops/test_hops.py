"""Tests for the autofunc_v1 / autofunc_v2 HOPs called directly: dense semantics (the inputs are
never written), the exact geometry the op receives, fake tensors, and tracing with make_fx."""

from __future__ import annotations

import operator

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import autofunc
from autofunc.hops.v2 import ArgView, decode_views, encode_reads, encode_views
from autofunc.testing import count_targets
from autofunc.views import AsStrided, Select, Slice, ViewChain
from tools import corpus  # noqa: F401  (defines the autofunc_corpus ops)

v1 = autofunc.auto_functionalized_v1
v2 = autofunc.auto_functionalized_v2
ADD = "autofunc_corpus::add_.default"


def _on_base(*chains):
    """``_views`` for one tensor argument per chain (a list of steps), each a view of base 0."""
    return encode_views([ArgView(0, ViewChain(tuple(chain))) for chain in chains])


# -- dense semantics ----------------------------------------------------------------------------


def test_v1_returns_the_new_value_and_leaves_the_input():
    x, y = torch.randn(4), torch.randn(4)
    x_before = x.clone()
    out = v1(ADD, x=x, y=y)
    assert isinstance(out, tuple) and len(out) == 1
    torch.testing.assert_close(out[0], x_before + y)
    assert torch.equal(x, x_before)


def test_v1_returns_op_outputs_before_new_values():
    x, y = torch.randn(4), torch.randn(4)
    x_before = x.clone()
    total, new_x = v1("autofunc_corpus::add_and_sum.default", x=x, y=y)
    torch.testing.assert_close(new_x, x_before + y)
    torch.testing.assert_close(total, (x_before + y).sum().reshape(1))
    assert torch.equal(x, x_before)


def test_v1_list_and_optional_arguments():
    a, b, y = torch.randn(3), torch.randn(3), torch.randn(3)
    a0, b0 = a.clone(), b.clone()
    new_a, new_b = v1("autofunc_corpus::add_list.default", xs=[a, b], y=y)
    torch.testing.assert_close(new_a, a0 + y)
    torch.testing.assert_close(new_b, b0 + 2 * y)
    assert torch.equal(a, a0) and torch.equal(b, b0)
    # An optional mutable argument passed None contributes no new value.
    assert v1("autofunc_corpus::add_opt.default", x=None, y=y) == ()


def test_lists_holding_none_and_none_lists():
    # Tensor(a!)?[]: a None element gets no new value; Tensor(a!)[]?: a None list gets none.
    a, b, y = torch.randn(3), torch.randn(3), torch.randn(3)
    a0, b0 = a.clone(), b.clone()
    new_a, new_b = v1("autofunc_corpus::add_list_opt.default", xs=[a, None, b], y=y)
    torch.testing.assert_close(new_a, a0 + y)
    torch.testing.assert_close(new_b, b0 + 3 * y)
    assert torch.equal(a, a0) and torch.equal(b, b0)
    assert v1("autofunc_corpus::add_opt_list.default", xs=None, y=y) == ()
    # v2: one base (rows 0 and 2 of a 3x3 buffer) and a None element in between; the wire
    # format gives that element -1 alone.
    base = torch.randn(3, 3)
    base0 = base.clone()
    row0, row2 = (ArgView(0, ViewChain((Select(0, i),))) for i in (0, 2))
    entries = [[row0, None, row2]]
    views_ = encode_views(entries)
    info = autofunc.schema.op_info(torch.ops.autofunc_corpus.add_list_opt.default)
    assert decode_views(info, views_) == {"xs": entries[0]}
    (new_base,) = v2(
        "autofunc_corpus::add_list_opt.default", _bases=[base], _views=views_, y=y[0]
    )
    expected = base0.clone()
    expected[0] += y[0]
    expected[2] += 3 * y[0]
    torch.testing.assert_close(new_base, expected)
    assert torch.equal(base, base0)


def test_decoded_views_are_shared_for_a_plain_wire_only():
    # A decoder's layers carry the same wire: it decodes once, to the same chain objects (the
    # pass keeps per-chain memos on them); a wire read back as a list, or holding anything but
    # ints, decodes afresh each time.
    info = autofunc.schema.op_info(torch.ops.autofunc_corpus.add_list_opt.default)
    entries = [[ArgView(0, ViewChain((Select(0, 1),))), None]]
    wire = encode_views(entries)
    first, again = decode_views(info, wire), decode_views(info, tuple(wire))
    assert first == {"xs": entries[0]} and first["xs"][0].chain is again["xs"][0].chain
    as_list = decode_views(info, list(wire))
    assert as_list == first and as_list["xs"][0].chain is not first["xs"][0].chain
    # another op with the same wire gets its own entry
    other = autofunc.schema.op_info(torch.ops.autofunc_corpus.add_opt_list.default)
    assert decode_views(other, wire)["xs"][0].chain is not first["xs"][0].chain


def test_v2_changes_only_the_view_in_a_new_base():
    base, y = torch.randn(3, 4), torch.randn(4)
    base_before = base.clone()
    out = v2(ADD, _bases=[base], _views=_on_base([Select(0, 1)]), y=y)
    assert isinstance(out, tuple) and len(out) == 1
    (new_base,) = out
    expected = base_before.clone()
    expected[1] += y
    torch.testing.assert_close(new_base, expected)
    assert torch.equal(base, base_before)


def test_v2_two_arguments_on_one_base_share_one_new_base():
    # two(a, b): a += 1 then b *= 2; a = base[0:3], b = base[1:] overlap in rows 1 and 2.
    base = torch.randn(4, 2)
    base_before = base.clone()
    (new_base,) = v2(
        "autofunc_corpus::two.default",
        _bases=[base],
        _views=_on_base([Slice(0, 0, 3, 1)], [Slice(0, 1, 4, 1)]),
    )
    expected = base_before.clone()
    expected[0:3] += 1
    expected[1:] *= 2
    torch.testing.assert_close(new_base, expected)
    assert torch.equal(base, base_before)


def test_v2_as_strided_step_is_relative_to_the_base():
    # Elements 1 and 3 of the base, through the as_strided fallback.
    storage = torch.zeros(8)
    base = storage[2:]  # a base with a storage offset of its own
    (new_base,) = v2(
        ADD, _bases=[base], _views=_on_base([AsStrided((2,), (2,), 1)]), y=torch.ones(2)
    )
    torch.testing.assert_close(new_base, torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0, 0.0]))
    assert torch.equal(storage, torch.zeros(8))


def test_hop_rejects_an_op_overload_instead_of_a_name():
    x = torch.randn(2)
    with pytest.raises(AssertionError, match="qualified name"):
        v1(torch.ops.autofunc_corpus.add_.default, x=x, y=x)


def test_hop_output_is_not_differentiated():
    # The HOP runs below autograd (Note [HOPs below autograd]): plain values come back.
    x = torch.randn(3, requires_grad=True)
    (new_x,) = v1(ADD, x=x.detach(), y=x)
    assert not new_x.requires_grad
    torch.testing.assert_close(new_x, 2 * x.detach())


# -- the geometry the op receives ---------------------------------------------------------------

_seen: list[tuple] = []


@torch.library.custom_op("aftest_hops::record_", mutates_args={"x"})
def record_(x: torch.Tensor) -> None:
    """Records the geometry it is called with, then doubles x."""
    _seen.append((tuple(x.shape), x.stride(), x.storage_offset()))
    x.mul_(2)


_VIEWS = {
    # name: (view of a (3, 4) base, the chain that regenerates it)
    "column": (lambda b: b[:, 1], [Select(1, 1)]),
    "transpose": (lambda b: b.t(), [AsStrided((4, 3), (1, 4), 0)]),
    "strided_rows": (lambda b: b[::2], [Slice(0, 0, 3, 2)]),
}


@pytest.mark.parametrize("view", list(_VIEWS))
def test_v1_op_sees_the_strides_of_the_argument(view):
    make_view, _ = _VIEWS[view]
    base = torch.arange(12.0).reshape(3, 4)
    arg = make_view(base)
    _seen.clear()
    (new,) = v1("aftest_hops::record_.default", x=arg)
    assert _seen == [(tuple(arg.shape), arg.stride(), 0)]
    assert new.stride() == arg.stride()
    torch.testing.assert_close(new, arg * 2)
    assert torch.equal(base, torch.arange(12.0).reshape(3, 4))


@pytest.mark.parametrize("view", list(_VIEWS))
def test_v2_op_sees_the_exact_view_geometry(view):
    make_view, chain = _VIEWS[view]
    base = torch.arange(12.0).reshape(3, 4)
    arg = make_view(base)
    _seen.clear()
    (new_base,) = v2("aftest_hops::record_.default", _bases=[base], _views=_on_base(chain))
    assert _seen == [(tuple(arg.shape), arg.stride(), arg.storage_offset())]
    expected = base.clone()
    make_view(expected).mul_(2)
    torch.testing.assert_close(new_base, expected)
    assert torch.equal(base, torch.arange(12.0).reshape(3, 4))


# -- fake tensors and tracing -------------------------------------------------------------------


def test_fake_mode_outputs():
    with FakeTensorMode():
        base, y = torch.empty(3, 4), torch.empty(4)
        (new_base,) = v2(ADD, _bases=[base], _views=_on_base([Select(0, 1)]), y=y)
        total, new_x = v1("autofunc_corpus::add_and_sum.default", x=base[:, 1], y=y[:3])
    assert isinstance(new_base, FakeTensor) and new_base.shape == (3, 4)
    assert isinstance(total, FakeTensor) and total.shape == (1,)
    assert isinstance(new_x, FakeTensor) and new_x.shape == (3,) and new_x.stride() == (4,)


def _call_v2(base, y):
    return v2(ADD, _bases=[base], _views=_on_base([Select(0, 1)]), y=y)


def _call_v1(base, y):
    return v1("autofunc_corpus::add_and_sum.default", x=base[1], y=y)


@pytest.mark.parametrize("tracing_mode", ["real", "fake", "symbolic"])
@pytest.mark.parametrize("fn, hop", [(_call_v1, v1), (_call_v2, v2)], ids=["v1", "v2"])
def test_make_fx_traces_one_hop_node(fn, hop, tracing_mode):
    gm = make_fx(fn, tracing_mode=tracing_mode)(torch.randn(3, 4), torch.randn(4))
    assert count_targets(gm, lambda t: t is hop) == 1
    # Nothing but the HOP, its getitems and the view feeding v1.
    allowed = {hop, torch.ops.aten.select.int, operator.getitem}
    assert count_targets(gm, lambda t: t not in allowed) == 0
    # The traced graph computes what the direct call does, here on another shape in
    # symbolic mode.
    shape = (5, 4) if tracing_mode == "symbolic" else (3, 4)
    base, y = torch.randn(shape), torch.randn(4)
    got = gm(base.clone(), y)
    expected = fn(base, y)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)


def test_make_fx_symbolic_output_is_symbolic():
    gm = make_fx(_call_v2, tracing_mode="symbolic")(torch.randn(3, 4), torch.randn(4))
    (hop_node,) = [n for n in gm.graph.nodes if n.target is v2]
    (new_base,) = hop_node.meta["val"]
    assert isinstance(new_base.shape[0], torch.SymInt)


# -- _aliases (Note [Read arguments eager aliases]) ------------------------------------------


def test_aliases_wire_round_trip_and_malformed():
    from autofunc.errors import MalformedViewsError
    from autofunc.hops.v2 import ReadAlias, decode_aliases, encode_aliases

    pairs = [("q", "q_out"), ("k", "k_out")]  # one object each: "="
    assert encode_aliases(pairs) == ("q=q_out", "k=k_out")
    assert decode_aliases(encode_aliases(pairs)) == [ReadAlias(*p) for p in pairs]
    # another object over the same memory: "~"
    aliases = [ReadAlias("q", "q_rope", same_object=False), ReadAlias("k", "k_out")]
    assert encode_aliases(aliases) == ("q~q_rope", "k=k_out")
    assert decode_aliases(encode_aliases(aliases)) == aliases
    for bad in (("q",), ("=q_out",), ("q=",), ("~q_out",), ("q~",)):
        with pytest.raises(MalformedViewsError, match="_aliases"):
            decode_aliases(bad)


def test_same_wire_round_trip_and_malformed():
    # Note [Arguments keep their identity]: the regenerated tensors eager passed as one object
    from autofunc.errors import MalformedViewsError
    from autofunc.hops.v2 import decode_same, encode_same

    same = {"b": "a", "xs[2]": "xs[0]"}
    assert encode_same(same) == ("b=a", "xs[2]=xs[0]")
    assert decode_same(encode_same(same)) == same
    for bad in (("b",), ("=a",), ("b=",), ("a=a",)):
        with pytest.raises(MalformedViewsError, match="_same"):
            decode_same(bad)


def test_dense_hands_the_op_one_tensor_for_an_eager_alias():
    # copy_into reads src after writing dst: given one tensor for both (as eager was), it reads
    # what it wrote; the HOP reproduces that on its copy of the base
    x = torch.arange(6.0)
    expected = x.clone()
    corpus.copy_into(expected, expected)
    out = autofunc.auto_functionalized_v2(
        "autofunc_corpus::copy_into.default",
        _bases=[x],
        _views=encode_views([ArgView(0, ViewChain(()))]),
        _aliases=("src=dst",),
    )
    assert torch.equal(out[0], expected)
    assert torch.equal(x, torch.arange(6.0))  # the HOP is functional


def test_dense_hands_the_op_the_same_memory_for_another_object():
    # "src~dst": eager passed two objects over one memory; the HOP hands the op a fresh alias
    # of the regenerated dst, so the op reads what it wrote there, as in eager
    x = torch.arange(6.0)
    expected = x.clone()
    corpus.copy_into(expected.view(2, 3), expected.view(2, 3))
    out = autofunc.auto_functionalized_v2(
        "autofunc_corpus::copy_into.default",
        _bases=[x],
        _views=_on_base([AsStrided((2, 3), (3, 1), 0)]),
        _aliases=("src~dst",),
    )
    assert torch.equal(out[0], expected)
    assert torch.equal(x, torch.arange(6.0))


# -- _reads / _read_views (Note [Read arguments see the written memory]) ----------------------


def test_reads_wire_round_trip_and_malformed():
    from autofunc.errors import MalformedViewsError
    from autofunc.hops.v2 import decode_reads
    from autofunc.schema import op_info

    info = op_info(torch.ops.autofunc_corpus.copy_into.default)
    reads = {"src": ArgView(0, ViewChain((AsStrided((2, 3), (1, 2), 0),)))}
    names, wire = encode_reads(reads)
    assert names == ("src",)
    assert decode_reads(info, names, wire) == reads
    with pytest.raises(MalformedViewsError, match="no read argument"):
        decode_reads(info, ("dst",), wire)  # a mutable argument is no read
    with pytest.raises(MalformedViewsError, match="trailing"):
        decode_reads(info, names, (*wire, 0))
    with pytest.raises(MalformedViewsError, match="ends before"):
        decode_reads(info, names, ())


def test_dense_hands_the_op_a_view_of_the_written_base_for_a_read():
    # copy_into reads src after writing dst; src is dst's memory in another shape (the flat
    # base): eager reads what it wrote through it, and so does the HOP on its copy
    x = torch.arange(6.0)
    expected = x.clone()
    corpus.copy_into(expected.view(2, 3), expected)
    src_view = ArgView(0, ViewChain(()))
    names, wire = encode_reads({"src": src_view})
    out = autofunc.auto_functionalized_v2(
        "autofunc_corpus::copy_into.default",
        _bases=[x],
        _views=_on_base([AsStrided((2, 3), (3, 1), 0)]),
        _reads=names,
        _read_views=wire,
    )
    assert torch.equal(out[0], expected)
    plain = x.clone()
    corpus.copy_into(plain.view(2, 3), x.clone())  # a copy of the old values
    assert not torch.equal(out[0], plain)  # the read saw the writes (else this program differs)
    assert torch.equal(x, torch.arange(6.0))  # the HOP is functional
