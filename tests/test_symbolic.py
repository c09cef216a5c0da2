"""autofunc.symbolic on its own: the memo of static geometry questions."""

import torch
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from autofunc.symbolic import cached_when_static


def _counting():
    calls = []

    @cached_when_static(maxsize=8)
    def area(size: tuple, scale: int) -> int:
        calls.append((size, scale))
        out = scale
        for n in size:
            out = out * n
        return out

    return area, calls


def test_static_calls_are_answered_from_the_memo():
    area, calls = _counting()
    assert area((2, 3), 1) == 6
    assert area((2, 3), 1) == 6
    assert area((2, 3), 2) == 12
    assert calls == [((2, 3), 1), ((2, 3), 2)]
    assert area.cache_info().hits == 1


def test_symbolic_or_unhashable_calls_are_computed_every_time():
    env = ShapeEnv()
    u0 = env.create_unbacked_symint()
    area, calls = _counting()
    for _ in range(2):
        area((u0, 3), 1)
        area([2, 3], 1)  # a list: not a static argument
    assert len(calls) == 4
    assert area.cache_info().currsize == 0
    assert len(env.guards) == 0


def test_the_memo_is_bounded():
    area, _ = _counting()
    for n in range(20):
        area((n,), 1)
    assert area.cache_info().currsize == 8
