"""The conformance programs: our own transcriptions of the mutable-custom-op programs of

* PyTorch ``test/inductor/test_auto_functionalize.py`` (suite ``auto_functionalize``, ops in
  ``afconf_af``),
* PyTorch ``test/inductor/test_inplacing_pass.py`` (suite ``inplacing``, ``afconf_ip``),
* PyTorch ``test/inductor/test_compiled_autograd.py``: ``test_trace_auto_functionalized`` and
  ``_v2`` (suite ``compiled_autograd``, ``afconf_ca``; v1/v2 is the strategy axis here),
* vLLM ``tests/compile/test_functionalization.py`` (suite ``vllm``, ``afconf_vllm``: the vLLM
  fused kernels as small mutable custom ops with CPU implementations).

Upstream tests mostly pin graph snapshots; here every program is instead checked against eager
(outputs and final inputs, two calls) by ``harness``. Where an upstream op does nothing
observable (an empty body, ``a + b`` discarded) ours writes something, so that a wrong
functionalization shows up as a wrong value. ``source`` names the upstream test.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from .harness import Program

__all__ = ["PROGRAMS"]

PROGRAMS: dict[str, Program] = {}

_LIBS: dict[str, torch.library.Library] = {}


def _lib(ns: str) -> torch.library.Library:
    if ns not in _LIBS:
        _LIBS[ns] = torch.library.Library(ns, "FRAGMENT")
    return _LIBS[ns]


def _op(qualname: str, schema: str, impl, fake=None) -> str:
    """Define ``qualname`` with ``schema`` through the Library API (as the upstream tests do),
    a CPU kernel and a fake kernel (``lambda *a, **k: None`` for ``-> ()`` ops)."""
    ns, name = qualname.split("::")
    lib = _lib(ns)
    lib.define(f"{name}{schema}")
    lib.impl(name, impl, "CompositeExplicitAutograd")
    torch.library.register_fake(qualname, fake or (lambda *a, **k: None), lib=lib)
    return qualname


def program(suite: str, source: str, ops: tuple[str, ...], make_inputs, **kw):
    def deco(fn):
        def inputs(i: int, _make=make_inputs) -> tuple:
            torch.manual_seed(1000 + i)
            return _make(i) if _takes_index(_make) else _make()

        PROGRAMS[fn.__name__] = Program(fn.__name__, suite, source, fn, inputs, ops, **kw)
        return fn

    return deco


def _takes_index(f) -> bool:
    return f.__code__.co_argcount == 1


def variant(name: str, of, **kw) -> None:
    """Register a copy of program ``of`` under ``name`` with some fields changed."""
    import dataclasses

    base = PROGRAMS[of.__name__]
    PROGRAMS[name] = dataclasses.replace(base, name=name, **kw)


# ================================================================================================
# test_auto_functionalize.py
# ================================================================================================

AF = "auto_functionalize"
TAF = "test_auto_functionalize.py::"


def _foo_default(a, b, c=None, d=None, e=-1):
    if c is not None:
        c.add_(a * (b + 1))


FOO_DEFAULT = _op(
    "afconf_af::foo_default",
    "(Tensor a, int b, Tensor(d!)? c=None, Tensor? d=None, int e=-1) -> ()",
    _foo_default,
)


@program(AF, TAF + "test_auto_functionalize_can_with_default", (FOO_DEFAULT,),
         lambda: (torch.tensor([10, 10, 10], dtype=torch.int64), torch.zeros(3, dtype=torch.int64)))
def af_optional_default_omitted(a, c):
    torch.ops.afconf_af.foo_default(a, 0)  # the mutable optional argument left at its default
    torch.ops.afconf_af.foo_default(a, 1, c)
    return a * 2


def _copy_out(x, out):
    out.copy_(x)


NONE_RETURN = _op("afconf_af::none_return", "(Tensor x, Tensor(a!) out) -> None", _copy_out)


@program(AF, TAF + "test_auto_functionalize_can_with_none_return", (NONE_RETURN,),
         lambda: (torch.randn(3), torch.zeros(3)))
def af_none_return(x, out):
    torch.ops.afconf_af.none_return(x, out)


def _self_sin(self):
    self.sin_()


SELF_ARG = _op("afconf_af::self_arg", "(Tensor(a!) self) -> None", _self_sin)


@program(AF, TAF + "test_auto_functionalize_self_as_mutate_arg", (SELF_ARG,),
         lambda: (torch.randn(3),))
def af_self_as_mutable_arg(x):
    torch.ops.afconf_af.self_arg(x)


def _gather_into(all_gather_output, split_sizes, dim, out):
    for o in out:
        o.copy_(all_gather_output)


TENSORLIST = _op(
    "afconf_af::gather_into",
    "(Tensor all_gather_output, SymInt[] all_gather_input_split_sizes, int dim, Tensor(a!)[] out)"
    " -> ()",
    _gather_into,
)


@program(AF, TAF + "test_auto_functionalize_tensorlist", (TENSORLIST,),
         lambda: (torch.randn(4), [2, 3], 0, [torch.empty(4).fill_(7.0) for _ in range(2)]))
def af_tensorlist(all_gather_output, split_sizes, dim, out):
    torch.ops.afconf_af.gather_into(all_gather_output, split_sizes, dim, out)


def _xyzwn(x, y, z, w, n):
    x.add_(y[0] + w)
    z.add_(y[1] + n)


XYZWN = _op(
    "afconf_af::xyzwn",
    "(Tensor(a!) x, Tensor[] y, Tensor(b!) z, SymInt w, Tensor n) -> ()",
    _xyzwn,
)


def _xyzwn_inputs():
    return torch.randn(3), (torch.randn(3), torch.randn(3)), torch.randn(3), torch.randn(3)


@program(AF, TAF + "test_auto_functionalize_old / test_auto_functionalize_v2", (XYZWN,),
         _xyzwn_inputs)
def af_two_mutated_inputs(x, y, z, n):
    torch.ops.afconf_af.xyzwn(x, y, z, 2, n)


variant("af_two_mutated_inputs_dynamic", af_two_mutated_inputs, dynamic=True,
        source=TAF + "test_dynamic_v2")


def _xyzwn_ret(x, y, z, w, n):
    x.add_(y[0] + w)
    z.add_(y[1] + n)
    return y[0] + w, y[1] + n


XYZWN_RET = _op(
    "afconf_af::xyzwn_ret",
    "(Tensor(a!) x, Tensor[] y, Tensor(b!) z, SymInt w, Tensor n) -> (Tensor, Tensor)",
    _xyzwn_ret,
    fake=lambda x, y, z, w, n: (y[0] + w, y[1] + n),
)


@program(AF, TAF + "test_auto_functionalize_with_returns_old / _v2", (XYZWN_RET,), _xyzwn_inputs)
def af_with_returns(x, y, z, n):
    return torch.ops.afconf_af.xyzwn_ret(x, y, z, 2, n)


@torch._dynamo.disable
def _numpy_sin(x):
    x_np = x.detach().numpy()  # shares x's memory
    np.sin(x_np, out=x_np)


NUMPY_SIN = _op("afconf_af::numpy_sin", "(Tensor(a!) x) -> ()", _numpy_sin)


@program(AF, TAF + "test_auto_functionalize_on_view", (NUMPY_SIN,), lambda: (torch.randn(3),))
def af_on_view(x):
    x = x.clone()
    y = x[:]
    torch.ops.afconf_af.numpy_sin(y)
    return x


def _xyzwn_opt(x, y, z, w, n):
    if x is not None:
        x.add_(y[0] + w)
    if z is not None:
        z.add_(y[1] + n)


XYZWN_OPT = _op(
    "afconf_af::xyzwn_opt",
    "(Tensor(a!)? x, Tensor[] y, Tensor(b!)? z, SymInt w, Tensor n) -> ()",
    _xyzwn_opt,
)


@program(AF, TAF + "test_auto_functionalize_optional_old / _v2", (XYZWN_OPT,),
         lambda: (None, (torch.randn(3), torch.randn(3)), torch.randn(3), torch.randn(3)))
def af_optional_none(x, y, z, n):
    torch.ops.afconf_af.xyzwn_opt(x, y, z, 2, n)


def _mk_image(decoder):
    decoder.add_(1)
    return torch.full((2, 3, 4, 5), float(decoder.sum()))


def _mk_image_fake(decoder):
    ctx = torch.library.get_ctx()
    return torch.empty([ctx.new_dynamic_size() for _ in range(4)])


MK_IMAGE = _op("afconf_af::mk_image", "(Tensor(a!) decoder) -> Tensor", _mk_image, _mk_image_fake)


@program(AF, TAF + "test_unbacked_auto_functionalize_op", (MK_IMAGE,),
         lambda: (torch.zeros(100, dtype=torch.int64),),
         dynamo_config=(("capture_scalar_outputs", True),
                        ("capture_dynamic_output_shape_ops", True)))
def af_unbacked_output(x):
    return torch.ops.afconf_af.mk_image.default(x)


def _sin_both(x, y):
    x.sin_()
    y.sin_()


SIN_BOTH = _op("afconf_af::sin_both", "(Tensor(a!) x, Tensor(b!) y) -> ()", _sin_both)


def sin_both(x, y):
    torch.ops.afconf_af.sin_both(x, y)


@program(AF, TAF + "test_auto_functionalize_extra1", (SIN_BOTH,),
         lambda: (torch.randn(2), torch.randn(2)))
def af_extra1_two_inputs(x, y):
    sin_both(x, y)
    return x + y


variant("af_extra1_two_inputs_dynamic", af_extra1_two_inputs, dynamic=True,
        source=TAF + "test_dynamic2_v2")
variant("af_extra1_two_inputs_inference_mode", af_extra1_two_inputs, inference_mode=True,
        source=TAF + "test_inference_mode1_v2")


@program(AF, TAF + "test_auto_functionalize_extra2", (SIN_BOTH,), lambda: (torch.randn(2),))
def af_extra2_two_selects(x):
    sin_both(x[0], x[1])


variant("af_extra2_two_selects_dynamic", af_extra2_two_selects, dynamic=True,
        source=TAF + "test_dynamic3_v2")
variant("af_extra2_two_selects_inference_mode", af_extra2_two_selects, inference_mode=True,
        source=TAF + "test_inference_mode2_v2")


@program(AF, TAF + "test_auto_functionalize_extra3", (SIN_BOTH,), lambda: (torch.randn(2),))
def af_extra3_return_views(x):
    a, b = x[0], x[1]
    sin_both(a, b)
    return a, b, x


variant("af_extra3_return_views_inference_mode", af_extra3_return_views, inference_mode=True,
        source=TAF + "test_inference_mode3_v2")


def _two_rows(i):
    base = torch.randn(2, 2)
    return base[0], base[1]


@program(AF, TAF + "test_auto_functionalize_extra5", (SIN_BOTH,), _two_rows)
def af_extra5_inputs_share_base(x, y):
    return sin_both(x, y)


def _sin_list(x, y):
    x.sin_()
    y[0].sin_()


SIN_LIST = _op("afconf_af::sin_list", "(Tensor(a!) x, Tensor(b!)[] y) -> ()", _sin_list)


@program(AF, TAF + "test_auto_functionalize_extra4", (SIN_LIST,),
         lambda: (torch.randn(2), torch.randn(2), torch.randn(2)))
def af_extra4_list_of_views(x, y, z):
    torch.ops.afconf_af.sin_list(x[0], [z[0], y])


variant("af_extra4_list_of_views_inference_mode", af_extra4_list_of_views, inference_mode=True,
        source=TAF + "test_inference_mode4_v2")


def _bump_int(x):
    x.add_(1)


BUMP = _op("afconf_af::bump", "(Tensor(a!) x) -> ()", _bump_int)


def _view_of_2x2(i):
    return (torch.tensor([[1, 2], [3, 4]])[1],)


@program(AF, TAF + "test_graph_input_is_view", (BUMP,), _view_of_2x2)
def af_graph_input_is_view(x):
    torch.ops.afconf_af.bump(x[0])


@program(AF, TAF + "test_alias", (SIN_BOTH,), lambda: (torch.randn(2),))
def af_alias(x):
    a = torch.ops.aten.alias.default(x)
    b = torch.ops.aten.alias.default(x)
    sin_both(a, b)
    return a, b, x


variant("af_alias_dynamic", af_alias, dynamic=True, source=TAF + "test_alias(_dynamic=True)")


@program(AF, TAF + "test_split", (SIN_BOTH,), lambda: (torch.randn(10, 10),))
def af_split(x):
    a, b = x.split([4, 6], dim=1)
    sin_both(a, b)
    return a, b, x


variant("af_split_dynamic", af_split, dynamic=True, source=TAF + "test_split_dynamic")


@program(AF, TAF + "test_slice", (SIN_BOTH,), lambda: (torch.randn(10, 10),))
def af_slice(x):
    a = torch.ops.aten.slice.Tensor(x, 0, 0, 2)
    b = torch.ops.aten.slice.Tensor(x, 1, 3, 4)
    sin_both(a, b)
    return a, b, x


variant("af_slice_dynamic", af_slice, dynamic=True, source=TAF + "test_slice_dynamic")

_UNBACKED = (("capture_dynamic_output_shape_ops", True),)


@program(AF, TAF + "test_alias2", (SIN_BOTH,), lambda: (torch.randn(2),),
         dynamo_config=_UNBACKED)
def af_alias2_unbacked_arg(x):
    a = torch.ops.aten.alias.default(x)
    c = x.clone().nonzero().float()
    d = torch.ops.aten.slice(c)  # a mutable argument of shape [u0, 1]
    sin_both(a, d)
    return a, d


variant("af_alias2_unbacked_arg_dynamic", af_alias2_unbacked_arg, dynamic=True,
        source=TAF + "test_alias2_dynamic")


def _add_then_mul(x, y):
    x.add_(1)
    y.mul_(2)


ADD_MUL = _op("afconf_af::add_then_mul", "(Tensor(a!) x, Tensor(b!) y) -> ()", _add_then_mul)
_RECOMPILE_SHAPES = [(10, 10), (100, 100), (10, 2), (1000, 1000)]


def _recompile_inputs(i):
    torch.manual_seed(1000 + i)
    return (torch.rand(*_RECOMPILE_SHAPES[i]),)


def _recompile(name, fn, **kw):
    PROGRAMS[name] = Program(
        name, AF, TAF + "test_recompile", fn,
        _recompile_inputs,
        (ADD_MUL,), calls=len(_RECOMPILE_SHAPES), dynamic=True, **kw,
    )


def _rc_selects(x):
    torch.ops.afconf_af.add_then_mul(x[0], x[1])


def _rc_aliases(x):
    torch.ops.afconf_af.add_then_mul(torch.ops.aten.alias.default(x),
                                     torch.ops.aten.alias.default(x))


def _rc_last_first(x):
    torch.ops.afconf_af.add_then_mul(x[x.size()[0] - 1], x[0])


def _rc_slices(x):
    torch.ops.afconf_af.add_then_mul(torch.ops.aten.slice.Tensor(x, 1, 3, 4),
                                     torch.ops.aten.slice.Tensor(x, 0, 1, 4))


def _rc_unbacked(x):
    a = torch.ops.aten.alias.default(x)
    d = torch.ops.aten.slice(x.clone().nonzero().float())
    torch.ops.afconf_af.add_then_mul(a, d)
    return a, d


_recompile("af_recompile_selects", _rc_selects)
_recompile("af_recompile_aliases", _rc_aliases)
_recompile("af_recompile_last_and_first_row", _rc_last_first)
_recompile("af_recompile_slices", _rc_slices)
_recompile("af_recompile_unbacked", _rc_unbacked, dynamo_config=_UNBACKED)


@torch._dynamo.disable
def _not_same_object(x, y):
    if x is y:
        raise RuntimeError("not_same_object: x and y are one tensor object; eager passes two")
    x.add_(1)


NOT_EQ = _op("afconf_af::not_same_object", "(Tensor(a!) x, Tensor(b!) y) -> ()", _not_same_object)


@program(AF, TAF + "test_alias_id_input_to_custom_op (skipped upstream: #137434)", (NOT_EQ,),
         lambda: (torch.rand(2, 2),))
def af_alias_identity(x):
    a = torch.ops.aten.alias.default(x)
    torch.ops.afconf_af.not_same_object(a, x)


@program(AF, TAF + "test_alias_id_output", (ADD_MUL,), lambda: (torch.rand(2, 2),))
def af_alias_output(x):
    a = torch.ops.aten.alias.default(x)
    torch.ops.afconf_af.add_then_mul(a, x)
    return a


def _workspace_op(x, workspace):
    workspace.add_(x)
    return x.clone()


WORKSPACE = _op("afconf_af::workspace", "(Tensor x, Tensor(a!) workspace) -> Tensor",
                _workspace_op, fake=lambda x, workspace: x.clone())


@program(AF, TAF + "test_inference_mode_view", (WORKSPACE,),
         lambda: (torch.randn(2), torch.randn(2)), inference_mode=True)
def af_inference_mode_view(x, w):
    y = torch.ops.afconf_af.workspace(x, w)
    return y.view(-1).sin()


# The PR #198260 trap (the dst/src style of the newer upstream tests): the op writes dst from
# the end while reading src, so passing dst's own storage as src gives a different answer.
def _copy_shifted(dst, src):
    flat_dst, flat_src = dst.view(-1), src.reshape(-1)
    for i in reversed(range(flat_dst.numel())):
        flat_dst[i] = flat_src[(i + 1) % flat_src.numel()] + 1


COPY_SHIFTED = _op("afconf_af::copy_shifted", "(Tensor(a!) dst, Tensor src) -> ()", _copy_shifted)


@program(AF, "PR #198260: op(dst=x, src=x.clone())", (COPY_SHIFTED,), lambda: (torch.randn(2, 3),))
def af_dst_src_clone(x):
    torch.ops.afconf_af.copy_shifted(x, x.clone())
    return x


@program(AF, "PR #198260: dst and src rows of one intermediate", (COPY_SHIFTED,),
         lambda: (torch.randn(3, 4),))
def af_dst_src_rows(x):
    buf = x * 2
    torch.ops.afconf_af.copy_shifted(buf[0], buf[1])
    return buf


def _write_two(x, y, z):
    x.copy_(z * 2)
    y.copy_(z + 1)


WRITE_TWO = _op("afconf_af::write_two", "(Tensor! x, Tensor! y, Tensor z) -> ()", _write_two)


@program(AF, TAF + "test_scheduling_with_multiple_mutates", (WRITE_TWO,),
         lambda: (torch.rand(2, 2), torch.rand(2, 2)))
def af_scheduling_multiple_mutates(x, w):
    a = torch.empty_like(x)
    b = torch.empty_like(x)
    torch.ops.afconf_af.write_two(a, b, x)  # unnamed alias sets: `Tensor!`
    c = torch.mm(a, w)
    torch.ops.afconf_af.write_two(c, b, x)
    return c, b


# ================================================================================================
# test_inplacing_pass.py (the programs that call mutable custom ops)
# ================================================================================================

IP = "inplacing"
TIP = "test_inplacing_pass.py::"


def _sin_into(x, result):
    result.copy_(x.sin())


def _sin_cos(x, out_sin, out_cos):
    out_sin.copy_(x.sin())
    out_cos.copy_(x.cos())


def _sin_inplace(x):
    x.sin_()


SIN = _op("afconf_ip::sin", "(Tensor x, Tensor(a!) result) -> ()", _sin_into)
SIN_COS = _op("afconf_ip::sin_cos", "(Tensor x, Tensor(a!) out_sin, Tensor(b!) out_cos) -> ()",
              _sin_cos)
BOO = _op("afconf_ip::boo", "(Tensor(a!) x) -> ()", _sin_inplace)


def _mutate_list(y):
    y[0].add_(2)
    y[1].add_(3)


MUTATE_LIST = _op("afconf_ip::mutate_list", "(Tensor(a!)[] y) -> ()", _mutate_list)
sin = torch.ops.afconf_ip.sin
boo = torch.ops.afconf_ip.boo


@program(IP, TIP + "test_counters_functionalize_old / _v2", (SIN,), lambda: (torch.randn(3),))
def ip_old_value_read_after(x):
    out = x.cos()
    before = out + 0
    sin(x, out)
    return out, before * out


@program(IP, TIP + "test_view_inplaced_functionalize_v2", (BOO,), lambda: (torch.randn(3),))
def ip_view_inplaced(x):
    torch.ops.aten.select.int(x, 0, 0)
    boo(x)


@program(IP, TIP + "test_view_inplaced2_functionalize_v2", (BOO,), lambda: (torch.randn(3),))
def ip_view_used_after(x):
    another_view = x[2]
    boo(x)
    return another_view


@program(IP, TIP + "test_views_not_inplaced_functionalize_v2", (BOO,), lambda: (torch.randn(3),))
def ip_view_read_before(x):
    used = x[2] * 10
    boo(x)
    return used


@program(IP, TIP + "test_views_not_inplaced2_functionalize_v2", (BOO,), lambda: (torch.randn(3),))
def ip_input_not_copied_back(x):
    copy = x.clone()
    boo(copy)
    return x[2] + 0, copy


@program(IP, TIP + "test_views_not_inplaced3_functionalize_v2", (BOO,), lambda: (torch.randn(3),))
def ip_local_view_returned(x):
    a = torch.ones(10)
    another_view = a[2]
    boo(a[0])
    return another_view, a


@program(IP, TIP + "test_multi_output_intermediate", (SIN_COS,), lambda: (torch.randn(3),))
def ip_multi_output_intermediate(x):
    out1 = torch.empty_like(x)
    out2 = torch.empty_like(x)
    torch.ops.afconf_ip.sin_cos(x, out1, out2)
    return out1, out2, x**2


def _grad_input(i):
    torch.manual_seed(1000 + i)
    return (torch.randn(3, requires_grad=True),)


variant("ip_multi_output_intermediate_grad", ip_multi_output_intermediate, make_inputs=_grad_input,
        source=TIP + "test_multi_output_intermediate (requires_grad=True)")


@program(IP, TIP + "test_multiple_mutations", (SIN,), lambda: (torch.randn(3), torch.randn(3)))
def ip_multiple_mutations(x, out):
    sin(x, out)
    sin(out, out)
    sin(out, out)
    return out


@program(IP, TIP + "test_multiple_intermediate", (SIN,), lambda: (torch.randn(3),))
def ip_multiple_intermediate(x):
    out = torch.empty_like(x)
    sin(x, out)
    sin(out, out)
    sin(out, out)
    return out


@program(IP, TIP + "test_lists_functionalize_v2 / test_lists_old_functionalize", (MUTATE_LIST,),
         lambda: (torch.tensor([0.3, 0.4]),))
def ip_list_of_input_views(b):
    torch.ops.afconf_ip.mutate_list([b[0], b[1]])


def _my_sin(factory):
    class MySin(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            out = factory(x)
            sin(x, out)
            ctx.save_for_backward(out)
            return out

        @staticmethod
        def backward(ctx, grad):
            (saved,) = ctx.saved_tensors
            out = factory(grad)
            sin(saved, out)
            return out

    return MySin


_MYSIN = {"ones_like": _my_sin(torch.ones_like), "empty_like": _my_sin(torch.empty_like)}


@program(IP, TIP + "test_partitioner_recomputes_factory (ones_like, sin_op)", (SIN,), _grad_input,
         backward=True)
def ip_partitioner_recomputes_ones_like(x):
    return _MYSIN["ones_like"].apply(x)


@program(IP, TIP + "test_partitioner_recomputes_factory (empty_like, sin_op)", (SIN,), _grad_input,
         backward=True)
def ip_partitioner_recomputes_empty_like(x):
    return _MYSIN["empty_like"].apply(x)


# ================================================================================================
# test_compiled_autograd.py: test_trace_auto_functionalized(_v2)
# ================================================================================================


def _add5(x):
    x.add_(5)
    # Upstream returns ``x`` itself, which contradicts the schema (a non-aliasing ``Tensor``
    # output); a fresh tensor keeps the program within the schema it declares.
    return x.clone()


CA_FOO = _op("afconf_ca::foo", "(Tensor(a!) x) -> Tensor", _add5, fake=torch.empty_like)
_lib("afconf_ca").define("foo_mutated(Tensor(a!) x) -> Tensor")
_lib("afconf_ca").impl("foo_mutated", lambda x: torch.ops.afconf_ca.foo(x),
                       "CompositeImplicitAutograd")


def _must_recompute_hops(ctx, func, *args, **kwargs):
    from torch.utils.checkpoint import CheckpointPolicy

    hops = {"auto_functionalized", "auto_functionalized_v2", "autofunc_v1", "autofunc_v2"}
    if isinstance(func, torch._ops.HigherOrderOperator) and func.name() in hops:
        return CheckpointPolicy.MUST_RECOMPUTE
    return CheckpointPolicy.PREFER_RECOMPUTE


def _sac_context():
    return torch.utils.checkpoint.create_selective_checkpoint_contexts(_must_recompute_hops)


def _ca_g(x):
    x = torch.matmul(x, x)
    torch.ops.afconf_ca.foo_mutated(x)
    return torch.matmul(x, x)


@program("compiled_autograd",
         "test_compiled_autograd.py::test_trace_auto_functionalized / _v2", (CA_FOO,),
         lambda: (torch.randn(4, 4, requires_grad=True),), backward=True, compiled_autograd=True,
         atol=1e-4)
def ca_sac_mutable_op_in_backward(x):
    return torch.utils.checkpoint.checkpoint(_ca_g, x, use_reentrant=False, context_fn=_sac_context)


# ================================================================================================
# vLLM tests/compile/test_functionalization.py
# ================================================================================================

VL = "vllm"
TVL = "vllm tests/compile/test_functionalization.py::"
_EPS = 1e-5


def _rms(x, weight, eps):
    var = x.float().pow(2).mean(dim=-1, keepdim=True)
    return (x.float() * torch.rsqrt(var + eps)).to(x.dtype) * weight


def _rms_norm(result, input, weight, epsilon):
    result.copy_(_rms(input, weight, epsilon))


def _fused_add_rms_norm(input, residual, weight, epsilon):
    residual.add_(input)
    input.copy_(_rms(residual, weight, epsilon))


def _rotary(positions, query, key, head_size, cos_sin_cache, is_neox):
    cos_sin = cos_sin_cache[positions]
    cos, sin_ = cos_sin.chunk(2, dim=-1)
    for t in (query, key):
        if t is None:
            continue
        shaped = t.view(t.shape[0], -1, head_size)
        rot = shaped[..., : cos.shape[-1] * 2]
        if is_neox:
            x1, x2 = rot.chunk(2, dim=-1)
        else:
            x1, x2 = rot[..., ::2], rot[..., 1::2]
        c, s = cos.unsqueeze(1), sin_.unsqueeze(1)
        o1, o2 = x1 * c - x2 * s, x2 * c + x1 * s
        if is_neox:
            rot.copy_(torch.cat([o1, o2], dim=-1))
        else:
            rot.copy_(torch.stack([o1, o2], dim=-1).flatten(-2))


def _silu_and_mul(result, input):
    d = input.shape[-1] // 2
    result.copy_(torch.nn.functional.silu(input[..., :d]) * input[..., d:])


def _quant(x, scale):
    return torch.round(x / scale).clamp(-128, 127).to(torch.int8)


def _static_scaled_quant(result, input, scale):
    result.copy_(_quant(input, scale))


def _dynamic_per_token_quant(result, input, scale):
    scale.copy_(input.abs().amax(dim=-1, keepdim=True).clamp(min=1e-6) / 127)
    result.copy_(_quant(input, scale))


def _silu_and_mul_quant(result, input, scale):
    d = input.shape[-1] // 2
    result.copy_(_quant(torch.nn.functional.silu(input[..., :d]) * input[..., d:], scale))


def _fused_add_rms_norm_quant(result, input, residual, weight, scale, epsilon):
    residual.add_(input)
    result.copy_(_quant(_rms(residual, weight, epsilon), scale))


RMS_NORM = _op("afconf_vllm::rms_norm",
               "(Tensor(a!) result, Tensor input, Tensor weight, float epsilon) -> ()", _rms_norm)
FUSED_ADD_RMS_NORM = _op(
    "afconf_vllm::fused_add_rms_norm",
    "(Tensor(a!) input, Tensor(b!) residual, Tensor weight, float epsilon) -> ()",
    _fused_add_rms_norm,
)
ROTARY = _op(
    "afconf_vllm::rotary_embedding",
    "(Tensor positions, Tensor(a!) query, Tensor(b!)? key, int head_size, Tensor cos_sin_cache,"
    " bool is_neox) -> ()",
    _rotary,
)
SILU_AND_MUL = _op("afconf_vllm::silu_and_mul", "(Tensor(a!) result, Tensor input) -> ()",
                   _silu_and_mul)
STATIC_QUANT = _op("afconf_vllm::static_scaled_int8_quant",
                   "(Tensor(a!) result, Tensor input, Tensor scale) -> ()", _static_scaled_quant)
DYNAMIC_QUANT = _op("afconf_vllm::dynamic_per_token_scaled_int8_quant",
                    "(Tensor(a!) result, Tensor input, Tensor(b!) scale) -> ()",
                    _dynamic_per_token_quant)
SILU_AND_MUL_QUANT = _op("afconf_vllm::silu_and_mul_quant",
                         "(Tensor(a!) result, Tensor input, Tensor scale) -> ()",
                         _silu_and_mul_quant)
FUSED_ADD_RMS_NORM_QUANT = _op(
    "afconf_vllm::fused_add_rms_norm_static_int8_quant",
    "(Tensor(a!) result, Tensor input, Tensor(b!) residual, Tensor weight, Tensor scale,"
    " float epsilon) -> ()",
    _fused_add_rms_norm_quant,
)


@torch.library.custom_op("afconf_vllm::function_with_mutated_args_and_return", mutates_args=["x"])
def function_with_mutated_args_and_return(x: Tensor) -> Tensor:
    ret = x + 1
    x.add_(2)
    return ret


@function_with_mutated_args_and_return.register_fake
def _(x):
    return torch.empty_like(x)


vllm = torch.ops.afconf_vllm


def _silu_mul_layer(x):
    out = torch.empty(x.shape[:-1] + (x.shape[-1] // 2,), dtype=x.dtype)
    vllm.silu_and_mul(out, x)
    return out


def _int8_linear(x_q, scale, weight):
    """A stand-in for vLLM's fp8 scaled mm: dequantize, then matmul."""
    return (x_q.float() * scale) @ weight.t()


