"""A tensor-parallel decoder step on several ranks, its KV cache written through a mutable op.

Each rank holds its shard of a small decoder (Megatron-style): a column-parallel QKV projection
(its share of the heads), a paged KV cache ``[layers, 2, slots, local_heads, head_dim]`` written
per layer through a mutable custom op on ``kv[l, 0]`` / ``kv[l, 1]``, attention over the slots
written so far, a row-parallel output projection and an all-reduce of its partial sums. The
all-reduce takes one of three forms (``--all-reduce``): the functional collective
(``_functional_collectives.all_reduce``), in-place ``dist.all_reduce``, or a mutable custom op
``all_reduce_(Tensor(a!) x)``. For each autofunc strategy every rank compiles its step, checks
the output and its cache shard against eager, and rank 0 prints ``autofunc.explain``'s table
(every rank must call ``explain`` too: it runs the program, collectives included).

    torchrun --nproc-per-node 2 examples/tp_decoder.py [--all-reduce inplace] [--layers 2]

On CPU the ranks talk over gloo, on GPUs over nccl (one device per rank).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import autofunc
from autofunc.testing import same_result

FORMS = ("functional", "inplace", "custom")


@torch.library.custom_op("tp_example::write_kv", mutates_args={"cache"})
def write_kv(cache: torch.Tensor, rows: torch.Tensor, slots: torch.Tensor) -> None:
    """cache[slots] = rows: a paged KV-cache write (``cache`` is ``kv[l, 0]`` or ``kv[l, 1]``)."""
    cache.index_copy_(0, slots, rows)


@torch.library.custom_op("tp_example::all_reduce_", mutates_args={"x"})
def all_reduce_(x: torch.Tensor) -> None:
    """Sum ``x`` over the ranks in place (vLLM's ``tensor_model_parallel_all_reduce`` shape)."""
    dist.all_reduce(x)


MUTABLE_OPS = (write_kv, all_reduce_)


@dataclasses.dataclass(frozen=True)
class Config:
    layers: int = 2
    hidden: int = 64
    heads: int = 4  # over all ranks
    head_dim: int = 16
    slots: int = 32
    tokens: int = 4


def all_reduce(x: torch.Tensor, form: str) -> torch.Tensor:
    """The sum of ``x`` over the ranks, in one of ``FORMS``."""
    if form == "functional":
        return funcol.all_reduce(x, "sum", dist.group.WORLD)
    if form == "inplace":
        dist.all_reduce(x)
        return x
    all_reduce_(x)
    return x


class TPDecoder(torch.nn.Module):
    """One rank's shard of the decoder; weights are the same on every rank before sharding."""

    def __init__(self, config: Config, rank: int, world: int, form: str, device: str):
        super().__init__()
        if config.heads % world:
            raise ValueError(f"heads={config.heads} must be a multiple of the world size {world}")
        self.config, self.form = config, form
        self.local_heads = config.heads // world
        width = self.local_heads * config.head_dim
        g = torch.Generator().manual_seed(0)
        qkv, out = [], []
        for _ in range(config.layers):
            full_qkv = torch.randn(3, config.heads * config.head_dim, config.hidden, generator=g)
            full_out = torch.randn(config.hidden, config.heads * config.head_dim, generator=g)
            # column-parallel: this rank's heads of q, k and v; row-parallel: their columns
            shard = slice(rank * width, (rank + 1) * width)
            qkv.append(full_qkv[:, shard].reshape(3 * width, config.hidden) / config.hidden**0.5)
            out.append(full_out[:, shard] / (config.heads * config.head_dim) ** 0.5)
        self.qkv = torch.nn.Parameter(torch.stack(qkv).to(device), requires_grad=False)
        self.out = torch.nn.Parameter(torch.stack(out).to(device), requires_grad=False)

    def forward(self, h: torch.Tensor, kv: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        c, heads = self.config, self.local_heads
        n = slots.shape[0]
        for layer in range(c.layers):
            q, k, v = (h @ self.qkv[layer].t()).view(n, 3, heads, c.head_dim).unbind(1)
            write_kv(kv[layer, 0], k, slots)
            write_kv(kv[layer, 1], v, slots)
            keys, values = kv[layer, 0], kv[layer, 1]  # [slots, heads, head_dim], read after
            scores = torch.einsum("nhd,shd->hns", q, keys) / c.head_dim**0.5
            attn = torch.einsum("hns,shd->nhd", scores.softmax(-1), values)
            partial = attn.reshape(n, heads * c.head_dim) @ self.out[layer].t()
            h = h + all_reduce(partial, self.form)
        return h


def make_inputs(config: Config, world: int, device: str) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(1)
    h = torch.randn(config.tokens, config.hidden, generator=g).to(device)
    kv = torch.zeros(
        config.layers, 2, config.slots, config.heads // world, config.head_dim, device=device
    )
    slots = torch.randperm(config.slots, generator=g)[: config.tokens].to(device)
    return h, kv, slots


def run_rank(form: str, config: Config, backend: str = "inductor", quiet: bool = False) -> bool:
    """Compile and check this rank's step under v1 and v2; True when every check passed."""
    rank, world = dist.get_rank(), dist.get_world_size()
    device = f"cuda:{torch.cuda.current_device()}" if dist.get_backend() == "nccl" else "cpu"
    model = TPDecoder(config, rank, world, form, device)
    ok = True
    for strategy in ("v1", "v2"):
        regs = [autofunc.register(op, strategy=strategy) for op in MUTABLE_OPS]
        try:
            eager_in = make_inputs(config, world, device)
            compiled_in = make_inputs(config, world, device)
            expected = model(*eager_in)
            torch._dynamo.reset()
            got = torch.compile(model, backend=backend, fullgraph=True)(*compiled_in)
            same = same_result(got, expected, 1e-4, 1e-4) and same_result(
                compiled_in[1], eager_in[1], 1e-4, 1e-4
            )
            report = autofunc.explain(model, *make_inputs(config, world, device), backend=backend)
        finally:
            for r in regs:
                r.remove()
        ok &= same
        if not quiet:
            print(
                f"[rank {rank}] {strategy} all_reduce={form}: output and kv shard match eager: "
                f"{same}"
            )
        if rank == 0 and not quiet:
            print(report)
        if report.num_clones:
            ok = False
            print(f"[rank {rank}] {strategy}: {report.num_clones} clone(s) left", file=sys.stderr)
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all-reduce", default="inplace", choices=FORMS)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--backend", default="inductor", choices=("inductor", "aot_eager"))
    args = ap.parse_args(argv)
    nccl = torch.cuda.is_available() and torch.cuda.device_count() >= int(
        os.environ.get("WORLD_SIZE", "1")
    )
    dist.init_process_group("nccl" if nccl else "gloo")
    if nccl:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    try:
        ok = run_rank(args.all_reduce, Config(layers=args.layers), args.backend)
        flag = torch.tensor([0 if ok else 1], device="cuda" if nccl else "cpu")
        dist.all_reduce(flag)  # every rank's verdict
        return int(flag.item() != 0)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
