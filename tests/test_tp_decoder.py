"""examples/tp_decoder.py on two real ranks (gloo, CPU): every all-reduce form under v1 and v2,
each rank checked against eager, no clone left (the decisions are checked on one process with
a one-process group in test_collectives.py).

The ranks meet through a file (``init_method="file://..."``, a fresh path per test), so no port
is chosen in advance: gloo's own connections take ports the OS assigns."""

import contextlib
import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tools import corpus

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


@contextlib.contextmanager
def _gloo_rank(rank: int, world: int, store: str):
    """One rank of a gloo group, for a spawned worker: Inductor compiles without worker
    processes (none to tear down at exit) and without its FX graph cache (a cached graph runs
    no post-grad pass, so it would have no report)."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    os.environ["TRITON_INTERPRET"] = "1"
    inductor_config.compile_threads = 1
    inductor_config.fx_graph_cache = False
    functorch_config.enable_autograd_cache = False
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _rank(rank: int, world: int, store: str, runs: list) -> None:
    with _gloo_rank(rank, world, store):
        example = _example()
        for form, backend in runs:
            if not example.run_rank(form, example.Config(), backend, quiet=True):
                raise AssertionError(f"rank {rank}: all_reduce={form} ({backend}) failed")


def _store(tmp_path: Path) -> str:
    """A path for the ranks' FileStore: new (the store creates it) and this test's own."""
    return str(tmp_path / "store")


def test_two_ranks_every_all_reduce_form(tmp_path):
    # Inductor for the in-place form (the example's default), aot_eager for the other two
    # (the same pass on AOTAutograd's graphs; a third of the compile time)
    runs = [("inplace", "inductor"), ("functional", "aot_eager"), ("custom", "aot_eager")]
    mp.start_processes(_rank, args=(2, _store(tmp_path), runs), nprocs=2, start_method="spawn")


class _CountingModel(torch.nn.Module):
    """Two linears and buffers a mutable op updates (MoE-style token counts and a running
    mean), one of them saved for the backward."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)
        self.register_buffer("counts", torch.zeros(4, 8))
        self.register_buffer("mean", torch.zeros(8))

    def forward(self, x):
        h = self.a(x).relu()
        corpus.add_(self.counts, h.detach().abs())
        corpus.add_(self.mean, h.detach().mean(0) * 0.1)
        return (self.b(h) * self.counts).sum() + self.mean.sum()


def _ddp_rank(rank: int, world: int, store: str) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    from autofunc.inductor import collect_reports

    with _gloo_rank(rank, world, store):
        for strategy in ("v1", "v2"):
            regs = corpus.register_all(strategy)
            try:
                torch.manual_seed(0)
                eager, model = _CountingModel(), _CountingModel()
                model.load_state_dict(eager.state_dict())
                ddp_eager, ddp = DDP(eager), DDP(model)
                compiled = torch.compile(ddp)
                opt_eager = torch.optim.SGD(ddp_eager.parameters(), lr=0.1)
                opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
                with collect_reports() as reports:
                    for step in range(2):
                        g = torch.Generator().manual_seed(rank + step)
                        x = torch.randn(4, 8, generator=g)
                        for run, o in ((ddp_eager, opt_eager), (compiled, opt)):
                            o.zero_grad()
                            run(x).backward()
                            o.step()
                decisions = [d.reason.name for r in reports for d in r.decisions]
                print(f"rank {rank} {strategy} decisions: {decisions}", flush=True)
                assert len(decisions) >= 2, decisions  # both buffer updates reached the pass
                for key, value in eager.state_dict().items():
                    torch.testing.assert_close(
                        model.state_dict()[key], value, msg=f"rank {rank} {strategy} {key}"
                    )
            finally:
                for r in regs:
                    r.remove()
                torch._dynamo.reset()


def test_two_ranks_ddp_training_with_buffers_updated_by_mutable_ops(tmp_path):
    mp.start_processes(_ddp_rank, args=(2, _store(tmp_path)), nprocs=2, start_method="spawn")
