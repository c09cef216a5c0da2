"""``backends.inductor.share_views.share_input_views`` on its own, on graphs that mutate through views."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from autofunc.backends.inductor.share_views import share_input_views
from autofunc.testing import same_result
from tools import corpus

aten = torch.ops.aten


def _selects(gm):
    return sum(1 for n in gm.graph.nodes if n.target is aten.select.int)


def _merged_and_checked(fn, make_inputs):
    """``fn`` traced (mutations kept), merged; the merged graph must agree with ``fn`` in its
    outputs and in the final values of its inputs. Returns (selects before, after)."""
    gm = make_fx(fn)(*make_inputs())
    before = _selects(gm)
    share_input_views(gm.graph)
    gm.graph.lint()
    gm.recompile()
    expected_inputs, got_inputs = make_inputs(), make_inputs()
    expected = fn(*expected_inputs)
    got = gm(*got_inputs)
    assert same_result(got, expected)
    assert all(same_result(g, e) for g, e in zip(got_inputs, expected_inputs))
    return before, _selects(gm)


def _kv():
    return (torch.arange(2 * 2 * 3 * 4, dtype=torch.float32).reshape(2, 2, 3, 4),)


def test_equal_views_of_an_input_are_merged_across_writes():
    # A write through kv[1][0] sits between two reads of kv[1][0]: the later view reads the
    # written value through the earlier node as well.
    def f(kv):
        a = kv[1][0].sum()
        corpus.add_(kv[1][0], torch.ones(3, 4))
        b = kv[1][0].sum()
        corpus.add_(kv[1][1], torch.ones(3, 4))
        return a, b, kv[1][1].sum()

    assert _merged_and_checked(f, _kv) == (10, 3)


@pytest.mark.parametrize("reseat", ["transpose_", "resize_"])
def test_nothing_merged_when_a_node_changes_geometry_in_place(reseat):
    def f(kv):
        a = kv[1][0].sum()
        if reseat == "transpose_":
            kv.transpose_(2, 3)
        else:
            kv.resize_(kv.shape)
        return a, kv[1][0].sum()

    assert _merged_and_checked(f, _kv) == (4, 4)


def test_one_call_keeps_two_objects():
    # two(kv[1][0], kv[1][0]): eager hands the op two tensor objects (Note [Arguments keep
    # their identity]); their common prefix kv[1] may be shared.
    def f(kv):
        corpus.two(kv[1][0], kv[1][0])
        return kv.sum()

    assert _merged_and_checked(f, _kv) == (4, 3)


def test_views_of_computed_buffers_are_left_alone():
    def f(kv):
        y = kv * 2
        return y[1].sum() + y[1].sum()

    assert _merged_and_checked(f, _kv) == (2, 2)


def test_views_with_other_arguments_stay_apart():
    def f(kv):
        return kv[0][1].sum(), kv[1][0].sum(), kv[0][1].sum()

    assert _merged_and_checked(f, _kv) == (6, 4)
