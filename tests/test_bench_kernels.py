"""autofunc.bench.kernels on the CPU: the launchers under the Triton interpreter at tiny shapes,
a fixed timer instead of do_bench (the timing itself needs a GPU)."""

import pytest

from autofunc.bench import kernels as kb


@pytest.fixture
def tiny(monkeypatch):
    for name, value in dict(Q_HEADS=4, KV_HEADS=2, HEAD=16, BLOCK=4, HIDDEN=64, MAX_POS=32).items():
        monkeypatch.setattr(kb, name, value)


def test_every_kernel_matches_its_reference_and_reports_fractions(tiny):
    todo = [(k, {"tokens": 8}) for k in list(kb.GOALS)[:3]]
    todo.append(("paged_attention", {"batch": 2, "context": 10}))
    timer = iter([2.0, 1.0] * 3 + [2.0, 1.0, 0.5])  # kernel ms, copy ms (, sdpa ms)
    points = kb.run(todo, "cpu", timer=lambda fn: (fn(), next(timer))[1], progress=lambda _: 0)
    assert [p.error for p in points] == ["", "", "", ""]
    assert all(p.checked for p in points)
    # The copy moves the kernel's bytes in half the time: half the copy's bandwidth.
    assert [round(p.fraction, 6) for p in points] == [0.5] * 4
    assert [p.meets_goal for p in points] == [False] * 4
    assert points[-1].sdpa_ms == 0.5


def test_bytes_counted(tiny):
    # reshape_and_cache, 8 tokens x 2 heads x 16 bf16: K and V read, the same written, slots.
    assert kb.measure("reshape_and_cache", {"tokens": 8}, check=False, dev="cpu",
                      timer=lambda fn: 1.0).bytes == 4 * 8 * 2 * 16 * 2 + 8 * 8
    # attention, 2 sequences of 10 tokens: K and V of each token, query and out, tables, lens.
    p = kb.measure("paged_attention", {"batch": 2, "context": 10}, check=False, dev="cpu",
                   timer=lambda fn: 1.0)
    assert p.bytes == 2 * 2 * 10 * 2 * 16 * 2 + 2 * 2 * 4 * 16 * 2 + 2 * 3 * 4 + 2 * 4


def test_points_respect_the_memory_cap():
    names = [k for k, _ in kb.points(quick=False, max_gib=1.0)]
    assert names.count("rotary_embedding") == 3
    attention = [s for k, s in kb.points(quick=False, max_gib=1.0) if k == "paged_attention"]
    assert all(2 * s["batch"] * s["context"] * 8 * 128 * 2 <= 2**30 for s in attention)
    assert {"batch": 1, "context": 32768} in attention
