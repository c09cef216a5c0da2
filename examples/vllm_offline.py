"""autofunc inside vLLM: a tiny random Llama, eager tokens against compiled tokens, and the report.

    pip install '.[vllm]' && pip uninstall -y torchvision torchaudio torchcodec
    python examples/vllm_offline.py                        # AUTOFUNC_VLLM=1, vLLM's default mode
    python examples/vllm_offline.py --autofunc register    # also register vLLM's ops with autofunc
    python examples/vllm_offline.py --compile-mode vllm    # vLLM's own compile mode (pass manager)
    python examples/vllm_offline.py --custom-ops default   # vLLM's default custom ops
    python examples/vllm_offline.py --mp                   # vLLM's multi-process engine
    python examples/vllm_offline.py --autofunc 0           # vLLM as it is, for comparison

The model (hidden 128, 2 layers, 4 heads, 2 KV heads, head_dim 32: the CPU attention kernel
rejects 16; float32) is made on the fly with transformers and saved to a temporary folder; the
prompts are token ids (no tokenizer), decoding is greedy. Eager (``enforce_eager=True``) and
compiled runs each happen in a fresh process, the only setting autofunc needs being the
environment variable ``AUTOFUNC_VLLM`` (``autofunc/integrations/vllm.py``), which reaches every
vLLM process through its plugin entry point. In-process runs also print autofunc's report and
count the copy nodes (clone, copy_, *_scatter) of every graph Inductor lowers. Exits 1 when the
tokens differ. ``--json PATH`` writes everything measured, with the compile mode vLLM ended up
in and its custom-op setting.

Custom ops: by default the run enables vLLM's rotary op (``custom_ops=["+rotary_embedding"]``),
a mutable custom op writing query and key in place, which vLLM's compile mode on CPU leaves
off otherwise (its default there is ``"none"``: every vLLM CustomOp runs as plain torch code);
``--custom-ops default`` passes no setting, ``--custom-ops +rms_norm,+rotary_embedding`` any list.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

PROMPTS = [[1, 2, 3, 4, 5, 6, 7, 8], [100, 200, 300], [42] * 5]


#: One tiny random configuration per architecture: what the pass sees differs between them
#: (vLLM's own model code for each on this build).
ARCHS = {
    "llama": "LlamaConfig",        # the plain decoder
    "qwen3": "Qwen3Config",        # RMS norms on q and k, split views of the qkv buffer
    "phi3": "Phi3Config",          # partial rotary: half of each head rotated (slices of heads)
    "mixtral": "MixtralConfig",    # mixture of experts: 4 experts, 2 per token
}


def make_model(folder: str, seed: int = 0, arch: str = "llama") -> None:
    import torch
    import transformers

    torch.manual_seed(seed)
    common = dict(
        vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    extra: dict = {
        "phi3": dict(partial_rotary_factor=0.5, original_max_position_embeddings=256),
        "mixtral": dict(num_local_experts=4, num_experts_per_tok=2),
    }.get(arch, {})
    if arch == "phi3":
        common.pop("head_dim")  # Phi-3 derives it: hidden / heads
    config = getattr(transformers, ARCHS[arch])(**common, **extra)
    model = transformers.AutoModelForCausalLM.from_config(config).float().eval()
    with torch.no_grad():  # larger than HF's init, so greedy decoding does not repeat one token
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.1)
    model.save_pretrained(folder)


def child(args: argparse.Namespace) -> dict:
    """One vLLM run in this process; returns what it measured."""
    import torch  # noqa: F401 - before vLLM, so that the copy counter can hook Inductor

    from vllm import LLM, SamplingParams

    compilation: dict = {}
    if args.custom_ops != "default":
        compilation["custom_ops"] = [op for op in args.custom_ops.split(",") if op]
    if args.compile_mode == "vllm":
        compilation["mode"] = "VLLM_COMPILE"
    measured: dict = {"copies": [], "reports": []}
    # in one process the copies are counted here; with worker processes (--mp, --tp 2) each
    # process writes its own to AUTOFUNC_VLLM_REPORT_DIR (autofunc/integrations/vllm.py)
    counting = args.child == "compiled" and not args.mp and args.tp == 1
    if args.no_reinplace:  # every buffer cloned: a graph full of copies for the report to count
        from autofunc.registry import switches

        switches.state.reinplace = False
    if counting:
        from autofunc.testing import post_grad_copies

        counter = post_grad_copies()
        measured["copies"] = counter.__enter__()
    start = time.perf_counter()
    llm = LLM(
        model=args.model, skip_tokenizer_init=True, dtype="float32", seed=0,
        enforce_eager=args.child == "eager", compilation_config=compilation,
        max_model_len=args.tokens, max_num_seqs=8, tensor_parallel_size=args.tp,
    )
    measured["init_s"] = time.perf_counter() - start
    cc = llm.llm_engine.vllm_config.compilation_config  # as vLLM (and the plugin) left it
    measured["vllm_mode"] = cc.mode.name
    measured["vllm_custom_ops"] = list(cc.custom_ops)
    # the token count the graphs are compiled for as a size hint (vLLM's profile run), at
    # which the copy nodes' bytes are counted
    scheduler = llm.llm_engine.vllm_config.scheduler_config
    measured["max_num_batched_tokens"] = scheduler.max_num_batched_tokens
    params = SamplingParams(temperature=0, max_tokens=args.max_tokens, ignore_eos=True)
    outs = llm.generate([{"prompt_token_ids": ids} for ids in PROMPTS], params)
    measured["tokens"] = [list(o.outputs[0].token_ids) for o in outs]
    if counting:
        counter.__exit__(None, None, None)
        from autofunc.inductor import last_reports

        measured["reports"] = [str(r) for r in last_reports()]
        measured["rows"] = [list(row) for r in last_reports() for row in r.rows()]
        measured["report_bytes_cloned"] = sum(r.bytes_cloned for r in last_reports())
        # every copy node each report counts, for mutations or not (autofunc/passes/copies.py)
        measured["report_copies"] = [
            [[c.node, c.nbytes, c.kind.name] for c in r.copies] for r in last_reports()
        ]
    report_dir = os.environ.get("AUTOFUNC_VLLM_REPORT_DIR")
    if args.child == "compiled" and report_dir and not counting:
        from autofunc.integrations.vllm import read_report_dir

        del llm  # the workers stop, their last lines written
        measured["processes"] = read_report_dir(report_dir)
        graphs = measured["processes"]
        measured["copies"] = [g for p in graphs for g in p["copies"]]
        measured["reports"] = [r["text"] for p in graphs for r in p["reports"]]
        measured["rows"] = [row for p in graphs for r in p["reports"] for row in r["rows"]]
        measured["report_copies"] = [r["copies"] for p in graphs for r in p["reports"]]
    return measured


def run_child(args: argparse.Namespace, which: str) -> dict:
    env = dict(os.environ)
    env["AUTOFUNC_VLLM"] = args.autofunc if which == "compiled" else "0"
    vllm_mode = args.compile_mode == "vllm" and which == "compiled"
    env["AUTOFUNC_VLLM_FORCE_COMPILE"] = "1" if vllm_mode else "0"
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if args.mp else "0"
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    # A cache hit skips the post-grad passes, autofunc's and the copy count's (vLLM's own
    # cache switch leaves Inductor's on).
    env["VLLM_DISABLE_COMPILE_CACHE"] = "1"
    env["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"
    report_dir = None
    if which == "compiled" and (args.mp or args.tp > 1):
        report_dir = tempfile.mkdtemp(prefix="autofunc-vllm-reports-")
        env["AUTOFUNC_VLLM_REPORT_DIR"] = report_dir
    if args.tp > 1:
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    cmd = [sys.executable, __file__, "--child", which, "--model", args.model,
           "--autofunc", args.autofunc, "--compile-mode", args.compile_mode,
           "--tokens", str(args.tokens), "--max-tokens", str(args.max_tokens),
           "--custom-ops", args.custom_ops, "--arch", args.arch, "--tp", str(args.tp)]
    cmd += ["--no-reinplace"] if args.no_reinplace and which == "compiled" else []
    cmd += ["--mp"] if args.mp else []
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-8000:])
        raise SystemExit(f"the {which} run failed (exit {proc.returncode})")
    return json.loads(lines[-1][len("RESULT "):])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--autofunc", default="1", choices=["0", "1", "register"],
                        help="AUTOFUNC_VLLM for the compiled run (default 1)")
    parser.add_argument("--compile-mode", default="default", choices=["default", "vllm"],
                        help="vLLM's default on CPU (whole-graph Inductor) or its own mode")
    parser.add_argument("--custom-ops", default="+rotary_embedding",
                        help="vLLM's custom_ops, comma-separated (default +rotary_embedding), "
                        "or 'default' for vLLM's own setting")
    parser.add_argument("--mp", action="store_true", help="vLLM's multi-process engine")
    parser.add_argument("--arch", default="llama", choices=sorted(ARCHS),
                        help="the tiny random model's architecture (default llama)")
    parser.add_argument("--tp", type=int, default=1, help="tensor_parallel_size (default 1)")
    parser.add_argument("--tokens", type=int, default=256, help="max_model_len")
    parser.add_argument("--max-tokens", type=int, default=8, help="tokens to generate")
    parser.add_argument("--json", help="write the measurements here")
    parser.add_argument("--eager-json", help="the eager run's result: read if there, else written")
    parser.add_argument("--no-reinplace", action="store_true",
                        help="autofunc's pass clones every buffer (to see what it would copy)")
    parser.add_argument("--child", choices=["eager", "compiled"], help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(child(args)), flush=True)
        return 0
    with tempfile.TemporaryDirectory(prefix="tiny-llama-") as folder:
        make_model(folder, arch=args.arch)
        args.model = folder
        if args.eager_json and os.path.exists(args.eager_json):
            with open(args.eager_json) as f:
                eager = json.load(f)
        else:
            eager = run_child(args, "eager")
            if args.eager_json:
                with open(args.eager_json, "w") as f:
                    json.dump(eager, f)
        compiled = run_child(args, "compiled")
    same = eager["tokens"] == compiled["tokens"]
    copies = [c for graph in compiled["copies"] for c in graph]
    print(f"eager tokens:    {eager['tokens']}")
    print(f"compiled tokens: {compiled['tokens']}  ({'equal' if same else 'DIFFERENT'})")
    print(f"compile + load: {compiled['init_s']:.1f} s (eager {eager['init_s']:.1f} s)")
    print(f"vLLM's compile mode: {compiled['vllm_mode']}, custom ops: "
          f"{compiled['vllm_custom_ops']}, batched tokens: {compiled['max_num_batched_tokens']}")
    if compiled["copies"] or args.autofunc != "0" or not (args.mp or args.tp > 1):
        print(f"copy nodes in the lowered graphs: {len(copies)}, "
              f"{sum(b for _, b in copies)} B")
    for report in compiled["reports"]:
        print(report)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"config": vars(args), "eager": eager, "compiled": compiled,
                       "same_tokens": same}, f, indent=1)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
