"""``autofunc.regions`` on its own: which elements a view covers, whether two regions may share
one, whether one contains another. Conservative answers are checked too: what cannot be
proven disjoint overlaps, and ``contains`` never claims what it cannot prove."""

import pytest
import torch

from autofunc.regions import (
    Region,
    contains,
    is_dense_root,
    is_empty,
    overlaps,
    region_of,
    region_of_geometry,
    region_of_storage,
    tensors_may_overlap,
)


@pytest.fixture
def x():
    return torch.empty(4, 6)


def test_rows(x):
    r0, r1, whole = region_of(x[0], x), region_of(x[1], x), region_of(x, x)
    assert not overlaps(r0, r1)
    assert overlaps(r0, whole) and overlaps(whole, r1)
    assert contains(whole, r0) and not contains(r0, whole)
    assert (r1.lo, r1.hi) == (6 * 4, 12 * 4)  # bytes


def test_interleaved_columns_are_disjoint(x):
    even, odd = region_of(x[:, 0::2], x), region_of(x[:, 1::2], x)
    assert overlaps(region_of(x[:, 0::2], x), region_of(x[:, 2::2], x))
    assert not overlaps(even, odd)  # byte intervals overlap; the boxes do not
    assert even.lo < odd.hi and odd.lo < even.hi


def test_column_block_and_row_overlap(x):
    assert overlaps(region_of(x[:, 2:4], x), region_of(x[1], x))
    assert not overlaps(region_of(x[:2, 2:4], x), region_of(x[2:, 2:4], x))


def test_contains_needs_whole_progressions(x):
    whole_cols = region_of(x[:, 0::2], x)
    assert contains(whole_cols, region_of(x[1:3, 0::4], x))
    assert not contains(whole_cols, region_of(x[1:3, 1::2], x))


def test_contains_a_view_without_a_box():
    # Note [Containment without a box]: an unfold's split has no box; the whole root holds it
    # by its bytes, and two small regions compare element by element
    a = torch.empty(2, 2, 6)
    u = a.unfold(1, 2, 2)
    left, right = u[:, :, :2], u[:, :, 2:]
    whole = region_of(a, a)
    assert region_of(right, a).box is None
    assert contains(whole, region_of(right, a)) and contains(whole, region_of(left, a))
    assert contains(region_of(u, a), region_of(right, a))
    assert not contains(region_of(right, a), region_of(u, a))
    assert not contains(region_of(left, a), region_of(right, a))
    # a permuted contiguous region is gapless; a strided one is not, even over its interval
    t = torch.empty(64, 80)
    assert contains(region_of(t.t(), t), region_of(t[3:9, 1::7], t))
    big = torch.empty(100, 100)
    cols = big[:, ::2]
    assert region_of(cols, big).elems is None  # too many elements to list
    assert not contains(region_of(cols, big), region_of(big[5:7, 1::2].t(), big))


def test_an_empty_view_is_empty_and_nothing_else_is(x):
    assert is_empty(region_of(x[2:2], x)) and is_empty(region_of(x[:, 3:3], x))
    assert not is_empty(region_of(x[0, 0:1], x)) and not is_empty(region_of(x, x))
    assert not is_empty(Region.everything())


def test_a_size_that_may_be_zero_is_not_empty():
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    n = env.create_unbacked_symint()
    torch._check(n >= 0)
    root = ((n, 6), (6, 1), 0)
    assert not is_empty(region_of_geometry(((n,), (6,), 0), root))
    assert is_empty(region_of_geometry(((0, 6), (6, 1), 6), root))


def test_a_root_that_overlaps_itself_gets_no_box():
    root = torch.empty(1, 6).expand(4, 6)
    assert not is_dense_root(root)
    # rows of an expanded root are one memory: they must not be proven disjoint
    assert overlaps(region_of(root[0], root), region_of(root[1], root))


def test_dtype_view_regions_are_in_bytes():
    cache = torch.empty(2, 8, dtype=torch.uint8)
    as_int = cache[1].view(torch.int32)
    assert overlaps(region_of(as_int, cache), region_of(cache[1], cache))
    assert not overlaps(region_of(as_int, cache), region_of(cache[0], cache))


def test_storage_interval_without_a_root(x):
    r = region_of_storage(x[1:3])
    assert (r.lo, r.hi, r.box) == (6 * 4, 18 * 4, None)


