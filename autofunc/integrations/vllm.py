"""autofunc inside vLLM: one setting, every vLLM process, both compile modes.

Set ``AUTOFUNC_VLLM`` in the environment that starts vLLM (it reaches the engine's and the
workers' processes); with autofunc installed, vLLM calls :func:`load` in every process through
the ``vllm.general_plugins`` entry point (``pyproject.toml``). With neither variable below set
(or both ``0``), it does nothing.

    AUTOFUNC_VLLM=1          autofunc's pass decides PyTorch's own functional nodes of every
      (or pytorch-nodes)     mutable op (``reinplace_pytorch_nodes()``): vLLM keeps PyTorch's
                             v1 functionalization, so its fusion passes match as before
    AUTOFUNC_VLLM=register   vLLM's mutable ops on the CPU path (the attention op, rotary,
                             oneDNN matmul) are registered with autofunc's v2 as well
                             (:data:`OPS`; those the build lacks are skipped)
    AUTOFUNC_VLLM_FORCE_COMPILE=1   on CPU, keep vLLM's own compile mode (``VLLM_COMPILE``, its
                             pass manager) instead of the whole-graph Inductor vLLM falls back to
                             there, with the CPU workarounds below; also with ``AUTOFUNC_VLLM``
                             unset, so that vLLM alone (its own ``FixFunctionalizationPass``)
                             is measured in that mode

Note [autofunc in vLLM's pass manager]
vLLM's compile mode hands Inductor its ``PostGradPassManager`` as ``post_grad_custom_post_pass``
through config patches (which replace autofunc's pass there, Note [The pass is never missing]
in ``autofunc/backends/inductor/glue.py``). The manager runs vLLM's fusion passes, which match PyTorch's v1
nodes, then clean-ups, an unsafe clone elimination, and last ``FixFunctionalizationPass``,
vLLM's hand-written list of ops it de-functionalizes "blindly". autofunc's pass belongs exactly
there: after the fusions (which must still see the functional nodes) and after the clone
elimination (which assumes a functional graph and would drop a copy the pass keeps). So
``PostGradPassManager.configure`` is wrapped to replace ``fix_functionalization`` by
:class:`AutofuncFixFunctionalization`, which runs autofunc's pass and then vLLM's original on
whatever is left (nodes autofunc leaves to PyTorch), and whose ``uuid`` covers both (vLLM's
compile cache keys on it). The manager is marked so that autofunc's post pass, should it ever
wrap the manager, does not run ahead of the fusions. In the whole-graph mode (vLLM's default on
CPU) no manager is involved and autofunc's own post pass runs.

Note [vLLM's CPU compile mode]
vLLM 0.32.0 rewrites ``VLLM_COMPILE`` to a whole-graph Inductor compile on CPU. Kept as it is
(``AUTOFUNC_VLLM_FORCE_COMPILE=1``), three vLLM bugs stop it, each worked around here: the pass
manager's fusion passes are imported for CUDA/XPU only, so any ``fuse_*`` flag on CPU raises
``NameError`` (turned off); ``compile_sizes`` stays ``None`` on CPU and the piecewise backend
asserts it is a list (set to ``[]``); ``FixFunctionalizationPass`` compares nodes with ``_C``
ops the CPU build does not define (``AttributeError``; defined here as never-called stubs, in
every vLLM process: with the multi-process engine the graphs are compiled in a worker, which
never runs the platform's config hook).
The setting works without ``AUTOFUNC_VLLM`` too: vLLM then runs in its compile mode as it is
(piecewise, its pass manager, its own ``FixFunctionalizationPass``), which is what a vLLM user
compares autofunc against; ``load`` applies it before looking at ``AUTOFUNC_VLLM``.
"""

from __future__ import annotations

import os
from typing import Any

from ..logs import get_logger

__all__ = ["OPS", "AutofuncFixFunctionalization", "force_compile", "load", "mode"]

log = get_logger("autofunc.vllm")

#: The mutable ops vLLM's CPU path compiles, registered under ``AUTOFUNC_VLLM=register``.
OPS = ("vllm::unified_attention_with_output", "_C::rotary_embedding", "_C::onednn_mm")

# ``_C`` ops FixFunctionalizationPass looks up unconditionally (vLLM 0.32.0), absent on CPU.
_FIX_FUNCTIONALIZATION_OPS = (
    "fused_add_rms_norm_static_fp8_quant",
    "rms_norm_dynamic_per_token_quant",
    "rms_norm_static_fp8_quant",
    "silu_and_mul_quant",
    "fused_qk_norm_rope",
    "silu_and_mul",
    "fused_add_rms_norm",
    "rms_norm",
    "rotary_embedding",
)

