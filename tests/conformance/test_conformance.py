"""The conformance suite: upstream mutable-custom-op programs (tools/conformance), each
under autofunc v1 and v2 on aot_eager, Inductor, torch.export and torch.compile of an exported
module, against eager: outputs and final inputs over two calls on fresh inputs, and no built-in
``auto_functionalized*`` node in any captured graph (tools.conformance.harness).

CI runs the aot_eager cells of every program, the export cells of every program but the
dynamic-shape and inference-mode variants (``_slow``: each re-exports per call; their aot_eager
cells cover the same capture), and the Inductor and export_compile cells of ``INDUCTOR_CI``;
the other cells are ``slow`` (AUTOFUNC_FULL_CONFORMANCE=1 runs them). ``python -m
tools.conformance`` runs the whole matrix, PyTorch's built-in included, and writes
results/conformance.json.

Cells that fail today are strict xfails naming their cause: when a fix
lands, its cells XPASS and the entry must go."""

from __future__ import annotations

import pytest

from tools.conformance import harness
from tools.conformance.harness import BACKENDS, run_cell
from tools.conformance.field import FIELD
from tools.conformance.programs import PROGRAMS

# torch.export's own pytree code warns about LeafSpec; checkpoint warns about context_fn.
pytestmark = pytest.mark.filterwarnings(
    "ignore:.*LeafSpec.*:FutureWarning", "ignore::UserWarning"
)

AUTOFUNC = ("autofunc_v1", "autofunc_v2")

# Inductor cells that run in CI: one of each kind (views of one input, the #198260 trap, a
# list argument, an op with outputs, dynamic shapes, vLLM's split-then-rotate and fused norm).
INDUCTOR_CI = {
    "af_split",
    "af_dst_src_clone",
    "af_extra4_list_of_views",
    "af_with_returns",
    "af_two_mutated_inputs_dynamic",
    "ip_multiple_mutations",
    "vllm_rotary_qkv_split",
    "vllm_fused_add_rms_norm",
    # known failures (strict xfails) that fixes must turn green under Inductor
    "af_unbacked_output",
    "issue_scatter_result_mutated_and_copied_back",
}

# Export cells of dynamic / inference-mode variants that still run in CI.
EXPORT_CI_VARIANTS = {
    "af_two_mutated_inputs_dynamic",
    "af_recompile_slices",
    "af_inference_mode_view",
}


# Field programs (tools/conformance/field.py) whose aot_eager cells run in CI: one of each
# kind; every other field cell is slow (the whole matrix: ``python -m tools.conformance``).
FIELD_CI = {
    "i153389_views_of_one_base",
    "i131192_stepped_view_of_view",
    "i198031_src_is_sibling_row",
    "pr132238_base_and_its_row",
    "vllm_kv_unbind_layers",
    "vllm_mla_rope_slices",
    "sgl_fused_add_rms_two_layers",
    "fsdp_adam_two_steps",
    "i136064_int_view_row_of_intermediate",
    "llama_view_as_complex",
    "list_same_tensor_twice",
    "overlapping_windows_read_between",
}


def _slow(name: str, backend: str) -> bool:
    if PROGRAMS[name].suite == FIELD:
        return not (backend == "aot_eager" and name in FIELD_CI)
    if backend in ("inductor", "export_compile"):
        return name not in INDUCTOR_CI
    if backend == "export":
        p = PROGRAMS[name]
        return bool(p.dynamic or p.inference_mode) and name not in EXPORT_CI_VARIANTS
    return False


# Cells autofunc still fails, each with its reason (none today: every known cause is
# fixed). Keys are (program, strategy, backend); "*" matches any strategy / backend.
XFAIL: dict[tuple[str, str, str], str] = {}


def _xfail_reason(program: str, strategy: str, backend: str) -> str | None:
    for p in (program, "*"):
        for s in (strategy, "*"):
            for b in (backend, "*"):
                if (p, s, b) in XFAIL:
                    return XFAIL[(p, s, b)]
    return None


def _cells():
    for name in PROGRAMS:
        for strategy in AUTOFUNC:
            for backend in BACKENDS:
                if backend not in PROGRAMS[name].backends:
                    continue  # torch.export refuses the program (tools/conformance/field.py)
                marks = []
                if _slow(name, backend):
                    marks.append(pytest.mark.slow)
                reason = _xfail_reason(name, strategy, backend)
                if reason:
                    marks.append(pytest.mark.xfail(strict=True, reason=reason))
                yield pytest.param(name, strategy, backend, marks=marks,
                                   id=f"{name}-{strategy}-{backend}")


@pytest.mark.parametrize("name,strategy,backend", list(_cells()))
def test_conformance(name, strategy, backend):
    run_cell(PROGRAMS[name], strategy, backend)


def test_xfail_table_names_real_cells():
    for program, strategy, backend in XFAIL:
        assert program in PROGRAMS or program == "*"
        assert strategy in AUTOFUNC + ("*",)
        assert backend in BACKENDS + ("*",)
    assert INDUCTOR_CI <= set(PROGRAMS) and EXPORT_CI_VARIANTS <= set(PROGRAMS)


def test_harness_catches_a_missed_input_mutation():
    # A "compiled" function that computes the output but drops the op's write to the input.
    program = PROGRAMS["ip_multiple_mutations"]

    def forgets_the_write(x, out):
        return (x.sin().sin().sin(),)[0]

    with pytest.raises(AssertionError, match="final inputs differ"):
        harness._check_calls(program, forgets_the_write, harness.contextlib.nullcontext)


@pytest.mark.parametrize("backend", ["aot_eager", "export"])
def test_harness_sees_builtin_hops(backend):
    # Unregistered, the op goes through PyTorch's built-in HOP, and the harness reports it.
    assert run_cell(PROGRAMS["af_split"], "builtin_v2", backend) == ["auto_functionalized_v2"]