def _silu_inputs():
    return (torch.rand(8, 32),)


_W = lambda: torch.randn(16, 16) * 0.1  # noqa: E731


@program(VL, TVL + "TestSiluMul (no fp8)", (SILU_AND_MUL,), _silu_inputs)
def vllm_silu_mul(x):
    return _silu_mul_layer(x)


@program(VL, TVL + "TestSiluMul (fp8 layer, no fusion)", (SILU_AND_MUL, STATIC_QUANT),
         lambda: (torch.rand(8, 32), _W(), torch.tensor(0.01)))
def vllm_silu_mul_quant(x, w, scale):
    y = _silu_mul_layer(x)
    y_q = torch.empty(y.shape, dtype=torch.int8)
    vllm.static_scaled_int8_quant(y_q, y, scale)
    return _int8_linear(y_q, scale, w)


@program(VL, TVL + "TestSiluMul (fp8 layer, fused: silu_and_mul_quant)", (SILU_AND_MUL_QUANT,),
         lambda: (torch.rand(8, 32), _W(), torch.tensor(0.01)))
def vllm_silu_mul_quant_fused(x, w, scale):
    y_q = torch.empty(x.shape[0], x.shape[1] // 2, dtype=torch.int8)
    vllm.silu_and_mul_quant(y_q, x, scale)
    return _int8_linear(y_q, scale, w)


def _rms_inputs():
    return torch.randn(32, 16), torch.randn(32, 16), torch.randn(16, 16) * 0.2, torch.ones(16)


@program(VL, TVL + "TestFusedAddRMSNorm (no fp8)", (FUSED_ADD_RMS_NORM,), _rms_inputs)
def vllm_fused_add_rms_norm(hidden_states, residual, gate_proj, weight):
    view = hidden_states.reshape(-1, 16)
    mm = torch.mm(view, gate_proj.permute(1, 0))
    vllm.fused_add_rms_norm(mm, residual, weight, _EPS)  # mm and the residual input, in place
    return mm, residual


@program(VL, TVL + "TestFusedAddRMSNorm (fp8 layer, no fusion)",
         (FUSED_ADD_RMS_NORM, STATIC_QUANT),
         lambda: (*_rms_inputs(), _W(), torch.tensor(0.05)))
def vllm_fused_add_rms_norm_quant(hidden_states, residual, gate_proj, weight, w, scale):
    mm = torch.mm(hidden_states.reshape(-1, 16), gate_proj.permute(1, 0))
    vllm.fused_add_rms_norm(mm, residual, weight, _EPS)
    q = torch.empty(mm.shape, dtype=torch.int8)
    vllm.static_scaled_int8_quant(q, mm, scale)
    return _int8_linear(q, scale, w), residual


@program(VL, TVL + "TestFusedAddRMSNorm (fp8 layer, fused)", (FUSED_ADD_RMS_NORM_QUANT,),
         lambda: (*_rms_inputs(), _W(), torch.tensor(0.05)))
def vllm_fused_add_rms_norm_quant_fused(hidden_states, residual, gate_proj, weight, w, scale):
    mm = torch.mm(hidden_states.reshape(-1, 16), gate_proj.permute(1, 0))
    q = torch.empty(mm.shape, dtype=torch.int8)
    vllm.fused_add_rms_norm_static_int8_quant(q, mm, residual, weight, scale, _EPS)
    return _int8_linear(q, scale, w), residual


@program(VL, TVL + "RMS_OP (RMSNorm without residual) + dynamic per-token quant",
         (RMS_NORM, DYNAMIC_QUANT), lambda: (torch.randn(8, 16), torch.ones(16)))
def vllm_rms_norm_dynamic_quant(x, weight):
    out = torch.empty_like(x)
    vllm.rms_norm(out, x, weight, _EPS)
    q = torch.empty(out.shape, dtype=torch.int8)
    scale = torch.empty(out.shape[0], 1)
    vllm.dynamic_per_token_scaled_int8_quant(q, out, scale)
    return q, scale, out


def _cos_sin_cache(head_dim=16, max_position=64, base=10000.0):
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
    freqs = torch.outer(torch.arange(max_position, dtype=torch.float), inv_freq)
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1)


