"""Compile a small vLLM-style decoder step with autofunc and see where the KV cache went.

The step writes a paged KV cache ``[layers, 2, blocks, block_size, kv_heads, head_dim]`` that is
ONE graph input, through four mutable custom ops per layer (``fused_add_rms_norm``,
``rotary_embedding``, ``reshape_and_cache``, ``paged_decode_attention``). For each autofunc
strategy this script compiles the step, checks the output and the final cache against eager,
and prints ``autofunc.explain``'s table: which buffers were written in place, which were cloned,
why, and how many bytes that cost.

    python examples/vllm_decoder.py [--layers 2] [--backend inductor|aot_eager] [--device cpu]
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

import autofunc
from autofunc.bench.model import MUTABLE_OPS, ModelConfig, TinyDecoder, make_inputs
from autofunc.testing import same_result


def check_against_eager(model: TinyDecoder, config: ModelConfig, device: str, backend: str) -> bool:
    """Compile ``model``; True when its output and final KV cache equal eager's."""
    eager_inputs = make_inputs(config, device)
    expected = model(*eager_inputs.args())
    inputs = make_inputs(config, device)
    torch._dynamo.reset()
    got = torch.compile(model, backend=backend)(*inputs.args())
    same_out = same_result(got, expected, 1e-4, 1e-4)
    same_cache = same_result(inputs.kv_cache, eager_inputs.kv_cache, 1e-4, 1e-4)
    print(f"  output matches eager: {same_out}; final kv_cache matches eager: {same_cache}")
    return same_out and same_cache


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--backend", default="inductor", choices=("inductor", "aot_eager"))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args(argv)

    config = ModelConfig(layers=args.layers)
    model = TinyDecoder(config, args.device)
    print(
        f"TinyDecoder: {config.layers} layers, KV cache {tuple(config.cache_shape())} "
        f"({config.cache_bytes() / 1024:.0f} KiB) on {args.device}, backend={args.backend}"
    )
    ok = True
    for strategy in ("v1", "v2"):
        t0 = time.perf_counter()
        regs = [autofunc.register(op, strategy=strategy) for op in MUTABLE_OPS]
        try:
            print(f"\n== autofunc {strategy} ==")
            ok &= check_against_eager(model, config, args.device, args.backend)
            report = autofunc.explain(
                model, *make_inputs(config, args.device).args(), backend=args.backend
            )
            print(report)
        finally:
            for r in regs:
                r.remove()
        print(f"  ({time.perf_counter() - t0:.1f} s)")
    print("\nall results match eager" if ok else "\nMISMATCH against eager")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
