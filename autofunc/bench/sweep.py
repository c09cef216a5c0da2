"""Which points a benchmark measures: a declarative :class:`Sweep` and the named sweeps.

Shaped like ``triton.testing.Benchmark``: ``x_names``/``x_vals`` are the model sizes on the x
axis, ``line_arg``/``lines`` the strategies drawn as separate lines, ``args`` the fixed model
settings. ``QUICK``, ``FULL`` and ``GPU`` are data, not branches in the runner. Pure data: no
measuring, no printing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import torch

from .cases import CASES
from .configs import CONFIGS
from .model import ModelConfig

__all__ = ["FULL", "GPU", "QUICK", "STRATEGIES", "SWEEPS", "Sweep"]

# The configurations a sweep can draw as lines (``bench.configs``).
STRATEGIES = CONFIGS

# x name -> ModelConfig field, where they differ.
_X_FIELDS = {"cache_blocks": "num_blocks"}


@dataclasses.dataclass(frozen=True)
class Sweep:
    """Every ``case`` at every ``x_vals`` point, once per entry of ``lines``."""

    name: str
    x_names: tuple[str, ...]  # ModelConfig knobs on the x axis ("cache_blocks", "layers", ...)
    x_vals: tuple[tuple[Any, ...], ...]  # one tuple per point, in x_names order
    line_arg: str = "strategy"
    lines: tuple[str, ...] = tuple(STRATEGIES)
    cases: tuple[str, ...] = tuple(CASES)
    args: dict[str, Any] = dataclasses.field(default_factory=dict)  # fixed ModelConfig fields
    device: str = "cpu"
    dtype: str = "float32"
    backend: str = "inductor"
    warmup: int = 3
    repeat: int = 10
    cpu_threads: int | None = 1  # torch threads on CPU (None: torch's default); 1 keeps
    # step times steady on a shared machine, where OpenMP barriers stall on a busy core
    isolate: bool = True  # each point in its own process (False: in this process, for tests)
    timeout_s: float = 600.0  # per point

    def __post_init__(self) -> None:
        if self.line_arg != "strategy":
            raise ValueError(
                f"Sweep {self.name!r}: line_arg must be 'strategy', got {self.line_arg!r}"
            )
        unknown = [s for s in self.lines if s not in STRATEGIES]
        unknown += [c for c in self.cases if c not in CASES]
        fields = {f.name for f in dataclasses.fields(ModelConfig)}
        unknown += [x for x in (*self.x_names, *self.args) if _X_FIELDS.get(x, x) not in fields]
        if unknown:
            raise ValueError(
                f"Sweep {self.name!r}: unknown strategies/cases/model fields {unknown}; known: "
                f"{list(STRATEGIES)}, {list(CASES)}, {sorted(fields | set(_X_FIELDS))}"
            )
        bad = [v for v in self.x_vals if len(v) != len(self.x_names)]
        if bad:
            raise ValueError(
                f"Sweep {self.name!r}: x_vals {bad} do not match x_names {self.x_names}"
            )

    def config(self, xs: dict[str, Any]) -> ModelConfig:
        """The model configuration at one point ``{x_name: value}``."""
        fields = {_X_FIELDS.get(k, k): v for k, v in {**self.args, **xs}.items()}
        return ModelConfig(**fields)

    def points(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(case, {x_name: value})`` for every point, case-major."""
        for case in self.cases:
            for vals in self.x_vals:
                yield case, dict(zip(self.x_names, vals))

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    def replace(self, **changes: Any) -> Sweep:
        return dataclasses.replace(self, **changes)


QUICK = Sweep(
    name="quick",
    x_names=("cache_blocks", "layers"),
    x_vals=((16, 2), (64, 2)),
    warmup=2,
    repeat=5,
)

FULL = Sweep(
    name="full",
    x_names=("cache_blocks", "layers"),
    x_vals=tuple((blocks, layers) for layers in (2, 8) for blocks in (64, 256, 1024, 4096)),
)

# vLLM-like shapes (head_dim 128, bf16): the 8-layer cache is 1 GiB and 4 GiB.
GPU = Sweep(
    name="gpu",
    x_names=("cache_blocks", "layers"),
    x_vals=((2048, 8), (8192, 8)),
    args={
        "hidden": 1024,
        "heads": 8,
        "kv_heads": 8,
        "head_dim": 128,
        "batch": 32,
        "intermediate": 2048,
    },
    device="cuda",
    dtype="bfloat16",
    warmup=5,
    repeat=20,
)

SWEEPS = {s.name: s for s in (QUICK, FULL, GPU)}