@program(VL, TVL + "TestRotaryEmbedding", (ROTARY,),
         lambda: (torch.arange(8), torch.randn(8, 16), torch.randn(8, 16), _cos_sin_cache()))
def vllm_rotary(positions, q, k, cos_sin_cache):
    vllm.rotary_embedding(positions, q, k, 16, cos_sin_cache, True)
    return q, k


@program(VL, TVL + "TestRotaryEmbeddingSliceScatter", (ROTARY,),
         lambda: (torch.arange(8), torch.randn(8, 32), torch.randn(96, 32) * 0.2,
                  _cos_sin_cache()))
def vllm_rotary_qkv_split(positions, hidden_states, qkv_weight, cos_sin_cache):
    qkv = torch.nn.functional.linear(hidden_states, qkv_weight)
    q, k, v = torch.split(qkv, [32, 32, 32], dim=-1)
    vllm.rotary_embedding(positions, q, k, 16, cos_sin_cache, True)
    return torch.cat([q, k, v], dim=-1)


@program(VL, TVL + "TestRotaryEmbedding (is_neox=False, key=None)", (ROTARY,),
         lambda: (torch.arange(8), torch.randn(8, 32), _cos_sin_cache()))
def vllm_rotary_gptj_no_key(positions, q, cos_sin_cache):
    vllm.rotary_embedding(positions, q, None, 16, cos_sin_cache, False)
    return q * 1


