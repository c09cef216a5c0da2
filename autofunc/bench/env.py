"""What every benchmark record carries: device, versions, git commit (and on CUDA the driver)."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import torch

__all__ = ["environment"]


def environment() -> dict:
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    if torch.cuda.is_available():
        device = torch.cuda.get_device_name()
    else:
        device = (
            f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
        )
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parent,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    env = {
        "device": device,
        "torch": torch.__version__,
        "triton": triton_version,
        "python": platform.python_version(),
        "commit": commit,
    }
    if torch.cuda.is_available():
        env["cuda"] = torch.version.cuda
        env["driver"] = _nvidia_driver()
    return env


def _nvidia_driver() -> str | None:
    """The NVIDIA driver version from ``nvidia-smi``, best effort (torch does not expose it)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            check=False,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0] if out.strip() else None
