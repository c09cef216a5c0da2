"""The one table of configurations every benchmark compares: eager, PyTorch's built-in v1/v2,
autofunc v1/v2. ``bench.sweep`` (its lines), ``bench.run`` and ``tools.compare`` read it."""

from __future__ import annotations

import dataclasses

__all__ = ["CONFIGS", "Config"]


@dataclasses.dataclass(frozen=True)
class Config:
    name: str
    strategy: str | None  # autofunc's strategy; None leaves the ops to PyTorch's own handling
    builtin_v2: bool  # Inductor's ``enable_auto_functionalized_v2`` (the built-in's choice)
    compiled: bool  # False: the eager reference every ratio and byte count is taken against
    note: str = ""  # one line for ``autofunc bench --help``


CONFIGS: dict[str, Config] = {
    c.name: c
    for c in (
        Config("eager", None, True, False, "no compile: the reference every line is compared with"),
        Config("builtin_v1", None, False, True, "PyTorch's auto_functionalized (torch.compile)"),
        Config("builtin_v2", None, True, True, "PyTorch's auto_functionalized_v2 (torch.compile)"),
        Config("autofunc_v1", "v1", True, True, "autofunc_v1 + autofunc's re-inplace pass"),
        Config("autofunc_v2", "v2", True, True, "autofunc_v2 + autofunc's re-inplace pass"),
    )
}
