"""``passes/targets.per_target``: a fact computed once per target object (Note [Facts per
target]), never handed to another object; the pass's per-target facts agree with what they
stand for."""

from __future__ import annotations

import operator

import torch

from autofunc.passes.memory_ops import SCATTER_VIEWS, VIEW_OPS, read_kind
from autofunc.passes.emit import _name_of
from autofunc.backends.inductor.evaluation import _lazy_target
from autofunc.passes.targets import per_target


def test_each_target_is_asked_once():
    asked = []

    @per_target
    def fact(target):
        asked.append(target)
        return f"fact of {target.__name__}"

    assert fact(operator.add) == "fact of add"
    assert fact(operator.add) == "fact of add"
    assert fact(operator.mul) == "fact of mul"
    assert asked == [operator.add, operator.mul]


def test_targets_that_compare_equal_are_still_asked_each():
    # Keyed by object, not by value: two ops that hash and compare equal (an op defined again
    # by a reloaded library compares by its name) each get their own answer.
    asked = []

    class Op:
        def __init__(self, name):
            self.name = name

        def __eq__(self, other):
            return isinstance(other, Op)

        def __hash__(self):
            return 0

    @per_target
    def fact(target):
        asked.append(target)
        return target.name

    first, second = Op("first"), Op("second")
    assert (fact(first), fact(second), fact(first)) == ("first", "second", "first")
    assert asked == [first, second]


def test_the_pass_facts_agree_with_their_definitions():
    aten = torch.ops.aten
    # FX's own naming of a node's target, and Inductor's lazy evaluation of aten ops
    assert _name_of(aten.select.int) == torch.fx.Graph()._target_to_str(aten.select.int)
    assert _name_of(operator.getitem) == "getitem"
    assert _lazy_target(aten.add.Tensor) is True
    assert _lazy_target(aten.mm.default) is False  # an extern kernel, run where it stands
    assert _lazy_target(operator.getitem) is False


def test_how_a_node_reads_is_its_ops_table():
    # the alias analysis's reads (Note [Facts per target]): a view reads nothing, copy_ its
    # source, a scatter all (its first input around what it replaces), anything else all
    aten = torch.ops.aten
    assert {read_kind(op) for op in VIEW_OPS} == {"view"}
    assert {read_kind(op) for op in SCATTER_VIEWS} == {"scatter"}
    assert read_kind(aten.copy_.default) == "copy_"
    assert read_kind(aten.add.Tensor) == read_kind(aten.mm.default) == "all"
