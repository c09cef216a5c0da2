"""examples/tp_decoder.py on two real ranks (gloo, CPU): every all-reduce form under v1 and v2,
each rank checked against eager, no clone left (the decisions are checked on one process with
PyTorch's fake process group in test_collectives.py)."""

import importlib.util
import os
import socket
import sys
from pathlib import Path

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

_EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "tp_decoder.py"

pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()), reason="needs gloo"
)


def _example():
    spec = importlib.util.spec_from_file_location("tp_decoder", _EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module


def _rank(rank: int, world: int, port: int, runs: list) -> None:
    os.environ["TRITON_INTERPRET"] = "1"
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        example = _example()
        for form, backend in runs:
            if not example.run_rank(form, example.Config(), backend, quiet=True):
                raise AssertionError(f"rank {rank}: all_reduce={form} ({backend}) failed")
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_ranks_every_all_reduce_form():
    # Inductor for the in-place form (the example's default), aot_eager for the other two
    # (the same pass on AOTAutograd's graphs; a third of the compile time)
    runs = [("inplace", "inductor"), ("functional", "aot_eager"), ("custom", "aot_eager")]
    mp.start_processes(_rank, args=(2, _free_port(), runs), nprocs=2, start_method="spawn")
