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

__all__ = ["FULL", "GPU", "MODES", "QUICK", "STRATEGIES", "SWEEPS", "Sweep"]

# The configurations a sweep can draw as lines (``bench.configs``).
STRATEGIES = CONFIGS

# torch.compile modes a sweep can use ("reduce-overhead": CUDA graphs, as vLLM runs decode).
MODES = (None, "reduce-overhead")

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
    mode: str | None = None  # torch.compile mode: None (default) or "reduce-overhead"
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
        if self.mode not in MODES:
            raise ValueError(f"Sweep {self.name!r}: mode must be one of {MODES}, got {self.mode!r}")
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

# vLLM-like decode step on a GPU: 32 layers, head_dim 128, GQA 4 (8 query / 2 KV heads), bf16,
# block size 16, 32 sequences. A cache block of all 32 layers holds 512 KiB, so the KV cache is
# 256 MiB, 1 GiB, 4 GiB and 8 GiB (contexts up to 256, 1k, 4k and 8k tokens per sequence).
GPU = Sweep(
    name="gpu",
    x_names=("cache_blocks", "layers"),
    x_vals=((512, 32), (2048, 32), (8192, 32), (16384, 32)),
    cases=("model",),
    args={
        "hidden": 1024,
        "heads": 8,
        "kv_heads": 2,
        "head_dim": 128,
        "batch": 32,
        "intermediate": 2048,
    },
    device="cuda",
    dtype="bfloat16",
    warmup=5,
    repeat=20,
    timeout_s=300.0,
)

SWEEPS = {s.name: s for s in (QUICK, FULL, GPU)}
