"""Field programs: our own transcriptions of mutable-custom-op programs from where users hit
them, checked by ``harness`` like the rest of the conformance suite (suite ``field``, ops in
``afconf_field``).

Sources: PyTorch issues and pull requests about custom ops, auto-functionalization and
re-inplacing (each ``source`` gives the address and the variation), vLLM's KV-cache write
(``kv_cache.unbind`` + ``reshape_and_cache_flash``) and DeepSeek MLA rotary on slices,
SGLang/vLLM's fused add + RMSNorm on a static residual buffer, fused optimizer steps on
flat-parameter splits, and Llama's ``view_as_complex`` rotary. Gathered on 2026-11-28, when
autofunc v1 and v2 were right in every cell and PyTorch's built-in failed 65 of the 708
(``python -m tools.conformance`` runs the matrix; ``results/conformance.md``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .programs import program, variant

__all__ = ["FIELD"]

FIELD = "field"
NS = "afconf_field"


# torch.export refuses these programs whatever handles their ops, PyTorch's built-in included:
# aliased graph inputs ("expected compiled_fn to be GraphModule", a storage error) and a
# module-level tensor the program mutates ("Constant lifted_tensor_0 is mutated").
NOT_EXPORTED = ("aot_eager", "inductor")


def _program(source: str, ops: tuple[str, ...], make_inputs, **kw):
    """``programs.program`` in suite ``field``, with the ops named in this module's namespace."""
    return program(FIELD, source, tuple(f"{NS}::{o}" for o in ops), make_inputs, **kw)


# -- ops ----------------------------------------------------------------------------------------


@torch.library.custom_op("afconf_field::inc2", mutates_args={"x1", "x2"})
def inc2(x1: Tensor, x2: Tensor) -> None:
    x1.add_(1)
    x2.add_(2)


@torch.library.custom_op("afconf_field::bar_out", mutates_args={"out"})
def bar_out(a: Tensor, b: Tensor, out: Tensor) -> None:
    out.copy_(a + b + 2)


@torch.library.custom_op("afconf_field::sin_", mutates_args={"x"})
def sin_(x: Tensor) -> None:
    x.sin_()


@torch.library.custom_op("afconf_field::cat_into", mutates_args={"ret"})
def cat_into(ret: Tensor, tensors: list[Tensor]) -> None:
    ret.copy_(torch.cat([t.reshape(-1) for t in tensors]).view(ret.shape))


@torch.library.custom_op("afconf_field::reverse_into", mutates_args={"dst"})
def reverse_into(src: Tensor, dst: Tensor) -> None:
    # element by element, so a dst aliased with src reads clobbered values
    n = src.shape[0]
    for k in range(n):
        dst[n - 1 - k] = src[k]


@torch.library.custom_op("afconf_field::add_mul", mutates_args={"a", "b"})
def add_mul(a: Tensor, b: Tensor) -> None:
    a.add_(1)
    b.mul_(2)