_loaded: str | None = None
_stubs: Any = None  # the torch.library.Library holding the stubs, kept alive


def mode() -> str:
    """The setting of ``AUTOFUNC_VLLM``: ``""`` (off), ``"pytorch-nodes"`` or ``"register"``."""
    value = os.environ.get("AUTOFUNC_VLLM", "").strip().lower()
    if value in ("", "0", "off", "false"):
        return ""
    if value in ("1", "on", "true", "pytorch-nodes"):
        return "pytorch-nodes"
    if value == "register":
        return "register"
    raise ValueError(
        f"AUTOFUNC_VLLM={value!r}: expected 1 (or pytorch-nodes), register, or 0 to switch off"
    )


def force_compile() -> bool:
    """The setting of ``AUTOFUNC_VLLM_FORCE_COMPILE``: ``1`` keeps vLLM's own compile mode on
    CPU (Note [vLLM's CPU compile mode]), whether ``AUTOFUNC_VLLM`` is set or not."""
    value = os.environ.get("AUTOFUNC_VLLM_FORCE_COMPILE", "").strip().lower()
    if value in ("", "0", "off", "false"):
        return False
    if value in ("1", "on", "true"):
        return True
    raise ValueError(f"AUTOFUNC_VLLM_FORCE_COMPILE={value!r}: expected 1, or 0 to switch off")


def load() -> None:
    """The ``vllm.general_plugins`` entry point: set autofunc up in this vLLM process as
    ``AUTOFUNC_VLLM`` says, and keep vLLM's compile mode on CPU where
    ``AUTOFUNC_VLLM_FORCE_COMPILE=1`` says so, with autofunc's pass or without it (idempotent;
    vLLM calls it in every process)."""
    global _loaded
    if os.environ.get("AUTOFUNC_VLLM_REPORT_DIR"):
        _write_reports(os.environ["AUTOFUNC_VLLM_REPORT_DIR"])
    if force_compile():  # also without autofunc's pass: vLLM alone in its own compile mode
        _keep_compile_mode_on_cpu()
    wanted = mode()
    if not wanted or _loaded == wanted:
        return
    import autofunc

    autofunc.reinplace_pytorch_nodes()
    if wanted == "register":
        _register_ops()
    _wrap_pass_manager()
    _loaded = wanted
    log.info("autofunc set up in vLLM (pid %d): %s", os.getpid(), wanted)


_writing: str | None = None