def test_geometry_form_matches_tensor_form(x):
    v = x[1:3, ::2]
    by_geometry = region_of_geometry(
        (tuple(v.shape), v.stride(), v.storage_offset()), (tuple(x.shape), x.stride(), 0)
    )
    by_tensor = region_of(v, x)
    assert (by_geometry.lo, by_geometry.hi) == (by_tensor.lo // 4, by_tensor.hi // 4)


def test_tensors_may_overlap(x):
    assert tensors_may_overlap(x[0], x[0:2], x)
    assert not tensors_may_overlap(x[0], x[3], x)


def test_symbolic_geometry_is_decided_without_guards_or_counted_as_overlapping():
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    n = env.create_unbacked_symint()  # rows of an (n, 6) root
    torch._check(n >= 1)
    guards = len(env.guards)
    root = ((n, 6), (6, 1), 0)
    row = lambda i: region_of_geometry(((6,), (1,), 6 * i), root)  # noqa: E731
    col = lambda j: region_of_geometry(((n,), (6,), j), root)  # noqa: E731
    # rows 0 and n - 1 are one row when n == 1: not provably disjoint
    assert overlaps(row(0), row(n - 1))
    assert not overlaps(col(0), col(1))
    assert len(env.guards) == guards  # nothing was specialized


# -- Note [Exact small regions] -------------------------------------------------------------------


def test_views_no_slice_describes_compare_by_their_exact_elements():
    x = torch.zeros(4, 6)
    windows = x.unfold(1, 2, 4)  # columns 0-1 and 4-5 of each row: no select/slice chain
    assert region_of(windows, x).box is None
    assert not tensors_may_overlap(windows, x[1, 2:4], x)  # columns 2-3: untouched
    assert tensors_may_overlap(windows, x[1, 3:5], x)  # column 4 is in a window
    assert tensors_may_overlap(windows, x.t()[5], x)  # column 5
    assert not tensors_may_overlap(windows, x.t()[2], x)
    # Bytes, not elements: an int32 view of the same bytes meets the windows where they are.
    as_int = x.view(torch.int32)
    assert tensors_may_overlap(windows, as_int[2, 4:5], x)
    assert not tensors_may_overlap(windows, as_int[2, 2:4], x)


def test_large_or_symbolic_regions_stay_conservative():
    big = torch.zeros(2, 8192)
    windows, gaps = big.unfold(1, 2, 4), big[:, 2::4].unsqueeze(-1)  # columns 0-1, 4-5, ...; 2, 6
    # 8192 and 4096 elements: the windows are above the listing bound and no box, so only the
    # spans are compared.
    assert region_of(windows, big).elems is None and region_of(windows, big).box is None
    assert tensors_may_overlap(windows, gaps, big)
    small = torch.zeros(2, 16)
    assert not tensors_may_overlap(small.unfold(1, 2, 4), small[:, 2::4].unsqueeze(-1), small)
    # The same elements in other dims are one box (views.coalesced), at any size: unfold(1, 1, 2)
    # is big[:, ::2] with a trailing size-1 dim.
    evens, odds = big.unfold(1, 1, 2), big[:, 1::2].unsqueeze(-1)
    assert region_of(evens, big).box == ((0, 2, 1), (0, 8192, 2))
    assert not tensors_may_overlap(evens, odds, big)


def test_views_of_split_slices_are_the_slices_they_cover():
    # qkv.split(...)[i].view(-1, H, D) (Note [View steps]): the same elements as the slice, so
    # the same box; the query and key heads are disjoint, each inside its own columns.
    qkv = torch.zeros(4, 128)
    q, k, v = qkv.split([64, 32, 32], -1)
    qh, kh = region_of(q.view(-1, 4, 16), qkv), region_of(k.view(-1, 2, 16), qkv)
    assert qh.box == region_of(q, qkv).box == ((0, 4, 1), (0, 64, 1))
    assert kh.box == ((0, 4, 1), (64, 96, 1))
    assert not overlaps(qh, kh) and not overlaps(kh, region_of(v, qkv))
    assert contains(region_of(qkv[:, :96], qkv), kh) and not contains(kh, qh)
    assert overlaps(qh, region_of(qkv[:, 60:70], qkv))


def test_a_view_step_without_a_box_keeps_the_span():
    # Rows 1-2 and 5-6 of an (8, 16) root (x.view(2, 4, 16)[:, 1:3]) are no box of the root's
    # dims: the View step gives none (views.View.box), so the span and the listed elements
    # decide, never a box guessed from another step's.
    from autofunc import views

    x = torch.zeros(8, 16)
    part = x.view(2, 4, 16)[:, 1:3]
    assert views.infer_view_of(x, part) == views.ViewChain(
        (views.View((2, 4, 16)), views.Slice(1, 1, 3))
    )
    assert views.View((2, 4, 16)).box(((0, 8, 1), (0, 16, 1)), (0, 1)) is None
    region = region_of(part, x)
    assert region.box is None and (region.lo, region.hi) == (64, 448)
    assert not tensors_may_overlap(part, x[3:5], x)  # rows 3-4: between the two runs
    assert tensors_may_overlap(part, x[6], x)