@program(VL, TVL + "TestFunctionWithMutatedArgsAndReturn",
         ("afconf_vllm::function_with_mutated_args_and_return",), lambda: (torch.randn(32),))
def vllm_mutated_args_and_return(x):
    ret = vllm.function_with_mutated_args_and_return(x)
    return x, ret


# ================================================================================================
# The two bug classes of PyTorch issues #198131 and #195451), in the same form
# ================================================================================================

ISSUES = "pytorch_issues"


@program(ISSUES, "PyTorch #198131 / PR #198132: dst[:] = src, then the op mutates src",
         (BUMP,), lambda: (torch.zeros(2, 3), torch.randn(2, 3)))
def issue_copy_then_mutate_src(dst, src):
    dst[:] = src
    torch.ops.afconf_af.bump(src)
    return dst * 1, src * 1


@program(ISSUES, "PyTorch #195451: the op mutates a select_scatter result copied back into an "
         "input; the output must not alias the input", (BUMP,),
         lambda: (torch.randn(3, 4), torch.randn(4)))
def issue_scatter_result_mutated_and_copied_back(x, v):
    y = x.clone()
    y[0] = v
    torch.ops.afconf_af.bump(y)
    x.copy_(y)
    return y


variant("vllm_rotary_qkv_split_dynamic", vllm_rotary_qkv_split, dynamic=True,
        source=TVL + "TestRotaryEmbeddingSliceScatter (dynamic=True, as vLLM compiles)")


from . import field  # noqa: E402,F401 - registers the field programs (suite "field")