@torch.library.custom_op("afconf_field::cache_write", mutates_args={"key_cache", "value_cache"})
def cache_write(key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor,
                slot_mapping: Tensor) -> None:
    # vLLM reshape_and_cache_flash: caches [num_blocks, block_size, heads, dim]
    bs = key_cache.shape[1]
    for t in range(slot_mapping.shape[0]):
        s = int(slot_mapping[t])
        if s < 0:
            continue  # padded token
        key_cache[s // bs, s % bs] = key[t]
        value_cache[s // bs, s % bs] = value[t]


@torch.library.custom_op("afconf_field::rope", mutates_args={"query", "key"})
def rope(positions: Tensor, query: Tensor, key: Tensor | None, cos_sin_cache: Tensor) -> None:
    # neox rotary over the whole last dim of query/key ([T, H, rot] or [T, rot])
    cs = cos_sin_cache[positions]
    half = cs.shape[-1] // 2
    cos, sin = cs[:, :half], cs[:, half:]

    def apply(x):
        shp = x.shape
        x3 = x.reshape(shp[0], -1, 2 * half)
        c, s = cos[:, None, :], sin[:, None, :]
        x1, x2 = x3[..., :half], x3[..., half:]
        o = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)
        x.copy_(o.reshape(shp))

    apply(query)
    if key is not None:
        apply(key)


@torch.library.custom_op("afconf_field::fused_add_rms_norm", mutates_args={"input", "residual"})
def fused_add_rms_norm(input: Tensor, residual: Tensor, weight: Tensor, eps: float) -> None:
    residual.add_(input)
    var = residual.pow(2).mean(-1, keepdim=True)
    input.copy_(residual * torch.rsqrt(var + eps) * weight)


@torch.library.custom_op("afconf_field::adam_step", mutates_args={"params", "exp_avgs", "step"})
def adam_step(params: list[Tensor], exp_avgs: list[Tensor], grads: list[Tensor],
              step: Tensor, lr: float) -> None:
    step.add_(1)
    for p, m, g in zip(params, exp_avgs, grads):
        m.mul_(0.9).add_(g, alpha=0.1)
        p.sub_(lr * m / step)


@torch.library.custom_op("afconf_field::scale_opt", mutates_args={"x"})
def scale_opt(x: Tensor | None, y: Tensor) -> None:
    if x is not None:
        x.mul_(y)


@torch.library.custom_op("afconf_field::add_ret", mutates_args={"x"})
def add_ret(x: Tensor, y: Tensor) -> Tensor:
    x.add_(y)
    return x * 2


@add_ret.register_fake
def _(x, y):
    return torch.empty_like(x)


@torch.library.custom_op("afconf_field::bump", mutates_args={"x"})
def bump(x: Tensor) -> None:
    x.add_(1)


@torch.library.custom_op("afconf_field::xor_bits", mutates_args={"x"})
def xor_bits(x: Tensor) -> None:
    x.bitwise_xor_(0x00400000)


@torch.library.custom_op("afconf_field::add_list", mutates_args={"xs"})
def add_list(xs: list[Tensor], y: Tensor) -> None:
    for i, x in enumerate(xs):
        x.add_(y * (i + 1))


@torch.library.custom_op("afconf_field::sin_into", mutates_args={"out"})
def sin_into(x: Tensor, out: Tensor) -> None:
    out.copy_(x.sin())


@torch.library.custom_op("afconf_field::stats", mutates_args={"mean", "var"})
def stats(x: Tensor, mean: Tensor, var: Tensor, momentum: float) -> None:
    mean.mul_(1 - momentum).add_(x.mean(0) * momentum)
    var.mul_(1 - momentum).add_(x.var(0) * momentum)


fops = torch.ops.afconf_field


def cos_sin_cache(rot=8, max_pos=64):
    inv = 1.0 / (10000 ** (torch.arange(0, rot, 2, dtype=torch.float) / rot))
    f = torch.outer(torch.arange(max_pos, dtype=torch.float), inv)
    return torch.cat([f.cos(), f.sin()], -1)


# -- programs -----------------------------------------------------------------------------------

I153389 = "https://github.com/pytorch/pytorch/issues/153389"


def _views_of_base():
    base = torch.randn(3, 3)
    return base[0], base[1], torch.zeros(3, 3)


@_program(I153389 + " (x1=x[0], x2=x[1] graph inputs of one base; bar_out(x1[0], x2[0], out))",
          ("inc2", "bar_out"), _views_of_base)
def i153389_views_of_one_base(x1, x2, out):
    fops.inc2(x1, x2)
    fops.bar_out(x1[0], x2[0], out)
    return out


@_program(I153389 + " (same, views taken before the first op)", ("inc2", "bar_out"),
          lambda: (torch.randn(3, 3), torch.zeros(3, 3)))
def i153389_views_taken_before(x, out):
    x1, x2 = x[0], x[1]
    a, b = x1[0], x2[0]
    fops.inc2(x1, x2)
    fops.bar_out(a, b, out)
    return out


I131192 = "https://github.com/pytorch/pytorch/issues/131192"


@_program(I131192 + " (mutated arg a column of a graph input)", ("sin_",),
          lambda: (torch.randn(4, 5),))
def i131192_column_of_input(x):
    fops.sin_(x[:, 1])
    return x.sum(0)


@_program(I131192 + " (graph input itself non-contiguous: x = base.t())", ("sin_",),
          lambda: (torch.randn(5, 4).t(),))
def i131192_transposed_graph_input(x):
    fops.sin_(x)
    return x[0] * 1


@_program(I131192 + " (mutated arg a stepped slice of a slice of a graph input, row 0 read after)",
          ("sin_",), lambda: (torch.randn(4, 6),))
def i131192_stepped_view_of_view(x):
    v = x[1:][:, ::2]
    fops.sin_(v)
    return x[0] + 1, x[1] * 1


I127821 = "https://github.com/pytorch/pytorch/issues/127821"


@_program(I127821 + " (Tensor[] input, out written into a full() buffer, read downstream)",
          ("cat_into",), lambda: (torch.randn(4, 3), torch.randn(2, 3), torch.randn(2, 3)))
def i127821_cat_into_full(x, y, z):
    buf = torch.full((2, 12), 1.0)
    fops.cat_into(buf, [x, y, z])
    return (buf * buf).sum(), buf[1]


@_program(I127821 + " (cat into the second half of a buffer that is also read before)",
          ("cat_into",), lambda: (torch.randn(4, 3), torch.randn(2, 3)))
def i127821_cat_into_half(x, y):
    buf = torch.ones(2, 15) * 3
    before = buf[1].sum()
    fops.cat_into(buf[:, 6:].t(), [x, y])  # non-contiguous destination
    return buf, before


I198031 = "https://github.com/pytorch/pytorch/issues/198031"


@_program(I198031 + " (y = x.clone(); reverse_into(y, x); y returned too)", ("reverse_into",),
          lambda: (torch.arange(8.0) + torch.randn(8),))
def i198031_clone_src_returned(x):
    y = x.clone()
    fops.reverse_into(y, x)
    return x * 2.0, y


@_program(I198031 + " (clone of a transposed view as src, dst the transposed view)",
          ("reverse_into",), lambda: (torch.randn(3, 5),))
def i198031_transposed_clone(x):
    xt = x.t()
    y = xt.clone()
    fops.reverse_into(y, xt)
    return x


@_program(I198031 + " (src a view of the dst's base, read through: op(x[1], x[0]))",
          ("reverse_into",), lambda: (torch.randn(2, 6),))
def i198031_src_is_sibling_row(x):
    b = x * 1
    fops.reverse_into(b[1], b[0])
    fops.reverse_into(b[0].clone(), b[1])
    return b


PR132238 = "https://github.com/pytorch/pytorch/pull/132238 (functional_op(x, x[0]))"


@_program(PR132238, ("add_mul",), lambda: (torch.randn(3, 4),))
def pr132238_base_and_its_row(x):
    fops.add_mul(x, x[0])
    return x * 1


@_program(PR132238 + " on an intermediate", ("add_mul",), lambda: (torch.randn(3, 4),))
def pr132238_intermediate_base_and_row(x):
    y = x + 1
    fops.add_mul(y[0], y)
    return y


VLLM_FLASH = ("vLLM FlashAttentionImpl.forward: key_cache, value_cache = kv_cache.unbind(0); "
              "reshape_and_cache_flash (vllm/v1/attention/backends/flash_attn.py)")


def _kv_inputs(layers=2, blocks=4, bs=4, heads=2, dim=4, tokens=5):
    kv = torch.zeros(layers, 2, blocks, bs, heads, dim)
    qkv = torch.randn(tokens, 3 * heads * dim)
    slots = torch.tensor([3, 7, -1, 12, 0][:tokens])
    return kv, qkv, slots


@_program(VLLM_FLASH, ("cache_write",), _kv_inputs)
def vllm_kv_unbind_layers(kv, qkv, slots):
    outs = []
    for layer in range(kv.shape[0]):
        q, k, v = qkv.split([8, 8, 8], dim=-1)
        k = k.view(-1, 2, 4)
        v = v.view(-1, 2, 4)
        key_cache, value_cache = kv[layer].unbind(0)
        fops.cache_write(k, v, key_cache, value_cache, slots)
        outs.append(key_cache.sum() + value_cache[0].sum())
        qkv = qkv * 0.5
    return torch.stack(outs)


def _kv_nb2_inputs(blocks=4, bs=4, heads=2, dim=4, tokens=5):
    kv = torch.zeros(blocks, 2, bs, heads, dim)  # [num_blocks, 2, ...]: unbind(1) views
    key = torch.randn(tokens, heads, dim)
    value = torch.randn(tokens, heads, dim)
    return kv, key, value, torch.tensor([5, 1, 14, -1, 9])


@_program(VLLM_FLASH + " (layout [num_blocks, 2, ...], unbind(1): strided caches)",
          ("cache_write",), _kv_nb2_inputs)
def vllm_kv_unbind1_layout(kv, key, value, slots):
    kc, vc = kv.unbind(1)
    fops.cache_write(key, value, kc, vc, slots)
    return kc[1] * 1


variant("vllm_kv_unbind1_layout_inference", vllm_kv_unbind1_layout, inference_mode=True)


@_program(VLLM_FLASH + " (kv cache written, old value of cache read before)", ("cache_write",),
          _kv_nb2_inputs)
def vllm_kv_old_cache_read(kv, key, value, slots):
    kc, vc = kv.unbind(1)
    snapshot = kc * 1
    fops.cache_write(key, value, kc, vc, slots)
    return snapshot, vc.sum()


VLLM_MLA = ("vLLM DeepseekV2 MLA: q_pe = q[..., nope:]; k_pe = latent.split(...)[1].unsqueeze(1); "
            "rotary_emb(positions, q_pe, k_pe); q[..., nope:] = q_pe (vllm deepseek_v2.py)")


def _mla_inputs(tokens=6, heads=2, nope=4, rope_dim=8, lora=6):
    return (torch.arange(tokens), torch.randn(tokens, heads, nope + rope_dim),
            torch.randn(tokens, lora + rope_dim), cos_sin_cache(rope_dim))


@_program(VLLM_MLA, ("rope",), _mla_inputs)
def vllm_mla_rope_slices(positions, q, latent, cache):
    q = q * 1
    q_pe = q[..., 4:]
    kv_a, k_pe = latent.split([6, 8], dim=-1)
    k_pe = k_pe.unsqueeze(1)
    fops.rope(positions, q_pe, k_pe, cache)
    q[..., 4:] = q_pe  # a self-copy
    return q, k_pe, kv_a * 1


@_program(VLLM_MLA + " (q a graph input, k_pe view of a graph input)", ("rope",), _mla_inputs)
def vllm_mla_rope_on_inputs(positions, q, latent, cache):
    q_pe = q[..., 4:]
    k_pe = latent[:, 6:].unsqueeze(1)
    fops.rope(positions, q_pe, k_pe, cache)
    return q.sum(), latent[:, :6] * 1


variant("vllm_mla_rope_on_inputs_dynamic", vllm_mla_rope_on_inputs, dynamic=True)


SGL_NORM = ("SGLang/vLLM decoder layer: fused_add_rmsnorm(hidden, residual, w) per layer, "
            "residual a slice of a static (cudagraph) buffer")


def _norm_inputs(tokens=5, d=8, maxt=8):
    return (torch.randn(tokens, d), torch.randn(maxt, d), torch.randn(2, d, d) * 0.3,
            torch.ones(2, d) + 0.1 * torch.randn(2, d))


@_program(SGL_NORM, ("fused_add_rms_norm",), _norm_inputs)
def sgl_fused_add_rms_two_layers(h, res_buf, ws, norm_w):
    residual = res_buf[: h.shape[0]]
    for layer in range(2):
        h = h @ ws[layer]
        fops.fused_add_rms_norm(h, residual, norm_w[layer], 1e-6)
    return h


variant("sgl_fused_add_rms_two_layers_dynamic", sgl_fused_add_rms_two_layers, dynamic=True)


@_program(SGL_NORM + " (hidden the first half of a gate/up matmul output)", ("fused_add_rms_norm",),
          _norm_inputs)
def sgl_fused_add_rms_on_split(h, res_buf, ws, norm_w):
    residual = res_buf[: h.shape[0]].clone()
    gu = torch.cat([h @ ws[0], h @ ws[1]], dim=-1)
    g, u = gu.chunk(2, dim=-1)
    fops.fused_add_rms_norm(g, residual, norm_w[0], 1e-6)
    return gu, residual, u * 1


FSDP_ADAM = ("https://github.com/pytorch/pytorch/pull/127347 (mutable list[Tensor] for FSDP): "
             "fused optimizer step on flat-param split views")


def _adam_inputs():
    return torch.randn(10), torch.zeros(10), torch.randn(10), torch.tensor(0.0)


@_program(FSDP_ADAM, ("adam_step",), _adam_inputs)
def fsdp_adam_flat_split(flat, state, grad, step):
    ps = list(flat.split([4, 6]))
    ms = list(state.split([4, 6]))
    gs = list(grad.split([4, 6]))
    fops.adam_step(ps, ms, gs, step, 0.1)
    return flat.sum() * 1


@_program(FSDP_ADAM + " (step counter read before and after, two steps)", ("adam_step",),
          _adam_inputs)
def fsdp_adam_two_steps(flat, state, grad, step):
    before = step * 1
    ps = [flat[:4], flat[4:]]
    ms = [state[:4], state[4:]]
    fops.adam_step(ps, ms, [grad[:4], grad[4:]], step, 0.1)
    mid = flat.clone()
    fops.adam_step(ps, ms, [grad[:4], grad[4:]], step, 0.1)
    return before, mid, step * 1


I144072 = "https://github.com/pytorch/pytorch/issues/144072 (optional mutable arg)"


@_program(I144072 + " (optional mutated arg a slice of an intermediate that is returned)",
          ("scale_opt",), lambda: (torch.randn(4, 4), torch.randn(4)))
def optional_slice_of_intermediate(x, y):
    b = x.exp()
    fops.scale_opt(b[1:3], y)
    fops.scale_opt(None, y)
    return b


PR115135 = "https://github.com/pytorch/pytorch/pull/115135 (ops that mutate and return Tensors)"


@_program(PR115135 + " (returned tensor then mutated by another op; mutated arg a view)",
          ("add_ret", "sin_"), lambda: (torch.randn(4, 3), torch.randn(3)))
def pr115135_return_then_mutate(x, y):
    r = fops.add_ret(x[1:], y)
    fops.sin_(r)
    return r, x


@_program(PR115135 + " (mutated arg a transposed view of an intermediate)", ("add_ret",),
          lambda: (torch.randn(3, 4), torch.randn(3)))
def pr115135_transposed_intermediate(x, y):
    b = x + 0
    r = fops.add_ret(b.t(), y)
    return r, b


STEP_COUNTER = "optimizer state_steps pattern: a 0-dim step tensor bumped in place, old value read"


@_program(STEP_COUNTER, ("bump",), lambda: (torch.tensor(3.0), torch.randn(4)))
def step_counter_0dim(step, x):
    a = x * step
    fops.bump(step)
    b = x * step
    fops.bump(step)
    return a, b


PR134409 = "https://github.com/pytorch/pytorch/pull/134409 (v2 regenerates views via as_strided)"


@_program(PR134409 + " (mutated arg an as_strided view of a graph input)", ("sin_",),
          lambda: (torch.randn(12),))
def pr134409_as_strided_input(x):
    fops.sin_(x.as_strided((3, 2), (4, 1), 1))
    return x * 1


@_program(PR134409 + " (mutated arg the diagonal of an intermediate)", ("sin_",),
          lambda: (torch.randn(4, 4),))
def pr134409_diagonal(x):
    b = x * 2
    d = b.diagonal()
    fops.sin_(d)
    return b, d


variant("pr134409_diagonal_dynamic", pr134409_diagonal, dynamic=True)


I136064 = "https://github.com/pytorch/pytorch/issues/136064 (mutation through a dtype view)"


@_program(I136064 + " (op mutates x.view(int32) of a float graph input)", ("xor_bits",),
          lambda: (torch.randn(6),))
def i136064_int_view_of_float_input(x):
    fops.xor_bits(x.view(torch.int32))
    return x * 1


@_program(I136064 + " (op mutates a row of an int32 view of a float intermediate)", ("xor_bits",),
          lambda: (torch.randn(3, 4),))
def i136064_int_view_row_of_intermediate(x):
    b = x + 1
    fops.xor_bits(b.view(torch.int32)[1])
    return b


ROPE_COMPLEX = "Llama apply_rotary_emb: view_as_real / view_as_complex views"


@_program(ROPE_COMPLEX + " (op mutates view_as_real of a complex graph input)", ("sin_",),
          lambda: (torch.randn(4, 3, dtype=torch.complex64),))
def complex_view_as_real_input(z):
    fops.sin_(torch.view_as_real(z))
    return z.abs()


TAF_EXTRA3 = ("test_auto_functionalize.py::test_auto_functionalize_extra3 (views returned), "
              "here of an intermediate, the view made before the call")


@_program(TAF_EXTRA3, ("sin_",), lambda: (torch.randn(3, 4),))
def view_of_intermediate_made_before(x):
    b = x * 1
    v = b[0]
    w = b[:, 1:3]
    fops.sin_(b)
    return v, w, b.sum()


MIXED = "mixed custom op and aten in-place mutations of views (issue #198131 family)"


@_program(MIXED, ("sin_",), lambda: (torch.randn(3, 4),))
def mixed_aten_and_custom(x):
    fops.sin_(x)
    x[0].mul_(2)
    fops.sin_(x[1])
    x[:, 2].add_(1)
    return x.clone()


UNBIND_LIST = "vLLM kv_caches list: list(kv.unbind(0)) passed as a mutable Tensor[]"


@_program(UNBIND_LIST, ("add_list",), lambda: (torch.randn(3, 4), torch.randn(4)))
def list_of_unbind_views(kv, y):
    first = kv[0] * 1
    fops.add_list(list(kv.unbind(0)), y)
    return first, kv.sum(0)


@_program(UNBIND_LIST + " (one tensor twice in the list)", ("add_list",),
          lambda: (torch.randn(4), torch.randn(4)))
def list_same_tensor_twice(x, y):
    b = x * 1
    fops.add_list([b, b], y)
    return b


@_program(UNBIND_LIST + " (empty list)", ("add_list",), lambda: (torch.randn(4), torch.randn(4)))
def list_empty(x, y):
    fops.add_list([], y)
    return x + y


GRAPH_INPUT_ALIAS = ("graph inputs that share storage (issue #153389 family): "
                     "aliased inputs, one mutated, the other read")


def _overlap():
    base = torch.randn(6)
    return base[0:4], base[2:6]


@_program(GRAPH_INPUT_ALIAS + " (overlapping views as two inputs)", ("sin_",), _overlap,
          backends=NOT_EXPORTED)
def aliased_inputs_overlap(a, b):
    fops.sin_(a)
    return b * 1


def _same_twice():
    x = torch.randn(4)
    return x, x


@_program(GRAPH_INPUT_ALIAS + " (the same tensor as two inputs)", ("sin_into",), _same_twice,
          backends=NOT_EXPORTED)
def aliased_inputs_same(a, b):
    fops.sin_into(b, a)
    return b + 1


def _t_pair():
    x = torch.randn(3, 3)
    return x, x.t()


@_program(GRAPH_INPUT_ALIAS + " (x and x.t() as two inputs)", ("sin_",), _t_pair,
          backends=NOT_EXPORTED)
def aliased_inputs_transposed(a, b):
    fops.sin_(a[0])
    return b * 1


EMPTY = "edge case: the mutated arg is an empty slice"


@_program(EMPTY, ("sin_",), lambda: (torch.randn(4),))
def empty_slice(x):
    fops.sin_(x[2:2])
    return x * 1


NARROW = "dynamic shapes: op on x.narrow(0, n//2, n - n//2) (symbolic start)"


@_program(NARROW, ("sin_",), lambda: (torch.randn(6, 3),), dynamic=True)
def narrow_symbolic(x):
    n = x.shape[0]
    fops.sin_(x.narrow(0, n // 2, n - n // 2))
    return x[0] * 1


TIP_PARTITIONER = ("test_inplacing_pass.py::test_partitioner_recomputes_factory, with the output "
                   "a slice of the factory result")


class _MySin(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        big = torch.empty(x.shape[0] + 2)
        out = big[1:-1]
        fops.sin_into(x, out)
        ctx.save_for_backward(x)
        return out

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        c = torch.empty_like(g)
        fops.sin_into(x + 1.5707963267948966, c)  # cos(x)
        return g * c


def _grad_in():
    return (torch.randn(5, requires_grad=True),)


@_program(TIP_PARTITIONER, ("sin_into",), _grad_in, backward=True)
def partitioner_slice_factory(x):
    return _MySin.apply(x)


BN_GROUPS = "training graph: grouped running stats updated through slices of one buffer"


def _bn():
    return (torch.randn(8, 6, requires_grad=True), torch.randn(6, 6, requires_grad=True),
            torch.zeros(2, 6), torch.ones(2, 6))


@_program(BN_GROUPS, ("stats",), _bn, backward=True)
def bn_grouped_stats(x, w, mean, var):
    h = x @ w
    hd = h.detach()
    fops.stats(hd[:4], mean[0], var[0], 0.1)
    fops.stats(hd[4:], mean[1], var[1], 0.1)
    return (h - mean.mean(0)) * var.mean(0).rsqrt()


# -- out buffers, aliased arguments, complex and permuted views ---------------------------------

@torch.library.custom_op("afconf_field::crot", mutates_args={"z"})
def crot(z: Tensor, freqs: Tensor) -> None:
    z.mul_(freqs)


OUT_ALIAS = ("test_auto_functionalize.py::test_auto_functionalize_extra3 family: outputs that are "
             "views of a mutated graph input")


@_program(OUT_ALIAS + " (view taken before the call, returned)", ("sin_",),
          lambda: (torch.randn(3, 4),))
def out_view_taken_before(x):
    v = x[1]
    fops.sin_(x)
    return v, x


variant("out_view_taken_before_inference", out_view_taken_before, inference_mode=True)


@_program(OUT_ALIAS + " (mutated row returned, and the input reshaped)", ("sin_",),
          lambda: (torch.randn(3, 4),))
def out_row_and_flat(x):
    fops.sin_(x[1])
    return x.view(-1), x[1]


INTERLEAVE = "overlapping windows written one after the other with a read in between"


@_program(INTERLEAVE, ("sin_",), lambda: (torch.randn(4, 3),))
def overlapping_windows_read_between(x):
    fops.sin_(x[0:2])
    y = x[1] * 1
    fops.sin_(x[1:3])
    return y, x[1:3].sum()


variant("overlapping_windows_read_between_dynamic", overlapping_windows_read_between,
        dynamic=True)


@_program(INTERLEAVE + " (on an intermediate, then a native in-place op on the same view)",
          ("sin_",), lambda: (torch.randn(4, 3),))
def native_then_custom_same_view(x):
    b = x.exp()
    v = b[0]
    v.add_(1)
    fops.sin_(v)
    v.mul_(2)
    return b


PR115135_CHAIN = PR115135 + " (the returned tensor's row mutated by a second op)"


@_program(PR115135_CHAIN, ("add_ret", "sin_"), lambda: (torch.randn(3, 4), torch.randn(4)))
def returned_row_mutated(x, y):
    r = fops.add_ret(x, y)
    fops.sin_(r[0])
    return r, x


SAME_IN_CALL = ("PR #198260 / issue #198031 family: the same tensor as src and dst of one call "
                "(eager sees the aliasing)")


@_program(SAME_IN_CALL + " (sin_into(b, b): whole-tensor read then write)", ("sin_into",),
          lambda: (torch.randn(5),))
def sin_into_same_tensor(x):
    b = x * 3
    fops.sin_into(b, b)
    return b


@_program(SAME_IN_CALL + " (reverse_into(x, x) on a graph input: elementwise aliasing)",
          ("reverse_into",), lambda: (torch.randn(6),))
def reverse_into_same_input(x):
    fops.reverse_into(x, x)
    return x * 1


@_program(SAME_IN_CALL + " (sin_into(x[0], x[1]): rows of one input)", ("sin_into",),
          lambda: (torch.randn(3, 4),))
def sin_into_sibling_rows(x):
    fops.sin_into(x[0], x[1])
    fops.sin_into(x[1], out=x[2])
    return x[0] + 1


PERMUTE = "attention layout: op on a permuted view (heads-first) of a graph input"


@_program(PERMUTE, ("sin_",), lambda: (torch.randn(4, 2, 3),))
def permuted_head_view(x):
    fops.sin_(x.permute(1, 0, 2)[1])
    return x.sum(-1)


@_program(PERMUTE + " (unsqueeze + slice of an intermediate)", ("sin_",),
          lambda: (torch.randn(4, 6),))
def unsqueeze_slice_intermediate(x):
    b = x.relu()
    fops.sin_(b.unsqueeze(0)[:, 1:, ::3])
    return b


COUNTER_SELECT = "0-dim counters: bump(x[i]) on rows of an int64 step vector (per-param steps)"


@_program(COUNTER_SELECT, ("bump",), lambda: (torch.arange(4), torch.randn(4)))
def int_counter_select(steps, x):
    fops.bump(steps[1])
    fops.bump(steps[3])
    return x * steps


LLAMA_COMPLEX = ("Llama apply_rotary_emb: xq_ = view_as_complex(xq.reshape(..., -1, 2)); "
                 "rotation applied in place by a custom op")


@_program(LLAMA_COMPLEX, ("crot",),
          lambda: (torch.randn(3, 8), torch.polar(torch.ones(3, 4), torch.randn(3, 4))))
def llama_view_as_complex(xq, freqs):
    b = xq * 1
    z = torch.view_as_complex(b.view(3, 4, 2))
    fops.crot(z, freqs)
    return b


@_program(LLAMA_COMPLEX + " (on the graph input itself)", ("crot",),
          lambda: (torch.randn(3, 8), torch.polar(torch.ones(3, 4), torch.randn(3, 4))))
def llama_view_as_complex_input(xq, freqs):
    fops.crot(torch.view_as_complex(xq.view(3, 4, 2)), freqs)
    return xq.sum()


ALIAS_NATIVE = GRAPH_INPUT_ALIAS + " (custom op on one, aten in-place on the other)"


@_program(ALIAS_NATIVE, ("sin_",), _overlap, backends=NOT_EXPORTED)
def aliased_inputs_custom_and_native(a, b):
    fops.sin_(a)
    b.mul_(2)
    return a + 0


variant("i153389_views_taken_before_dynamic", i153389_views_taken_before, dynamic=True)
variant("list_of_unbind_views_dynamic", list_of_unbind_views, dynamic=True)
variant("fsdp_adam_flat_split_dynamic", fsdp_adam_flat_split, dynamic=True)
variant("vllm_kv_unbind_layers_dynamic", vllm_kv_unbind_layers, dynamic=True)
variant("vllm_kv_unbind_layers_inference", vllm_kv_unbind_layers, inference_mode=True)
variant("vllm_mla_rope_slices_inference", vllm_mla_rope_slices, inference_mode=True)
variant("vllm_mla_rope_slices_dynamic", vllm_mla_rope_slices, dynamic=True)
variant("sgl_fused_add_rms_on_split_dynamic", sgl_fused_add_rms_on_split, dynamic=True)
variant("partitioner_slice_factory_ca", partitioner_slice_factory, compiled_autograd=True)
variant("bn_grouped_stats_ca", bn_grouped_stats, compiled_autograd=True)
variant("step_counter_0dim_dynamic", step_counter_0dim, dynamic=True)
variant("mixed_aten_and_custom_dynamic", mixed_aten_and_custom, dynamic=True)


# -- shapes that change between calls, unbacked sizes, globals ----------------------------------

_ROWS = (6, 9, 4)

@_program(NARROW + " (rows change per call)", ("sin_",),
          lambda i: (torch.randn(_ROWS[i % 3], 3),), dynamic=True, calls=3)
def narrow_symbolic_varying(x):
    n = x.shape[0]
    fops.sin_(x.narrow(0, n // 2, n - n // 2))
    return x[0] * 1


@_program(INTERLEAVE + " (rows change per call)", ("sin_",),
          lambda i: (torch.randn(_ROWS[i % 3], 3),), dynamic=True, calls=3)
def overlapping_windows_varying(x):
    n = x.shape[0]
    fops.sin_(x[0: n - 1])
    y = x[1] * 1
    fops.sin_(x[1:])
    return y, x[-1] * 1


def _kv_var(i):
    tokens = (5, 3, 7)[i % 3]
    kv = torch.zeros(4, 2, 4, 2, 4)
    key, value = torch.randn(tokens, 2, 4), torch.randn(tokens, 2, 4)
    slots = torch.randperm(16)[:tokens]
    slots[0] = -1
    return kv, key, value, slots


@_program(VLLM_FLASH + " (token count changes per call)", ("cache_write",), _kv_var, dynamic=True,
          calls=3)
def vllm_kv_varying_tokens(kv, key, value, slots):
    kc, vc = kv.unbind(1)
    fops.cache_write(key, value, kc, vc, slots)
    return kc[1] * 1


variant("vllm_kv_varying_tokens_inference", vllm_kv_varying_tokens, inference_mode=True)


def _norm_var(i):
    t = (5, 2, 7)[i % 3]
    return (torch.randn(t, 8), torch.randn(8, 8), torch.randn(2, 8, 8) * 0.3,
            torch.ones(2, 8))


@_program(SGL_NORM + " (token count changes per call)", ("fused_add_rms_norm",), _norm_var,
          dynamic=True, calls=3)
def sgl_fused_add_rms_varying(h, res_buf, ws, norm_w):
    residual = res_buf[: h.shape[0]]
    for layer in range(2):
        h = h @ ws[layer]
        fops.fused_add_rms_norm(h, residual, norm_w[layer], 1e-6)
    return h


UNBACKED = ("test_auto_functionalize.py::test_alias2 family (unbacked sizes): "
            "op on x[:n] with n = (x > 0).sum().item()")


@_program(UNBACKED, ("sin_",), lambda: (torch.randn(8),),
          dynamo_config=(("capture_scalar_outputs", True),
                     ("capture_dynamic_output_shape_ops", True)))
def unbacked_prefix(x):
    n = (x > 0).sum().item()
    torch._check(n >= 0)
    torch._check(n <= x.shape[0])
    fops.sin_(x[:n])
    return x * 1


OVERLAP_LIST = UNBIND_LIST + " (overlapping windows of one base in the list)"


@_program(OVERLAP_LIST, ("add_list",), lambda: (torch.randn(5), torch.randn(3)))
def list_overlapping_windows(x, y):
    b = x * 1
    fops.add_list([b[0:3], b[2:5]], y)
    return b


WS = torch.zeros(6)
GLOBAL_WS = "vLLM-style global workspace tensor (not an argument) written by a custom op"


@_program(GLOBAL_WS, ("sin_into",), lambda: (torch.randn(5),), backends=NOT_EXPORTED)
def global_workspace(x):
    WS.zero_()
    fops.sin_into(x, WS[1:])
    return WS * 2


class _BwdSlice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        big = torch.zeros(x.shape[0] + 2)
        fops.sin_into(x, big[1:-1])
        return g * big[1:-1]


@_program(TIP_PARTITIONER + " (the backward writes a slice of a zeros buffer)", ("sin_into",),
          _grad_in, backward=True)
def backward_writes_slice(x):
    return _BwdSlice.apply(x)


variant("backward_writes_slice_ca", backward_writes_slice, compiled_autograd=True)


# -- reads of the old value through opaque ops and odd views ------------------------------------

@torch.library.custom_op("afconf_field::read_sum", mutates_args=())
def read_sum(t: Tensor) -> Tensor:
    return t.sum().reshape(1) * 1


@read_sum.register_fake
def _(t):
    return t.new_empty(1)


OPAQUE_READ = ("test_inplacing_pass.py::test_views_not_inplaced_functionalize_v2 family: the old "
               "value read (by an opaque functional custom op) through a view made before")


@_program(OPAQUE_READ, ("sin_",), lambda: (torch.randn(3, 4),))
def opaque_read_before_and_after(x):
    b = x * 1
    v = b[0]
    s0 = fops.read_sum(v)
    fops.sin_(b)
    s1 = fops.read_sum(v)
    return s0, s1


@_program(OPAQUE_READ + " (only the opaque read after, of a view made before)", ("sin_",),
          lambda: (torch.randn(3, 4),))
def opaque_read_after_only(x):
    b = x * 1
    v = b[:, 1]
    fops.sin_(b[1:])
    return fops.read_sum(v), b


DTYPE_READ = I136064 + " (old value read through an int32 view made before the call)"


@_program(DTYPE_READ, ("sin_",), lambda: (torch.randn(3, 4),))
def dtype_view_read_before(x):
    b = x * 1
    bi = b.view(torch.int32)
    s = (bi & 0xFF).sum()
    fops.sin_(b[1])
    return s, bi


EXPAND_READ = "old value read through an expand view made before the call"


@_program(EXPAND_READ, ("sin_",), lambda: (torch.randn(4),))
def expand_view_read(x):
    b = x + 1
    e = b.unsqueeze(0).expand(3, 4)
    s = e.sum()
    fops.sin_(b[1:3])
    return s, e * 1


MIXED_LIST = UNBIND_LIST + " (a list holding a view of an input and a view of an intermediate)"


@_program(MIXED_LIST, ("add_list",), lambda: (torch.randn(3, 4), torch.randn(4)))
def list_input_and_intermediate(x, y):
    b = x.exp()
    fops.add_list([x[2], b[0], b[2]], y)
    return b, x[0] * 1


variant("list_input_and_intermediate_inference", list_input_and_intermediate,
        inference_mode=True)
variant("opaque_read_before_and_after_dynamic", opaque_read_before_and_after, dynamic=True)
