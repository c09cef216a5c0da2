"""How to measure: bytes a call allocates, peak memory, median time with warm-up.

Pure measurement helpers; what is measured lives in the cases modules and how it is shown in
``report``. On CUDA memory comes from ``torch.cuda.max_memory_allocated``; on CPU from the
profiler's allocation events, which see every allocation the compiled code makes.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any, Callable

import torch

__all__ = ["Memory", "measure_memory", "median_time"]


@dataclasses.dataclass(frozen=True)
class Memory:
    allocated: int  # bytes allocated during the call, frees not subtracted
    peak: int  # highest bytes live at once during the call, above what was live before it
    # (On CPU both come from the profiler's memory timeline, which records every allocation of
    # eager ops and of compiled code alike, including a few bytes of scalar temporaries.)


def measure_memory(fn: Callable[[], Any], device: str = "cpu") -> Memory:
    """Bytes allocated by one call of ``fn()`` (warm it up first: compiles allocate too)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        stats0 = torch.cuda.memory_stats().get("allocated_bytes.all.allocated", 0)
        fn()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
        total = torch.cuda.memory_stats().get("allocated_bytes.all.allocated", 0) - stats0
        return Memory(int(total), int(peak))
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler._memory_profiler import Action

    with profile(
        activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True
    ) as prof:
        fn()
    live = peak = total = 0
    for _, action, _, size in prof._memory_profile().timeline:
        if action is Action.CREATE:
            live += size
            total += size
            peak = max(peak, live)
        elif action is Action.DESTROY:
            live -= size
    return Memory(total, peak)


def median_time(
    fn: Callable[[], Any], *, warmup: int = 3, repeat: int = 10, device: str = "cpu"
) -> float:
    """Median seconds per call of ``fn()`` after ``warmup`` calls."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