def _rank() -> int | None:
    """This process's rank among vLLM's workers, once its process group is up."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else None


def _write_reports(folder: str) -> None:
    """``AUTOFUNC_VLLM_REPORT_DIR``: every vLLM process appends, as a JSON line each, the copy
    nodes of every graph Inductor lowers in it and autofunc's report of each graph, with its
    rank, to ``FOLDER/<pid>.jsonl`` (written as each graph compiles: a worker that vLLM ends
    without ``atexit`` loses nothing). :func:`read_report_dir` reads them back per process: the
    reports of every tensor-parallel rank, or of the engine process, reachable from the one
    that started vLLM."""
    global _writing
    if _writing == folder:
        return
    import json

    from torch._inductor import compile_fx

    from autofunc import reports
    from autofunc.testing import copy_nodes

    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{os.getpid()}.jsonl")

    def write(entry: dict) -> None:
        entry.update(pid=os.getpid(), rank=_rank())
        with open(path, "a") as f:
            f.write(json.dumps(entry) + "\n")

    original_passes = compile_fx._recursive_post_grad_passes

    def counting(gm, is_inference: bool = False) -> None:
        original_passes(gm, is_inference)
        write({"graph_copies": [list(c) for c in copy_nodes(gm)]})

    compile_fx._recursive_post_grad_passes = counting
    original_deliver = reports._reports.deliver

    def deliver(report) -> None:
        original_deliver(report)
        write({"report": str(report), "rows": [list(r) for r in report.rows()],
               "copies": [[c.node, c.nbytes, c.kind.name] for c in report.copies]})

    reports._reports.deliver = deliver
    _writing = folder


def read_report_dir(folder: str) -> list[dict]:
    """What every vLLM process wrote under ``AUTOFUNC_VLLM_REPORT_DIR``, one entry a process
    (sorted by rank): ``pid``, ``rank``, ``copies`` (the copy nodes of each lowered graph) and
    ``reports`` (``text``, ``rows``, ``copies`` of each)."""
    import json

    out = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".jsonl"):
            continue
        proc: dict = {"pid": None, "rank": None, "copies": [], "reports": []}
        with open(os.path.join(folder, name)) as f:
            for line in f:
                entry = json.loads(line)
                proc["pid"] = entry["pid"]
                proc["rank"] = entry["rank"] if entry["rank"] is not None else proc["rank"]
                if "graph_copies" in entry:
                    proc["copies"].append([tuple(c) for c in entry["graph_copies"]])
                else:
                    proc["reports"].append({"text": entry["report"], "rows": entry["rows"],
                                            "copies": entry["copies"]})
        out.append(proc)
    return sorted(out, key=lambda p: (p["rank"] is None, p["rank"] or 0, p["pid"]))


def _register_ops() -> None:
    import torch

    import autofunc
    import vllm._custom_ops  # noqa: F401 - defines the _C ops
    import vllm.model_executor.layers.attention  # noqa: F401 - defines the attention op

    for name in OPS:
        ns, op = name.split("::")
        if hasattr(getattr(torch.ops, ns), op):
            autofunc.register(name, strategy="v2")
        else:
            log.info("autofunc: %s is not in this vLLM build; not registered", name)


class AutofuncFixFunctionalization:
    """vLLM's last post-grad pass, replaced: autofunc's pass, then vLLM's own
    ``FixFunctionalizationPass`` on what autofunc left (Note [autofunc in vLLM's pass
    manager])."""

    def __init__(self, original: Any):
        self.original = original

    def __call__(self, graph: Any) -> None:
        from .. import inductor

        inductor.run_pass(
            graph.owning_module, True, note="in vLLM's pass manager, before FixFunctionalization"
        )
        self.original(graph)

    def uuid(self) -> str:
        import hashlib
        import json

        from .. import inductor

        theirs = self.original.uuid() if hasattr(self.original, "uuid") else repr(self.original)
        ours = json.dumps(inductor.ReinplacePass().uuid(), default=repr, sort_keys=True)
        return hashlib.sha256(f"autofunc:{ours};vllm:{theirs}".encode()).hexdigest()


def _wrap_pass_manager() -> None:
    from vllm.compilation.passes import pass_manager

    manager = pass_manager.PostGradPassManager
    if getattr(manager.configure, "autofunc", False):
        return
    configure = manager.configure

    def configure_with_autofunc(self: Any, config: Any) -> None:
        configure(self, config)
        if not isinstance(self.fix_functionalization, AutofuncFixFunctionalization):
            self.fix_functionalization = AutofuncFixFunctionalization(self.fix_functionalization)
        self.runs_autofunc_pass = True  # Note [autofunc in vLLM's pass manager]

    configure_with_autofunc.autofunc = True  # type: ignore[attr-defined]
    manager.configure = configure_with_autofunc


def _keep_compile_mode_on_cpu() -> None:
    """Note [vLLM's CPU compile mode]."""
    from vllm.config import CompilationMode
    from vllm.platforms.cpu import CpuPlatform

    original = CpuPlatform.check_and_update_config.__func__
    if getattr(original, "autofunc", False):
        return

    def check_and_update_config(cls: Any, vllm_config: Any) -> None:
        cc = vllm_config.compilation_config
        wanted = cc.mode
        original(cls, vllm_config)
        if wanted != CompilationMode.VLLM_COMPILE:
            return
        cc.mode = CompilationMode.VLLM_COMPILE
        if cc.compile_sizes is None:
            cc.compile_sizes = []
        for flag, value in vars(cc.pass_config).items():
            if flag.startswith(("fuse_", "enable_qk_norm")) and value is True:
                setattr(cc.pass_config, flag, False)
        _stub_fix_functionalization_ops()

    check_and_update_config.autofunc = True  # type: ignore[attr-defined]
    CpuPlatform.check_and_update_config = classmethod(check_and_update_config)
    from vllm.platforms import current_platform

    if current_platform.is_cpu():  # in every process: the config is made in one, the graphs
        _stub_fix_functionalization_ops()  # compiled in another (the multi-process engine)
    log.info("autofunc: vLLM's compile mode kept on CPU (pid %d)", os.getpid())


def _stub_fix_functionalization_ops() -> None:
    global _stubs
    import torch

    import vllm._custom_ops  # noqa: F401 - defines the _C ops this build has

    missing = [n for n in _FIX_FUNCTIONALIZATION_OPS if not hasattr(torch.ops._C, n)]
    if not missing or _stubs is not None:
        return
    _stubs = torch.library.Library("_C", "FRAGMENT")
    for name in missing:  # compared against by FixFunctionalizationPass, never called
        _stubs.define(f"{name}(Tensor autofunc_stub) -> ()")
