"""Written arguments that are ``view``s of a slice: SGLang's in-place rope
writes ``qkv.split(...)[0].view(-1, H, D)``, vLLM's attention writes ``output.view(-1, H, D)``.
Under v2 each is regenerated from its cloned base with select/slice steps and one ``View`` step
(Note [Inferring view steps] in autofunc/views/inference.py), never ``as_strided``; the pass
emits that ``aten.view`` and writes the caller's buffer in place. Checked through the pass alone
on AOTAutograd's graph (static and symbolic row counts) and under Inductor, against eager:
outputs and the final values of mutated inputs.
"""

from __future__ import annotations

import pytest
import torch
import torch._inductor.config as inductor_config

import autofunc
from autofunc.inductor import collect_reports
from autofunc.testing import compile_capture, count_targets, run_against_eager

aten = torch.ops.aten
H, HK, D = 4, 2, 16  # query heads, key/value heads, head size: qkv rows of 128


@torch.library.custom_op("af_view_steps::rope", mutates_args={"q", "k"})
def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor) -> None:
    # [tokens, heads, head size] each; the key reads what the query wrote
    q.mul_(cos[:, None, :])
    k.add_(q[:, : k.shape[1]])


@rope.register_fake
def _(q, k, cos):
    return None


@torch.library.custom_op("af_view_steps::attn", mutates_args={"out"})
def attn(q: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(q.softmax(-1))


@attn.register_fake
def _(q, out):
    return None


@torch.library.custom_op("af_view_steps::rope_out", mutates_args={"q_out", "k_out"})
def rope_out(
    q: torch.Tensor, k: torch.Tensor, q_out: torch.Tensor, k_out: torch.Tensor, cos: torch.Tensor
) -> None:
    # SGLang's apply_rope_pos_ids_cos_sin_cache: reads q/k, writes q_out/k_out
    q_out.copy_(q * cos[:, None, :])
    k_out.copy_(k + q_out[:, : k.shape[1]])


@rope_out.register_fake
def _(q, k, q_out, k_out, cos):
    return None


@pytest.fixture(autouse=True)
def _v2():
    regs = [autofunc.register(op, strategy="v2") for op in (rope, attn, rope_out)]
    try:
        yield
    finally:
        for r in regs:
            r.remove()


def rope_on_split(x, w, cos):  # SGLang: the matmul into qkv, rope on views of its pieces
    qkv = x @ w
    q, k, v = qkv.split([H * D, HK * D, HK * D], -1)
    rope(q.view(-1, H, D), k.view(-1, HK, D), cos)
    return qkv.sum(-1), v * 2


def rope_on_input(qkv, cos):  # the same on a graph input: its final value is checked too
    q, k, v = qkv.split([H * D, HK * D, HK * D], -1)
    rope(q.view(-1, H, D), k.view(-1, HK, D), cos)
    return v.sum(-1)


def attention_output(x, w):  # vLLM: attention writes output.view(-1, H, D) of a fresh buffer
    output = torch.empty(x.shape[0], H * D)
    attn((x @ w).view(-1, H, D), output.view(-1, H, D))
    return output


def sglang_rope(x, w, cos):  # query.view(-1, H, D) passed twice: distinct objects, one memory
    qkv = x @ w
    q, k, v = qkv.split([H * D, HK * D, HK * D], -1)
    rope_out(q.view(-1, H, D), k.view(-1, HK, D), q.view(-1, H, D), k.view(-1, HK, D), cos)
    return qkv.sum(-1), v * 2


def _inputs(fn, tokens=4):
    x, cos = torch.randn(tokens, 8), torch.randn(tokens, D)
    if fn in (rope_on_split, sglang_rope):
        return x, torch.randn(8, 128), cos
    if fn is rope_on_input:
        return torch.randn(tokens, 128), cos
    return x, torch.randn(8, H * D)


CHAINS = {  # per function, the report's view column: no as_strided
    rope_on_split: ["[:, :64] -> view({t}, 4, 16)", "[:, 64:96] -> view({t}, 2, 16)"],
    rope_on_input: ["[:, :64] -> view({t}, 4, 16)", "[:, 64:96] -> view({t}, 2, 16)"],
    attention_output: ["view({t}, 4, 16)"],
}


def _chains(report):
    return [c for d in report.decisions for c in d.chains]


@pytest.mark.parametrize("fn", list(CHAINS), ids=lambda f: f.__name__)
def test_views_of_slices_written_in_place(fn):
    compiled, captured = compile_capture(fn)
    check = run_against_eager(fn, compiled, _inputs(fn))
    assert check.correct, check.mismatch
    report = captured.report
    assert {c.strategy for c in report.calls} == {"v2"}
    assert _chains(report) == [c.format(t=4) for c in CHAINS[fn]], str(report)
    assert report.num_clones == 0, str(report)
    (gm,) = captured.modules
    assert count_targets(gm, lambda t: t is aten.as_strided.default) == 0, gm.code
    assert count_targets(gm, lambda t: t is aten.view.default) >= len(CHAINS[fn]), gm.code


@pytest.mark.parametrize("fn", list(CHAINS), ids=lambda f: f.__name__)
def test_symbolic_rows(fn):
    # vLLM's token count is symbolic: the View step carries it (``view(arg0_1, 4, 16)``, the
    # graph's size input), compiled once
    compiled, captured = compile_capture(fn, dynamic=True)
    for tokens in (3, 7):
        check = run_against_eager(fn, compiled, _inputs(fn, tokens))
        assert check.correct, (tokens, check.mismatch)
    assert len(captured.modules) == 1
    chains = _chains(captured.report)
    assert not any("as_strided" in c for c in chains), chains
    assert all(c.endswith(", 16)") and "view(arg" in c for c in chains), chains


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_under_inductor(dynamic):
    fn = rope_on_split
    with collect_reports() as reports, inductor_config.patch(fx_graph_cache=False):
        compiled = torch.compile(fn, backend="inductor", fullgraph=True, dynamic=dynamic)
        for tokens in (4, 6) if dynamic else (4,):
            check = run_against_eager(fn, compiled, _inputs(fn, tokens))
            assert check.correct, (tokens, check.mismatch)
    (report,) = reports
    assert not any("as_strided" in c for c in _chains(report)), str(report)
    assert report.num_clones == 0, str(report)


def test_sglang_rope_written_views_are_view_steps():
    # The written q_out/k_out, and the read q/k over exactly their memory
    # (Note [A read argument over exactly the written memory]), are views of qkv: view steps.
    compiled, captured = compile_capture(sglang_rope)
    check = run_against_eager(sglang_rope, compiled, _inputs(sglang_rope))
    assert check.correct, check.mismatch
    chains = {a: c for d in captured.report.decisions for a, c in zip(d.args, d.chains)}
    q, k = (c.format(t=4) for c in CHAINS[rope_on_split])
    assert {a: chains[a] for a in ("q_out", "k_out")} == {"q_out": q, "k_out": k}, chains
    assert not any("as_strided" in c for c in chains.values()), str(captured.report)
