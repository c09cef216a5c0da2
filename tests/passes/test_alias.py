"""``autofunc.passes.alias.AliasAnalysis`` on its own, on small traced graphs: versions, memory
classes, regions, the first later reader, lazy reads, and merges."""

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from autofunc.passes.alias import AliasAnalysis
from autofunc.passes.policy import LateReads


def _trace(fn, *args):
    gm = make_fx(fn, tracing_mode="fake")(*args)
    return gm, {n.name: n for n in gm.graph.nodes}


def _rows(x):
    y = x.clone()
    a, b = y[0], y[1]
    s = a.sum()
    t = b.sum()
    return s, t


def test_versions_and_memory_classes():
    gm, n = _trace(_rows, torch.randn(3, 4))
    an = AliasAnalysis(gm.graph)
    x, y, a, b = n["x_1"], n["clone"], n["select"], n["select_1"]
    assert an.version[a] == an.version[y] == an.version[b]  # one storage (a StorageWeakRef)
    assert an.version[x] != an.version[y]
    assert an.root[an.version[a]] is y
    assert an.same_memory(a, b) and not an.same_memory(x, y)


def test_regions_and_overlap_within_a_version():
    gm, n = _trace(_rows, torch.randn(3, 4))
    an = AliasAnalysis(gm.graph)
    a, b, y = n["select"], n["select_1"], n["clone"]
    assert not an.may_overlap(a, [an.region(a)], b, [an.region(b)])
    assert an.may_overlap(a, [an.region(a)], y, [an.region(y)])


def test_reads_after_see_only_the_written_region():
    gm, n = _trace(_rows, torch.randn(3, 4))
    an = AliasAnalysis(gm.graph)
    a, b = n["select"], n["select_1"]
    # as if a call at ``select_1`` wrote row 0, then row 1
    assert an.reads_after(b, a, [an.region(a)])[0] is n["sum_1"]
    assert an.reads_after(b, b, [an.region(b)])[0] is n["sum_2"]


def test_lazy_read_before_a_write_still_needed_after():
    def fn(x):
        y = x.clone()
        s = y[0] * 2  # a lazy read of row 0 (pointwise)
        z = y[2].sum()  # the "call" position
        return s, z

    gm, n = _trace(fn, torch.randn(3, 4))
    lazy = AliasAnalysis(gm.graph, late=LateReads(lambda node: node.target is torch.ops.aten.mul.Tensor))
    eager = AliasAnalysis(gm.graph, late=LateReads(lambda node: False))
    call, y = n["sum_1"], n["clone"]
    row0 = lazy.region(n["select"])
    assert lazy.reads_before_used_after(call, y, [row0])[0] is n["mul"]
    # a read evaluated where it stands is done before the call
    assert eager.reads_before_used_after(call, y, [eager.region(n["select"])]) == []


def test_merge_joins_memory_classes():
    gm, n = _trace(_rows, torch.randn(3, 4))
    an = AliasAnalysis(gm.graph)
    x, y = n["x_1"], n["clone"]
    an.merge(x, y)  # as if the clone were written in place into x
    assert an.same_memory(x, y) and an.same_memory(n["select"], x)
    # same geometry: regions still compare exactly across the two versions
    a, b = n["select"], n["select_1"]
    assert not an.may_overlap(x, [an.region(b)], a, [an.region(a)])


def test_merge_of_a_version_at_another_offset_is_coarse():
    def fn(x):
        r = x[1] * 1
        y = x[1:].clone()  # at offset 0, where x[1:] sits at offset 4
        return r, y[0].sum()

    gm, n = _trace(fn, torch.randn(3, 4))
    an = AliasAnalysis(gm.graph)
    x_row1, y_row0 = n["select"], n["select_1"]  # the same memory once y is written into x[1:]
    assert not an.may_overlap(x_row1, [an.region(x_row1)], y_row0, [an.region(y_row0)])
    an.merge(n["slice_1"], n["clone"])
    # y's regions are not in x's coordinates (byte 0 of y is byte 16 of x): count as overlapping
    assert an.may_overlap(x_row1, [an.region(x_row1)], y_row0, [an.region(y_row0)])
