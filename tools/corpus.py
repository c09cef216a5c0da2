"""A corpus of small programs that call mutable custom ops, shared by the tests and the
comparison benchmark.

Each :class:`Program` is a function plus a factory of fresh inputs. The ops live in the
``autofunc_corpus`` namespace; :func:`register_all` routes them to one autofunc strategy (or
leaves them to PyTorch's built-in handling). Programs follow the seeds (the v2 note), PyTorch
issues about custom ops and re-inplacing, and vLLM-style layers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

__all__ = ["OPS", "PROGRAMS", "Program", "program", "register_all"]

_NS = "autofunc_corpus"


# -- ops ----------------------------------------------------------------------------------------


@torch.library.custom_op(f"{_NS}::add_", mutates_args={"x"})
def add_(x: torch.Tensor, y: torch.Tensor) -> None:
    """x += y"""
    x.add_(y)


@torch.library.custom_op(f"{_NS}::add_opt", mutates_args={"x"})
def add_opt(x: torch.Tensor | None, y: torch.Tensor) -> None:
    """x += y when x is given"""
    if x is not None:
        x.add_(y)


@torch.library.custom_op(f"{_NS}::add_list", mutates_args={"xs"})
def add_list(xs: list[torch.Tensor], y: torch.Tensor) -> None:
    """x += y * (i + 1) for the i-th x"""
    for i, x in enumerate(xs):
        x.add_(y * (i + 1))


@torch.library.custom_op(f"{_NS}::add_and_sum", mutates_args={"x"})
def add_and_sum(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x += y; returns the sum of the new x as a fresh tensor"""
    x.add_(y)
    return x.sum().reshape(1)


@add_and_sum.register_fake
def _(x, y):
    return x.new_empty(1)


@torch.library.custom_op(f"{_NS}::two", mutates_args={"a", "b"})
def two(a: torch.Tensor, b: torch.Tensor) -> None:
    """a += 1, then b *= 2 (order matters when a and b overlap)"""
    a.add_(1)
    b.mul_(2)


@torch.library.custom_op(f"{_NS}::two_read_first", mutates_args={"a", "b"})
def two_read_first(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
    """a += c.sum() (c read before any write), then b += 1"""
    total = c.sum().to(a.dtype)
    a.add_(total)
    b.add_(1)


@torch.library.custom_op(f"{_NS}::copy_into", mutates_args={"dst"})
def copy_into(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst = src + 1, written element by element from the end so that an aliased src reads
    clobbered values (the PyTorch PR #198260 trap)"""
    flat_dst, flat_src = dst.view(-1), src.reshape(-1)
    for i in reversed(range(flat_dst.numel())):
        flat_dst[i] = flat_src[(i + 1) % flat_src.numel()] + 1


@torch.library.custom_op(f"{_NS}::write_rows", mutates_args={"cache"})
def write_rows(cache: torch.Tensor, rows: torch.Tensor, index: torch.Tensor) -> None:
    """cache[index] = rows (a paged KV-cache write)"""
    cache.index_copy_(0, index, rows)


@torch.library.custom_op(f"{_NS}::write_rows_fp8", mutates_args={"cache"})
def write_rows_fp8(cache: torch.Tensor, rows: torch.Tensor, index: torch.Tensor) -> None:
    """cache[index] = rows as fp8 (``cache`` is an fp8 view of a ``uint8`` KV cache; the bytes
    are written through ``uint8``, as CPU kernels for fp8 are few)"""
    fp8 = rows.to(cache.dtype).view(torch.uint8)
    cache.view(torch.uint8).index_copy_(0, index, fp8)


@torch.library.custom_op(f"{_NS}::update_stats", mutates_args={"running"})
def update_stats(running: torch.Tensor, x: torch.Tensor) -> None:
    """running = 0.9 * running + 0.1 * x.mean(0) (BatchNorm-style running statistics)"""
    running.mul_(0.9).add_(x.mean(0) * 0.1)


@torch.library.custom_op(f"{_NS}::rope", mutates_args={"q_out", "k_out"})
def rope(
    q: torch.Tensor, k: torch.Tensor, q_out: torch.Tensor, k_out: torch.Tensor, cos: torch.Tensor
) -> None:
    """q_out = rotate(q), k_out = rotate(k): a rotary embedding whose outputs may be its inputs
    (the in-place form ``rope(q, k, q, k, cos)`` of SGLang/FlashInfer); each half of a row is
    read before either is written, so it is right in place"""
    for src, dst in ((q, q_out), (k, k_out)):
        half = src.shape[-1] // 2
        a, b = src[..., :half].clone(), src[..., half:].clone()
        dst[..., :half] = a * cos - b
        dst[..., half:] = b * cos + a


@torch.library.custom_op(
    f"{_NS}::apply_rope_pos_ids_cos_sin_cache",
    mutates_args={"q_rope", "k_rope", "k_buffer", "v_buffer"},
)
def apply_rope_pos_ids_cos_sin_cache(
    q: torch.Tensor,
    k: torch.Tensor,
    q_rope: torch.Tensor,
    k_rope: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    pos_ids: torch.Tensor,
    interleave: bool,
    v: torch.Tensor | None,
    k_buffer: torch.Tensor | None,
    v_buffer: torch.Tensor | None,
    kv_cache_loc: torch.Tensor | None,
) -> None:
    """SGLang's rope kernel (sgl_kernel / FlashInfer), as a CPU reference with its signature.

    ``q``/``k`` ``[tokens, heads, head_dim]`` are read; ``q_rope``/``k_rope`` (the same memory
    in the in-place form) receive them rotated by the ``cos_sin_cache`` row (``[cos | sin]``,
    float32) of each token's position. With ``k_buffer`` given, the rotated keys and ``v`` are
    also stored at rows ``kv_cache_loc`` of ``k_buffer``/``v_buffer`` (the fused KV-cache write
    of ``FusedSetKVBufferArg``). Each token's row is read before it is written, as the kernel
    does, so the in-place form is right."""
    half = q.shape[-1] // 2
    cos, sin = cos_sin_cache[pos_ids].unsqueeze(1).split([half, half], dim=-1)
    rotated = []
    for src in (q, k):
        x = src.float()
        a, b = (x[..., 0::2], x[..., 1::2]) if interleave else (x[..., :half], x[..., half:])
        ra, rb = a * cos - b * sin, b * cos + a * sin
        out = torch.stack([ra, rb], -1).flatten(-2) if interleave else torch.cat([ra, rb], -1)
        rotated.append(out.to(src.dtype))
    q_rope.copy_(rotated[0])
    k_rope.copy_(rotated[1])
    if k_buffer is not None and v_buffer is not None and v is not None:
        k_buffer[kv_cache_loc] = rotated[1].to(k_buffer.dtype)
        v_buffer[kv_cache_loc] = v.to(v_buffer.dtype)


@torch.library.custom_op(f"{_NS}::rms_norm_out", mutates_args={"out"})
def rms_norm_out(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> None:
    """out = rms_norm(x) * w: an out-buffer op (vLLM's ``rms_norm_static_fp8_quant`` form)"""
    out.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w)


@torch.library.custom_op(f"{_NS}::add_rms_norm_out", mutates_args={"out", "res"})
def add_rms_norm_out(
    out: torch.Tensor, x: torch.Tensor, res: torch.Tensor, w: torch.Tensor
) -> None:
    """res += x; out = rms_norm(res) * w (``fused_add_rms_norm_static_fp8_quant``'s form)"""
    res.add_(x)
    out.copy_(res * torch.rsqrt(res.pow(2).mean(-1, keepdim=True) + 1e-6) * w)


# vLLM's fused RMSNorm + fp8 quantization ops (csrc/layernorm_quant_kernels.cu; the ones vLLM's
# fix_functionalization.py lists), same schemas; computed in float, then ``.to(fp8)``.
_FP8_MAX = 448.0  # float8_e4m3fn's largest finite value


def _rms(x: torch.Tensor, w: torch.Tensor, epsilon: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + epsilon) * w


@torch.library.custom_op(f"{_NS}::rms_norm_static_fp8_quant", mutates_args={"result"})
def rms_norm_static_fp8_quant(
    result: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor,
    scale: torch.Tensor,
    epsilon: float,
) -> None:
    """result = fp8(rms_norm(input) * weight / scale)"""
    q = (_rms(input, weight, epsilon) / scale).clamp(-_FP8_MAX, _FP8_MAX)
    result.copy_(q.to(result.dtype))


@torch.library.custom_op(
    f"{_NS}::fused_add_rms_norm_static_fp8_quant", mutates_args={"result", "residual"}
)
def fused_add_rms_norm_static_fp8_quant(
    result: torch.Tensor,
    input: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    scale: torch.Tensor,
    epsilon: float,
) -> None:
    """residual += input; result = fp8(rms_norm(residual) * weight / scale)"""
    residual.add_(input)
    q = (_rms(residual, weight, epsilon) / scale).clamp(-_FP8_MAX, _FP8_MAX)
    result.copy_(q.to(result.dtype))


@torch.library.custom_op(
    f"{_NS}::rms_norm_dynamic_per_token_quant", mutates_args={"result", "scale", "residual"}
)
def rms_norm_dynamic_per_token_quant(
    result: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor,
    scale: torch.Tensor,
    epsilon: float,
    scale_ub: torch.Tensor | None,
    residual: torch.Tensor | None,
) -> None:
    """residual += input when given (the norm then reads residual); scale[t] = the token's
    absolute maximum / 448, at most scale_ub; result = fp8(rms_norm * weight / scale)"""
    if residual is not None:
        residual.add_(input)
        input = residual
    normed = _rms(input, weight, epsilon)
    s = normed.abs().amax(-1, keepdim=True) / _FP8_MAX
    if scale_ub is not None:
        s = torch.minimum(s, scale_ub)
    scale.copy_(s.clamp(min=1e-10))
    q = (normed / scale).clamp(-_FP8_MAX, _FP8_MAX)
    result.copy_(q.to(result.dtype))


# Ops whose read-only arguments may be views of the memory they write (other geometry: a
# transpose, a permute, a view, a dtype view, a list element, the base of the written view). In
# eager the op then reads the memory it writes; each says whether it reads before or after.


@torch.library.custom_op(f"{_NS}::write_then_read", mutates_args={"dst"})
def write_then_read(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst *= 0.5, then dst += 0.5 * src (src as dst's shape, row-major): src is read AFTER the
    write, so a src over dst's memory reads the halved values"""
    dst.mul_(0.5)
    dst.add_(0.5 * src.reshape(dst.shape))


@torch.library.custom_op(f"{_NS}::ret_after_write", mutates_args={"x"})
def ret_after_write(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x = x * 0.5 - 1; returns 2 * y + x.mean() (fresh): y is read after x is written"""
    x.mul_(0.5).sub_(1)
    return 2 * y + x.mean()


@ret_after_write.register_fake
def _(x, y):
    return torch.empty_like(y)


@torch.library.custom_op(f"{_NS}::read_then_write", mutates_args={"x"})
def read_then_write(x: torch.Tensor, y: torch.Tensor) -> None:
    """x = 0.5 * x + (2 * y + 1) (y as x's shape, row-major): y is read BEFORE x is written, so
    the result does not depend on whether y is x's memory"""
    update = 2 * y.reshape(x.shape) + 1
    x.mul_(0.5).add_(update)


@torch.library.custom_op(f"{_NS}::write_list", mutates_args={"xs"})
def write_list(xs: list[torch.Tensor], y: torch.Tensor) -> None:
    """each x *= 0.5, then x += y.sum() (y read after each write)"""
    for x in xs:
        x.mul_(0.5)
        x.add_(y.sum())


@torch.library.custom_op(f"{_NS}::write_then_read_bits", mutates_args={"x"})
def write_then_read_bits(x: torch.Tensor, bits: torch.Tensor) -> None:
    """x += 1 (float32), then x += (bits & 255) / 256 (int32, read after the write): with bits
    ``x.view(torch.int32)`` the op reads the low mantissa bits of the new x"""
    x.add_(1.0)
    x.add_((bits.reshape(x.shape) & 255).to(x.dtype) / 256)


@torch.library.custom_op(f"{_NS}::write_then_mean", mutates_args={"x"})
def write_then_mean(x: torch.Tensor, y: torch.Tensor) -> None:
    """x *= 0.3 (which changes the low mantissa bits too), then x += mean(y) (an integer y: the
    mean of its low 8 bits / 256), y read after the write"""
    x.mul_(0.3)
    values = y if y.is_floating_point() else (y & 255).to(x.dtype) / 256
    x.add_(values.mean().to(x.dtype))


@torch.library.custom_op(f"{_NS}::op3", mutates_args={"out"})
def op3(out: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> None:
    """out *= 0.5, then out += x + y.sum() (x and y read after the write)"""
    out.mul_(0.5)
    out.add_(x + y.sum())


@torch.library.custom_op(f"{_NS}::cache_put", mutates_args={"cache"})
def cache_put(cache: torch.Tensor, rows: torch.Tensor, idx: torch.Tensor) -> None:
    """cache[idx[i]] = rows[i], for i in order (a scatter kernel's order): a row of ``rows``
    over the cache is read after the earlier rows are written"""
    for i, j in enumerate(idx.tolist()):
        cache[j] = rows[i]


_lib = torch.library.Library(_NS, "FRAGMENT")
_lib.define("bump(Tensor(a!) x) -> ()")
_lib.define("bump.by(Tensor(a!) x, float by) -> ()")


def _bump(x, by=1.0):
    x.add_(by)


def _scale_into(x, *, out, alpha=2.0):
    out.copy_(x * alpha)


def _add_each(xs, y):
    for i, x in enumerate(xs or ()):
        if x is not None:
            x.add_(y * (i + 1))


_lib.impl("bump", _bump, "CompositeExplicitAutograd")
_lib.impl("bump.by", _bump, "CompositeExplicitAutograd")
# Ops that return the tensor they mutate, tagged as aten's in-place and out= ops are (Note [Ops
# that return their arguments] in autofunc/schema.py); defined where this torch has both tags.
_TAGGED = hasattr(torch.Tag, "inplace") and hasattr(torch.Tag, "out")
if _TAGGED:
    _lib.define("scale_(Tensor(a!) x, float alpha) -> Tensor(a!)", tags=torch.Tag.inplace)
    _lib.define(
        "scale.out(Tensor x, float alpha, *, Tensor(a!) out) -> Tensor(a!)", tags=torch.Tag.out
    )
    _lib.impl("scale_", lambda x, alpha: x.mul_(alpha), "CompositeExplicitAutograd")
    _lib.impl(
        "scale.out",
        lambda x, alpha, *, out: torch.mul(x, alpha, out=out),
        "CompositeExplicitAutograd",
    )
    scale_ = torch.ops.autofunc_corpus.scale_
    scale_out = torch.ops.autofunc_corpus.scale.out
# Lists of mutable tensors that may be None, or hold None (custom_op infers neither type).
_lib.define("add_opt_list(Tensor(a!)[]? xs, Tensor y) -> ()")
_lib.define("add_list_opt(Tensor(a!)?[] xs, Tensor y) -> ()")
for _name in ("add_opt_list", "add_list_opt"):
    _lib.impl(_name, _add_each, "CompositeExplicitAutograd")
add_opt_list = torch.ops.autofunc_corpus.add_opt_list
add_list_opt = torch.ops.autofunc_corpus.add_list_opt
# custom_op rejects kwarg-only tensors, so this one is defined through the Library API.
_lib.define("scale_into(Tensor x, *, Tensor(a!) out, float alpha=2.0) -> ()")
_lib.impl("scale_into", _scale_into, "CompositeExplicitAutograd")
scale_into = torch.ops.autofunc_corpus.scale_into
for _name in ("bump", "bump.by", "scale_into", "add_opt_list", "add_list_opt"):
    torch.library.register_fake(f"{_NS}::{_name}", lambda *a, **k: None, lib=_lib)
if _TAGGED:
    torch.library.register_fake(f"{_NS}::scale_", lambda x, alpha: x, lib=_lib)
    torch.library.register_fake(f"{_NS}::scale.out", lambda x, alpha, *, out: out, lib=_lib)

OPS = (
    add_,
    add_opt,
    add_list,
    add_and_sum,
    two,
    two_read_first,
    copy_into,
    write_rows,
    write_rows_fp8,
    update_stats,
    rope,
    apply_rope_pos_ids_cos_sin_cache,
    rms_norm_out,
    add_rms_norm_out,
    rms_norm_static_fp8_quant,
    fused_add_rms_norm_static_fp8_quant,
    rms_norm_dynamic_per_token_quant,
    write_then_read,
    ret_after_write,
    read_then_write,
    write_list,
    write_then_read_bits,
    write_then_mean,
    op3,
    cache_put,
)
OP_NAMES = tuple(op._qualname for op in OPS) + tuple(
    f"{_NS}::{name}"
    for name in ("bump", "scale_into", "add_opt_list", "add_list_opt")
    + (("scale_", "scale.out") if _TAGGED else ())
)


def register_all(strategy: str | None):
    """Register every corpus op with ``strategy`` (``None``: PyTorch's built-in handling).

    Returns the registrations (call ``remove()`` on each to undo).
    """
    if strategy is None:
        return []
    import autofunc

    return [autofunc.register(name, strategy=strategy) for name in OP_NAMES]


# -- programs -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Program:
    name: str
    fn: Callable
    make_inputs: Callable[[], tuple]
    note: str = ""
    # Upper bound on the bytes a call needs (outputs and temporaries; no clone of a buffer the
    # op writes), where stated: the comparison fails autofunc v2 above it.
    necessary_bytes: int | None = None

    def inputs(self) -> tuple:
        torch.manual_seed(0)
        return self.make_inputs()


PROGRAMS: dict[str, Program] = {}


def program(
    make_inputs: Callable[[], tuple], note: str = "", necessary_bytes: int | None = None
) -> Callable:
    def deco(fn: Callable) -> Callable:
        PROGRAMS[fn.__name__] = Program(fn.__name__, fn, make_inputs, note, necessary_bytes)
        return fn

    return deco


def _x33():
    return (torch.randn(3, 3),)


@program(_x33, "v2 note: foo(f) on a fresh buffer")
def note_base(x):
    f = torch.full((3, 3), 2.0)
    add_(f, x)
    return f


@program(_x33, "v2 note: foo(f[0])")
def note_select(x):
    f = torch.full((3, 3), 2.0)
    add_(f[0], x[0])
    return f


@program(_x33, "v2 note: y = zeros(3, 3); foo(y[:, 1]); return y")
def note_column(x):
    y = torch.zeros(3, 3)
    add_(y[:, 1], x[0])
    return y


@program(lambda: (torch.randn(4, 5), torch.randn(5)), "mutating a graph input in place")
def input_inplace(x, y):
    add_(x, y)
    return x.sum()


@program(lambda: (torch.randn(4, 5), torch.randn(5)), "mutating a row of a graph input")
def input_row(x, y):
    add_(x[1], y)
    return x * 2


@program(lambda: (torch.randn(4, 5), torch.randn(5)), "the old value is read after the call")
def read_after(x, y):
    buf = x * 1
    old = buf.sum()
    add_(buf, y)
    return buf + old, buf.sum() - x.sum()


@program(
    lambda: (torch.randn(4, 5), torch.randn(5)),
    "a row of the old value, read before the call, added to the new value after it",
)
def old_row_with_the_new_value(x, y):
    buf = x * 1
    row = buf[0] * 2  # computed late by Inductor, unless before the call
    add_(buf, y)
    return buf + row  # reads the new value too: it cannot move before the call


@program(lambda: (torch.randn(4, 5), torch.randn(5)), "the old value is returned")
def old_value_returned(x, y):
    buf = x + 1
    alias = buf[1]
    add_(buf[0], y)
    return buf, alias * 1


@program(lambda: (torch.randn(3, 4),), "optional mutable argument, given and None")
def optional_arg(x):
    buf = x.clone()
    add_opt(buf, x)
    add_opt(None, x)
    return buf


@program(lambda: (torch.randn(3, 4),), "a list of mutable tensors, views of one base")
def list_arg(x):
    buf = torch.zeros(3, 4)
    add_list([buf[0], buf[2], x[1]], x[0])
    return buf


@program(
    lambda: (torch.randn(3, 4),),
    "an optional list of mutable tensors (Tensor(a!)[]?): given, and None",
)
def optional_list_arg(x):
    buf = torch.zeros(3, 4)
    add_opt_list([buf[1], x[0]], x[2])
    add_opt_list(None, x[2])
    return buf


@program(
    lambda: (torch.randn(3, 4),),
    "a list of optional mutable tensors (Tensor(a!)?[]) holding None (the built-in fails)",
)
def list_of_optional_arg(x):
    buf = x * 2
    add_list_opt([buf[0, :2], None, x[1:, 2:]], x[0, 2:])
    add_list_opt([None, buf[2, 1:3]], buf[0, :2])
    return buf


@program(
    lambda: (torch.randn(4, 6),),
    "writes through unfold views with gaps between windows (functionalization's inverse of "
    "unfold zeroes the gaps, pytorch#198102; v1 uses v2 for these calls)",
)
def unfold_gaps(x):
    buf = x * 1
    add_(buf.unfold(1, 1, 5), x[0, :1])  # columns 0 and 5 of an intermediate
    add_(x.unfold(1, 2, 4), x[1, 2:4])  # columns 0-1 and 4-5 of the input
    return buf


if _TAGGED:

    @program(
        lambda: (torch.randn(3, 4),),
        "an inplace-tagged op returns the row it scales; the result is read and the input "
        "returned (the built-in gives wrong values under Inductor)",
    )
    def returns_its_argument(x):
        row = scale_(x[1], 3.0)
        return row + 1, x

    @program(
        lambda: (torch.randn(3, 4), torch.randn(2, 4)),
        "an out-tagged op writes a fresh buffer and a row of an input, returning each (the "
        "built-in gives wrong values under Inductor)",
    )
    def returns_its_out(x, o):
        buf = torch.empty(4)
        r = scale_out(x[0], 2.0, out=buf)
        s = scale_out(x[2], -1.0, out=o[1])
        return r * 2, buf, s.sum()


@program(lambda: (torch.randn(3, 4),), "kwarg-only mutable argument")
def kwarg_only(x):
    out = torch.empty(3, 4)
    scale_into(x, out=out, alpha=3.0)
    return out + 1


@program(lambda: (torch.randn(3, 4), torch.randn(4)), "an op that returns a tensor and mutates")
def returns_and_mutates(x, y):
    buf = x.clone()
    s = add_and_sum(buf[1], y)
    return buf, s * 2


@program(lambda: (torch.randn(3, 4),), "two overloads of one op")
def overloads(x):
    buf = x.clone()
    torch.ops.autofunc_corpus.bump(buf[0])
    torch.ops.autofunc_corpus.bump.by(buf[:, 1], 5.0)
    return buf


@program(lambda: (torch.randn(4, 6),), "two mutable args: disjoint views of one base")
def two_disjoint(x):
    buf = x.clone()
    two(buf[0], buf[2:])
    return buf


@program(lambda: (torch.randn(4, 6),), "two mutable args: overlapping views of one base")
def two_overlapping(x):
    buf = x.clone()
    two(buf[0:3], buf[1:])
    return buf


@program(lambda: (torch.randn(4, 6),), "the same tensor passed twice as mutable")
def same_twice(x):
    buf = x.clone()
    two(buf, buf)
    return buf


@program(lambda: (torch.randn(4, 6),), "PR #198260: op(dst=x, src=clone of x)")
def dst_src_clone(x):
    y = x.clone()
    copy_into(x, y)
    return x


@program(lambda: (torch.randn(4, 6),), "writing one slice of a buffer while reading another")
def disjoint_read_by_call(x):
    buf = x.clone()
    copy_into(buf[0], buf[2])
    return buf


@program(lambda: (torch.randn(6, 8),), "write into qkv.split views, read v afterwards")
def qkv_split(x):
    qkv = x @ torch.ones(8, 12)
    q, k, v = qkv.split([4, 4, 4], dim=-1)
    two(q, k)
    return q + k + v, v.sum()


def _kv_inputs(layers: int = 3):
    kv = torch.zeros(layers, 2, 8, 4)
    rows = torch.randn(layers, 2, 4)
    index = torch.tensor([1, 5])
    return kv, rows, index


@program(_kv_inputs, "vLLM-style: write kv[l, 0] and kv[l, 1] of a cache input, layer by layer")
def kv_layers(kv, rows, index):
    h = rows[0].sum()
    for layer in range(kv.shape[0]):
        write_rows(kv[layer, 0], rows[layer] + h, index)
        write_rows(kv[layer, 1], rows[layer] * 2, index)
        h = h + kv[layer, 0].sum()
    return h


@program(_kv_inputs, "vLLM-style: read the previous layer's cache after the next layer writes")
def kv_reordered_read(kv, rows, index):
    outs = []
    for layer in range(kv.shape[0]):
        write_rows(kv[layer, 0], rows[layer], index)
        if layer > 0:
            outs.append(kv[layer - 1, 0].sum())
    return torch.stack(outs)


# -- other mutations of the same memory around the calls ----------------------------------------


def _kv_big_inputs(layers: int = 2):
    kv = torch.zeros(layers, 2, 256, 64)  # 256 KiB: a clone of it would show in the bytes
    rows = torch.randn(layers, 2, 64)
    index = torch.tensor([1, 5])
    return kv, rows, index


@program(
    _kv_big_inputs,
    "a native in-place op on the cache after the calls: kv[1, 0].mul_(2)",
    necessary_bytes=512,  # Inductor's temporaries (rows[1] * 2); the cache is 256 KiB
)
def kv_then_native_inplace(kv, rows, index):
    write_rows(kv[0, 0], rows[0], index)
    write_rows(kv[1, 1], rows[1] * 2, index)
    kv[1, 0].mul_(2)


@program(
    lambda: (torch.randn(256, 256), torch.randn(256)),
    "a native in-place op on the whole input after the call: add_(x, y); x.mul_(2)",
    necessary_bytes=0,
)
def native_inplace_after(x, y):
    add_(x, y)
    x.mul_(2)


@program(
    _kv_big_inputs,
    "a view of the mutated cache is returned: for l: write kv[l, 0]; return kv[0]",
    necessary_bytes=0,  # the output is kv[0] itself, as in eager
)
def kv_returned_view(kv, rows, index):
    for layer in range(kv.shape[0]):
        write_rows(kv[layer, 0], rows[layer], index)
    return kv[0]


@program(
    _kv_big_inputs,
    "a copy of a view of the mutated cache is returned: return kv[0].clone()",
    necessary_bytes=2 * 256 * 64 * 4,  # the copy the program asks for
)
def kv_returned_copy(kv, rows, index):
    for layer in range(kv.shape[0]):
        write_rows(kv[layer, 0], rows[layer], index)
    return kv[0].clone()


@program(
    lambda: (torch.zeros(256, 256), torch.randn(256, 256), torch.randn(256)),
    "an input copied into another, then mutated: dst[:] = src; add_(src[1], y)",
    necessary_bytes=0,  # the copy into dst moves before the call (the built-in v2 copies src)
)
def copy_then_call(dst, src, y):
    dst[:] = src
    add_(src[1], y)


@program(
    lambda: (torch.randn(256, 256), torch.randn(256)),
    "a copy saved before the call is returned: saved = x.clone(); add_(x, y); return saved",
    necessary_bytes=256 * 256 * 4,  # the copy the program asks for
)
def saved_before_call(x, y):
    saved = x.clone()
    add_(x, y)
    return saved


@program(
    lambda: (torch.randn(256, 256), torch.randn(256)),
    "columns read before and after two calls on a computed buffer and on the input",
    necessary_bytes=256 * 256 * 4 + 3 * 256 * 4,  # y = x + 1 and the three columns
)
def reads_around_calls(x, v):
    y = x + 1
    before = y[:, 0] * 1.0
    add_(y[1], v)
    after = y[:, 0] + 0
    add_(x[2], v)
    return before, after, x[:, 1] * 3


@program(
    lambda: (torch.randn(64, 64, requires_grad=True), torch.zeros(64, 64)),
    "training: token counts updated by a custom op and saved for backward (h * counts)",
)
def saved_counts(x, counts):
    h = x.sin()
    add_(counts, h.detach().abs())
    return (h * counts).sum()


def _shared_layer_inputs():
    big = torch.zeros(2, 2, 256, 64)  # one allocation, handed over as two per-layer caches
    return big[0], big[1], torch.randn(2, 64), torch.tensor([1, 5])


@program(
    _shared_layer_inputs,
    "per-layer caches as separate inputs that are views of one storage (vLLM's KV buffers)",
    necessary_bytes=520,  # rows * 2 and the sums, as eager; each layer's cache is 128 KiB
)
def shared_storage_layers(k0, k1, rows, index):
    write_rows(k0[0], rows, index)
    write_rows(k1[0], rows * 2, index)
    write_rows(k1[1], rows, index)
    return rows.sum() + k0[1].sum()


@program(
    lambda: (torch.randn(64, 128), torch.randn(128, 3 * 256) * 0.1, torch.randn(128)),
    "in-place rope on qkv.split views: rope(q, k, q_out=q, k_out=k), the SGLang form",
)
def rope_in_place(x, w, cos):
    qkv = x @ w
    q, k, v = qkv.split([256, 256, 256], dim=-1)
    rope(q, k, q, k, cos)
    return (q * k).sum(-1) + v.sum(-1)


# -- SGLang's rope call sites -----------------------------------------------------------------


@dataclasses.dataclass
class FusedSetKVBufferArg:
    """SGLang's argument for the rope kernel's fused KV-cache write: the values, this layer's
    K and V buffers, and the cache rows of the tokens."""

    value: torch.Tensor
    k_buffer: torch.Tensor
    v_buffer: torch.Tensor
    cache_loc: torch.Tensor


def apply_rope_with_cos_sin_cache_inplace(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool = True,
    fused_set_kv_buffer_arg: FusedSetKVBufferArg | None = None,
) -> None:
    """SGLang's public wrapper (``sgl_kernel``): rotates ``query``/``key`` (``[tokens, heads *
    head_size]``) in place. Each tensor is handed to the op as a ``[tokens, heads, head_size]``
    view made twice, once as the read argument and once as the written one: two objects over
    one memory."""

    def as_3d(x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], -1, head_size)

    a = fused_set_kv_buffer_arg
    apply_rope_pos_ids_cos_sin_cache(
        as_3d(query),
        as_3d(key),
        as_3d(query),
        as_3d(key),
        cos_sin_cache,
        positions.long(),
        not is_neox,
        None if a is None else as_3d(a.value),
        None if a is None else as_3d(a.k_buffer),
        None if a is None else as_3d(a.v_buffer),
        None if a is None else a.cache_loc.long(),
    )


_HEAD = 16  # head_size; 4 query heads and 2 KV heads: a qkv row is 64 + 32 + 32 wide


def _rope_inputs():
    positions = torch.tensor([0, 3, 5, 7])  # 4 tokens
    inv_freq = 1.0 / (10000 ** (torch.arange(0, _HEAD, 2).float() / _HEAD))
    freqs = torch.arange(16).float()[:, None] * inv_freq  # 16 positions
    cos_sin_cache = torch.cat([freqs.cos(), freqs.sin()], dim=-1)
    return torch.randn(4, 32), torch.randn(32, 128) * 0.2, cos_sin_cache, positions


@program(
    _rope_inputs,
    "SGLang's in-place rope: apply_rope_with_cos_sin_cache_inplace on qkv.split pieces, the op "
    "given query.view(-1, H, D) twice (read and written: two objects over one memory)",
    # qkv, returned (4 tokens x 128 x 4 B), and the reference op's own temporaries (6400 B a
    # call), as eager; a copy of qkv for the op to write would be 2 KiB more
    necessary_bytes=2048 + 6400,
)
def sglang_rope_inplace(x, w, cos_sin_cache, positions):
    qkv = x @ w
    q, k, _ = qkv.split([64, 32, 32], dim=-1)
    apply_rope_with_cos_sin_cache_inplace(positions, q, k, _HEAD, cos_sin_cache)
    return qkv


def _rope_kv_inputs(layers: int = 2):
    x, _, cos_sin_cache, positions = _rope_inputs()
    w = torch.randn(layers, 32, 128) * 0.2
    pool = torch.zeros(layers, 2, 64, 32)  # [layer, K/V, slot, kv heads x head_size]: 32 KiB
    cache_loc = torch.tensor([9, 10, 11, 40])
    return x, w, cos_sin_cache, positions, pool, cache_loc


@program(
    _rope_kv_inputs,
    "SGLang's in-place rope with FusedSetKVBufferArg, per layer: the op also writes "
    "pool[l, 0] / pool[l, 1] of one KV pool input at the tokens' cache rows",
    # per layer: qkv (2 KiB), the reference op's temporaries (6400 B) and the next layer's
    # input (512 B); eager takes one more temporary for h. The pool is 32 KiB.
    necessary_bytes=2 * (2048 + 6400 + 512),
)
def sglang_rope_set_kv(x, w, cos_sin_cache, positions, pool, cache_loc):
    h = x
    for layer in range(pool.shape[0]):
        qkv = h @ w[layer]
        q, k, v = qkv.split([64, 32, 32], dim=-1)
        kv = FusedSetKVBufferArg(v, pool[layer, 0], pool[layer, 1], cache_loc)
        apply_rope_with_cos_sin_cache_inplace(positions, q, k, _HEAD, cos_sin_cache, True, kv)
        h = h + q[:, :32] * k
    return h


# -- dtype views (Note [Dtype views]): an fp8 KV cache kept as uint8 storage, as in vLLM ---------

_FP8 = getattr(torch, "float8_e4m3fn", None)


def _kv_u8_inputs(layers: int = 2, slots: int = 4096, width: int = 16):
    """A ``uint8`` cache of 2 layers x (K, V) x 4096 slots x 16 bytes (256 KiB), rows to write."""
    kv = torch.zeros(layers, 2, slots, width, dtype=torch.uint8)
    rows = torch.randn(layers, 2, width)
    index = torch.tensor([1, 5])
    return kv, rows, index


@program(
    _kv_u8_inputs,
    "fp8 KV cache: write kv[l, 0].view(fp8), kv[l, 1].view(fp8) of a uint8 cache, per layer",
    necessary_bytes=4096,  # the fp8 rows and a few scalars; one layer's K is 64 KiB
)
def kv_fp8_layers(kv, rows, index):
    h = rows[0].sum()
    for layer in range(kv.shape[0]):
        write_rows_fp8(kv[layer, 0].view(_FP8), rows[layer] + h, index)
        write_rows_fp8(kv[layer, 1].view(_FP8), rows[layer] * 2, index)
        h = h + kv[layer, 0].sum()
    return h


@program(
    _kv_u8_inputs,
    "fp8 KV cache: write the whole layer kv[l].view(fp8), read the previous layer afterwards",
    necessary_bytes=4096,
)
def kv_fp8_whole_layer(kv, rows, index):
    outs = []
    for layer in range(kv.shape[0]):
        write_rows_fp8(kv[layer].view(_FP8)[0], rows[layer], index)
        if layer > 0:
            outs.append(kv[layer - 1].sum())
    return torch.stack(outs)


@program(
    lambda: (torch.zeros(2, 256, 1024), torch.randn(4, 1024)),
    "a same-dtype view: write cache[1].view(torch.float32) of a float32 cache",
    necessary_bytes=4096,  # the sum; the cache's layer is 1 MiB
)
def cache_same_dtype_view(cache, rows):
    index = torch.tensor([0, 7, 9, 200], device=rows.device)  # compiled: no device context
    write_rows(cache[1].view(torch.float32), rows, index)
    return rows.sum()


# -- clones PyTorch's built-in re-inplacing was reported to remove ---------------------------


def _bn_inputs():
    return (
        torch.randn(64, 256, requires_grad=True),
        torch.randn(256, requires_grad=True),
        torch.zeros(256),
    )


@program(_bn_inputs, "training graph: a BatchNorm-style running mean updated by a custom op")
def bn_running_stats(x, w, running):
    y = x * w
    update_stats(running, y.detach())
    return (y * 2).sum()


def _nested_region(fn: Callable) -> Callable:
    region = getattr(torch.compiler, "nested_compile_region", None)
    return fn if region is None else region(fn)


@_nested_region
def _add_row_region(buf, y):
    add_(buf[1], y)
    return buf[0] * 2


@program(
    lambda: (torch.randn(64, 256), torch.randn(256)),
    "nested_compile_region around a function that mutates a row of an intermediate",
)
def nested_region_row(x, y):
    buf = x + 1
    out = _add_row_region(buf, y)
    return out, buf[1] + 1


@program(
    lambda: (torch.randn(16, 256), torch.randn(256), torch.randn(256, 256) * 0.05),
    "out-buffer ops in a chain, one fresh output per layer (vLLM's rms_norm_static_fp8_quant, "
    "then fused_add_rms_norm_static_fp8_quant per layer); Inductor reuses each layer's "
    "output and matmul buffers for the next under every configuration",
)
def out_buffer_chain(x, w, wl):
    res = x.clone()
    r = torch.empty_like(x)
    rms_norm_out(r, x, w)
    for _ in range(4):
        h = r @ wl
        r = torch.empty_like(x)
        add_rms_norm_out(r, h, res, w)
    return r


def _fp8_chain_inputs(tokens: int = 6, hidden: int = 32):
    bf16 = torch.bfloat16  # vLLM's activations and weights; the scales are float32
    return (
        torch.randn(tokens, hidden, dtype=bf16),  # hidden states
        torch.randn(tokens, hidden, dtype=bf16),  # the residual stream, written by the calls
        (1 + 0.1 * torch.randn(4, hidden)).to(bf16),  # one norm weight per call
        (torch.randn(3, hidden, hidden) * hidden**-0.5).to(bf16),  # the matmuls' weights
        torch.tensor([0.05]),  # the static fp8 scale
        torch.tensor([0.01]),  # scale_ub: an upper bound on the dynamic scales
    )


def _dequant(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """fp8 values back to ``dtype`` (what vLLM's scaled fp8 GEMM does before multiplying)"""
    return (q.to(torch.float32) * scale).to(dtype)


@program(
    _fp8_chain_inputs,
    "vLLM's fused norm + fp8 quant chain: rms_norm_static_fp8_quant, "
    "fused_add_rms_norm_static_fp8_quant (the residual input written), "
    "rms_norm_dynamic_per_token_quant with the residual, then with scale_ub and no residual; "
    "each output a torch.empty(fp8) between matmuls "
    "(Note [Out buffers allocated where they are first used])",
)
def fp8_norm_quant_chain(h, residual, w, wl, scale, scale_ub):
    eps, dt = 1e-6, h.dtype
    r1 = torch.empty(h.shape, dtype=_FP8, device=h.device)
    rms_norm_static_fp8_quant(r1, h, w[0], scale, eps)
    x = _dequant(r1, scale, dt) @ wl[0]
    r2 = torch.empty(x.shape, dtype=_FP8, device=x.device)
    fused_add_rms_norm_static_fp8_quant(r2, x, residual, w[1], scale, eps)
    y = _dequant(r2, scale, dt) @ wl[1]
    r3 = torch.empty(y.shape, dtype=_FP8, device=y.device)
    s3 = torch.empty(y.shape[0], 1, device=y.device)
    rms_norm_dynamic_per_token_quant(r3, y, w[2], s3, eps, None, residual)
    z = _dequant(r3, s3, dt) @ wl[2]
    r4 = torch.empty(z.shape, dtype=_FP8, device=z.device)
    s4 = torch.empty(z.shape[0], 1, device=z.device)
    rms_norm_dynamic_per_token_quant(r4, z, w[3], s4, eps, scale_ub, None)
    return r4.to(torch.float32) * s4


@_nested_region
def _layer_region(h, kv_l):
    add_(kv_l[0, 0], h)  # write this layer's first K row
    return h * 2 + kv_l[1, 0]  # read its first V row


@program(
    lambda: (torch.randn(256), torch.zeros(4, 2, 64, 256)),
    "a nested_compile_region per layer writing its layer's cache (an invoke_subgraph: used "
    "four times), with a row of the last layer read before the first region",
    # the old row, computed before the region that writes it, and each region's output
    necessary_bytes=5 * 1024,
)
def region_kv_layers(h, kv):
    before = kv[3, 0, 0] * 2
    for layer in range(kv.shape[0]):
        h = _layer_region(h, kv[layer])
    return h, before


@program(
    lambda: (torch.randn(64, 256), torch.randn(256)),
    "reads of the base through other views before and after the op",
)
def views_around(x, y):
    buf = x * 1
    before = buf[0] + buf[1]
    add_(buf[1], y)
    after = buf[1] * buf[2]
    return before, after


@program(
    lambda: (torch.randn(64, 256, requires_grad=True), torch.randn(64, 256), torch.randn(256)),
    "a clone the program makes, mutates and saves for backward",
)
def clone_saved(x, y, z):
    buf = y.clone()
    add_(buf, z)
    return (x * buf).sum()


# -- read arguments over the memory the same call writes ----------------------------------------
# In eager an op given a read-only argument that is a view of memory it writes (a transpose,
# permute, view, dtype view, list element or the base of the written view) reads that memory: an
# op that reads after it writes sees its new values. The compiled call must pass the op such a
# view too, with no clone of the written base for it.



def _a44():
    return (torch.randn(4, 4, dtype=torch.float64),)


@program(
    _a44,
    "write_then_read(t, t.t()) on a fresh buffer: the read transpose is read after",
)
def wtr_transpose_fresh(a):
    t = a * 1
    write_then_read(t, t.t())
    return t


@program(
    _a44,
    "write_then_read(a, a.t()) on a graph input: the read transpose is read after",
)
def wtr_transpose_input(a):
    write_then_read(a, a.t())
    return a.sum()


@program(_a44, "ret_after_write(t0.view(2, 8), t0): the read base of the written view")
def raw_view_of_base(a):
    t0 = a * 1
    out = ret_after_write(t0.view(2, 8), t0)
    return out, t0


def _x2345():
    return (torch.randn(2, 3, 4, 5),)


@program(
    _x2345,
    "write_then_read(x.permute(0, 1, 3, 2), x): the base of a written permute",
)
def wtr_permute_written(x):
    y = x * 1
    write_then_read(y.permute(0, 1, 3, 2), y)
    return y


@program(
    _x2345,
    "write_then_read(x, x.permute(0, 1, 3, 2)): a permute of the written tensor",
)
def wtr_permute_read(x):
    y = x * 1
    write_then_read(y, y.permute(0, 1, 3, 2))
    return y


@program(
    _x2345,
    "write_then_read(x[1].permute(0, 2, 1), x[1].flatten()), x a graph input",
)
def wtr_permute_flatten_input(x):
    write_then_read(x[1].permute(0, 2, 1), x[1].flatten())
    return x[0] * 2


@program(
    _a44,
    "op(y, y) twice, then ret_after_write(y, y[0]): one memory, then a row of it",
)
def same_memory_calls(a):
    y = a * 1
    write_then_read(y, y)
    write_then_read(y, y)
    r = ret_after_write(y, y[0])
    return y, r


@program(_a44, "op(a, a) and ret_after_write(a, a[1]) on a graph input")
def same_memory_input(a):
    write_then_read(a, a)
    return ret_after_write(a, a[1])


@program(_a44, "read_then_write(r, r.t()): the read transpose is read before the write")
def rtw_transpose(a):
    r = a * 1
    read_then_write(r, r.t())
    return r


@program(_a44, "read_then_write(a, a.t()) on a graph input (read before the write)")
def rtw_transpose_input(a):
    read_then_write(a, a.t())
    return a.sum()


@program(
    lambda: (torch.randn(3, 4),),
    "write_list([b], b): the read is the list element's memory",
)
def write_list_element(x):
    b = x * 1
    write_list([b], b)
    return b


@program(
    lambda: (torch.randn(3, 4),),
    "write_list([b[0], b[1]], b): the read is the base",
)
def write_list_rows(x):
    b = x * 1
    write_list([b[0], b[1]], b)
    return b


@program(
    lambda: (torch.randn(4, 8),),
    "write_then_read_bits(y, y.view(torch.int32)): a dtype view",
)
def bits_dtype_view(x):
    y = x * 1
    write_then_read_bits(y, y.view(torch.int32))
    return y


@program(lambda: (torch.randn(6, 5, 4),), "v = b.transpose(0, 1); op3(v, v, b)")
def op3_transpose_base(x):
    b = x * 1
    v = b.transpose(0, 1)
    op3(v, v, b)
    return b


@program(
    lambda: (torch.randn(6, 4),),
    "cache_put(b, b[1:4], [3, 0, 2]): rows of the cache read",
)
def cache_put_own_rows(x):
    b = x * 1
    cache_put(b, b[1:4], torch.tensor([3, 0, 2]))
    return b


@program(lambda: (torch.randn(6, 4),), "cache_put on a graph input, rows read from it")
def cache_put_input_rows(b):
    cache_put(b, b[1:4], torch.tensor([3, 0, 2]))
    return b[0] + 1


@program(_x2345, "read_then_write(x.permute(0, 1, 3, 2), x): the read base, read before")
def rtw_permute(x):
    y = x * 1
    read_then_write(y.permute(0, 1, 3, 2), y)
    return y


def _aliased_inputs():
    a = torch.randn(4, 4, dtype=torch.float64)
    return (a, a.t())


@program(_aliased_inputs, "write_then_read(a, at): at = a.t() is another graph input")
def wtr_aliased_inputs(a, at):
    write_then_read(a, at)
    return a.sum()


@program(
    lambda: (torch.randn(5, 4),), "write_then_read(b[0:3], b[1:4]): overlapping rows, read after"
)
def wtr_overlapping_rows(x):
    b = x * 1
    write_then_read(b[0:3], b[1:4])
    return b


@program(
    lambda: (torch.randn(5, 4),), "write_then_read(x[0:3], x[1:4]) on a graph input"
)
def wtr_overlapping_input_rows(x):
    write_then_read(x[0:3], x[1:4])
    return x[4] * 2


@program(
    lambda: (torch.randn(8),),
    "two_read_first(x[:4], x.view(int32)[4:], x): the written tensors' bases meet",
)
def dtype_view_bases_meet(a):
    # x[:4] has the base x, the dtype view's half a base of its own (dtype views record none):
    # two bases over one memory, one written back after the other (Note [Bases that overlap])
    x = a * 1
    two_read_first(x[:4], x.view(torch.int32)[4:], x)
    return x


@program(
    lambda: (torch.randn(4, 4, dtype=torch.float64)[::2],),
    "write_then_mean(b, b.view(torch.int32)) on a strided graph input: another element size",
)
def mean_bits_strided_input(b):
    # Note [A dtype view Inductor keeps]: Inductor copied a strided tensor before reading it as
    # int32, so the op read the old bits (the built-in v2 too)
    write_then_mean(b, b.view(torch.int32))
    return b.sum()


@program(
    lambda: (torch.randn(4, 4, dtype=torch.float64)[::2],),
    "write_then_mean(b, b.view(torch.int64)) on a strided graph input: the same element size",
)
def mean_same_bits_strided_input(b):
    # Note [A dtype view Inductor keeps]: to the same element size Inductor keeps the view
    # whatever the strides, so the op reads the bits it wrote with no extern kernel
    write_then_mean(b, b.view(torch.int64))
    return b.sum()


@program(lambda: (torch.randn(2, dtype=torch.float64),), "write_then_mean(a[1:], a), a[1:] read before")
def read_of_a_kept_clone(a):
    # the old a[1:] is read later, so its base keeps a clone; the read a is a view of that clone
    # (Inductor computed a view of a clone into a buffer of its own, the write then missed it)
    r = a[1:].cumsum(0)
    write_then_mean(a[1:], a)
    return r.sum() * 1.5



# -- bytes PyTorch's built-in v2 saves on random programs (the fuzzer's bytes comparison) ----------


@program(
    lambda: (torch.randn(6, 6, dtype=torch.float64),),
    "write_then_mean(b, b.t()); b.diagonal(4).mul_(2); return b.unfold(1, 1, 4): a view of the "
    "input returned, which AOTAutograd regenerates from the input",
)
def returned_view_after_scatter(b):
    # Note [Returned scatters under Inductor]: the returned view was copied into a buffer of
    # its own (280 B; fuzz seed 20261609 #126)
    write_then_mean(b, b.t())
    b.diagonal(4, 1, 0).mul_(2.0)
    return b.unfold(1, 1, 4)


@program(
    lambda: (torch.randn(6, 3, 3, dtype=torch.float64),),
    "r = b.amax() + b.mean(); add_(b, r); add_(r, b.sum()); return r: reductions Inductor "
    "computes where they stand",
)
def reduction_read_before_write(b):
    # Note [Reductions Inductor computes where they stand]: b was cloned for the reductions'
    # reads, r being written later (fuzz seed 20261609 #23, #47, #68, #144)
    r = b.amax() + b.mean()
    add_(b, r)
    add_(r, b.sum())
    return r


@program(
    lambda: (torch.randn(2, 2, dtype=torch.float64),),
    "r = b.sum(1); add_(b, 1); return r: a reduction over two elements, which Inductor "
    "computes where it is used",
)
def small_reduction_read_before_write(b):
    r = b.sum(1)  # unrolled into a pointwise node: as lazy as one
    add_(b, torch.ones((), dtype=b.dtype))
    return r


@program(
    lambda: (torch.randn(2, dtype=torch.float64),),
    "r = a * 3; add_(a, r.amax() + r.mean()); return r: a returned value Inductor computes "
    "where it stands",
)
def returned_read_before_write(a):
    # Note [Returned values Inductor computes where they stand]: r was computed into a buffer
    # of its own before the call (fuzz seed 20261609 #14)
    r = a * 3.0
    s = r.clone().amax() + r.mean()
    add_(a, s)
    return r


@program(
    lambda: (torch.randn(3, dtype=torch.float64),),
    "two(r, r) and write_list([c, c], r): one object passed as two written arguments",
)
def one_object_written_twice(a):
    # Note [Arguments keep their identity]: eager's one object; a fresh alias (an extern
    # kernel under Inductor) for the second changed how Inductor reuses buffers (fuzz seed
    # 20261609 #28, #71, #128: +8 B)
    r = a.sum() * -2.0
    c = (a * 3).sum().unsqueeze(-1).cumsum(0)
    two(r, r)
    write_list([c, c], r)
    return c.sum(0) * 1.5, r


@program(
    lambda: (torch.randn(4, 3, 6, dtype=torch.float64)[::2],),
    "a[:, 1:2].mul_(-1) on a gappy input, then ret_after_write(v, v.flatten()): a scatter with "
    "the input's gappy strides, written in place through a pin of it",
)
def scatter_of_a_gappy_input_written(a):
    # Note [A pinned root keeps its layout]: the scatter was cloned into a span of its own
    # (fuzz seed 20261701 #59: 288 B over the built-in)
    v = a[:, 1:2:3]
    v.mul_(-1.0)
    return ret_after_write(v, v.flatten())


@program(
    lambda: (torch.randn(6, 5, dtype=torch.float64),),
    "r = a * -2; write_then_read(a, r); ret_after_write(r, r.t()); return r: r, read by the "
    "first call and written by the second, computed before the first through a pin",
)
def realized_value_a_later_call_writes(a):
    # Note [A realized value a later call writes]: a was cloned (fuzz seed 20261701 #129:
    # 240 B over the built-in)
    r = a * -2.0
    write_then_read(a, r)
    ret_after_write(r, r.t())
    return r


@program(
    lambda: (torch.randn(2, 3, 4, dtype=torch.float64),),
    "r = b.cumsum(1); old = r.cumsum(2).clone(); two(r, r): a contiguous buffer shared by "
    "aliasing arguments, cloned for a later read",
)
def clone_for_aliased_arguments(b):
    # Note [A contiguous clone pinned]: the span copy needed memory of its own (fuzz seed
    # 20261702 #53: 96 B over the built-in)
    r = b.cumsum(1)
    old = r.cumsum(2).clone()
    two(r, r)
    return old.sum() * -2.0, r


@program(
    lambda: (torch.randn(2, 3, 5, dtype=torch.float64),),
    "r = b.cumsum(2); add_(b, r); return r[:, :, 3:4]: a scan Inductor runs as an extern "
    "kernel on a CPU, where it stands",
)
def scan_read_before_write(b):
    # Note [Scans Inductor runs as extern kernels]: a view of r was computed before the call
    # (fuzz seed 20261704 #54: 888 B over the built-in)
    r = b.cumsum(2)
    add_(b, r)
    return r[:, :, 3:4:2]


@program(
    lambda: (torch.randn(2, 5, 5, dtype=torch.float64),),
    "r = b * 1.5; m = r.amax() + r.mean(); two(b, r); return (b + m).sum(): the reductions of "
    "r, after the call, moved before it",
)
def frontier_users_moved_back(b):
    # Note [Users of the frontier moved back before the call]: b was cloned, r being as large
    # as b (fuzz seed 20261706 #28: 400 B over the built-in)
    r = b * 1.5
    m = r.amax() + r.mean()
    two(b, r)
    return (b + m).sum()


@program(
    lambda: (torch.randn(6, 3, dtype=torch.float64), torch.randn(1, dtype=torch.float64)),
    "r = a.sum(0) * 0.5; return ret_after_write(r.narrow(0, 2, 1), y): a write into a view "
    "of a value nothing reads afterwards",
)
def write_no_one_reads(a, y):
    # Note [A write no one reads]: all of r was computed for the op to write its element
    # (fuzz seed 20261706 #117: 8 B over the built-in)
    r = a.sum(0) * 0.5
    return ret_after_write(r.narrow(0, 2, 1), y)


@program(
    lambda: (torch.randn(3, 3, dtype=torch.float64),),
    "v1, v2 = a.view(9).split([8, 1]); v1.mul_(2); add_(v1, 1); ret_after_write(v1, v2): a "
    "base that is a reshape of its root, read where the call does not write",
)
def base_reshaped_from_its_root(a):
    # Note [A base merged into a view of its root]: the second call's read of v2 counted as
    # overlapping its write of v1, and v1's memory was copied (fuzz seed 20261802 #77: 136 B
    # over the built-in)
    v1, v2 = a.view(9).split([8, 1], 0)
    v1.mul_(2.0)
    add_(v1, torch.ones((), dtype=a.dtype))
    return ret_after_write(v1, v2)


@program(
    lambda: (torch.randn(4, 5, 4, dtype=torch.float64),),
    "r = a.sum() * 1.5; s = (a + r).sum() * r; add_(r.view(1), s); add_(r, s): a value read "
    "before the call, taken by the call and by a later one",
)
def call_argument_read_later(a):
    # Note [Lazy reads computed before the call]: s, computed before the first call for the
    # second, is the first call's argument too, which Inductor computes before the call into
    # a buffer of its own anyway; r was cloned (fuzz seed 20261703 #61: 16 B over the built-in)
    r = a.sum() * 1.5
    v = r.view(1)
    s = (a * 1 + r).sum() * v[0]
    add_(v, s)
    add_(v[0], s)
    return r.unsqueeze(0)


@program(
    lambda: (torch.randn(6, 5, 6, dtype=torch.float64), torch.randn(5, dtype=torch.float64)),
    "r = b[1:2].sum() * 3; a.add_(r); two_read_first(b[1:2], b[1:2], b); return r: a value "
    "read before the call through a returned 0-d one, computed where that one stands",
)
def frontier_cut_at_its_inputs(a, b):
    # Note [A frontier cut at its inputs]: a + r, as large as a, was the frontier, and b was
    # cloned (fuzz seed 20261804 #171: 40 B over the built-in)
    v = b[1:2]
    r = v.sum() * 3.0
    a.add_(r)
    two_read_first(v, v, b)
    return r


@program(
    lambda: (torch.randn(6, 2, dtype=torch.float64)[1:],),
    "add_(b, 1) on b = x[1:]; v1, v2 = b.select(1, 0).split([3, 2]); ret_after_write(v1, v2): "
    "a read beside the write, in a value merged at another storage offset",
)
def read_beside_a_shifted_write(b):
    # Note [A call's value read where it was written]: the read of v2 counted as overlapping
    # the write of v1 (the first call's value sits at offset 0, b at offset 2), and b was
    # cloned (fuzz seed 20261805 #4: 120 B over the built-in)
    add_(b, torch.ones((), dtype=b.dtype))
    v1, v2 = b.select(1, 0).split([3, 2], 0)
    return ret_after_write(v1, v2)


@program(
    lambda: (torch.randn(6, 6, 5, dtype=torch.float64),),
    "r = b.sum(0) * 3; v = r.unsqueeze(1); add_(b, v); return v.cumsum(2): a view of a value "
    "read before the call, taken by the call and read after it",
)
def view_taken_read_later(b):
    # Note [A value the call takes, pinned for its later readers]: v was copied before the
    # call beside r's buffer (fuzz seed 20261911 #273: 240 B over the built-in)
    r = b.sum(0) * 3.0
    v = r.unsqueeze(1)
    add_(b, v)
    return v.cumsum(2)


@program(
    lambda: (torch.randn(5, 5, dtype=torch.float64),),
    "r = a.sum(1) * 1.5; add_(a, r); return r.as_strided([4], [1], 1): a value read before "
    "the call, taken by it whole, a view of it returned",
)
def value_taken_view_returned(a):
    # Note [A value the call takes, pinned for its later readers]: the returned view was
    # copied before the call beside r's buffer (fuzz seed 20261911 #50: 32 B over the built-in)
    r = a.sum(1) * 1.5
    add_(a, r)
    return r.as_strided([4], [1], 1)


@program(
    lambda: (torch.randn(2, 2, dtype=torch.float64),),
    "r = a.sum() * 0.5; t = arange(8) + r; two_read_first(r, r, ones(8)); add_(t, r); return r, "
    "t: a returned value read before a call that writes a smaller one",
)
def returned_read_before_a_smaller_write(a):
    # Note [Values alive across the call]: t, returned and written by a later call, was
    # computed before the call to save an 8-byte clone of r, alive across it beside ones(8)
    # (fuzz seed 20261912 #26: 56 B over the built-in)
    r = a.sum() * 0.5
    t = torch.arange(8, dtype=a.dtype) + r
    two_read_first(r, r, torch.ones(8, dtype=a.dtype))
    add_(t, torch.zeros(2, 2, dtype=a.dtype).sum())
    return r, t


@program(
    lambda: (torch.randn(6, 6, dtype=torch.float64),),
    "r0 = a.amax() + a.mean(); r1 = r0.amax() + r0.mean(); two_read_first(r0, r0, a); return "
    "r0 * "
    "r1, r1 * -2: a value computed lazily, cloned, its old value read after the call",
)
def lazy_source_read_after_its_clone(a):
    # Note [A lazy source read after its clone]: the clone read r0 unstored, and r0 was
    # computed again after the call from the two reductions, alive across it (fuzz seed
    # 20261913 #222: 8 B over the built-in)
    r0 = a.amax() + a.mean()
    r1 = r0.amax() + r0.mean()
    two_read_first(r0, r0, a)
    return r0 * r1, r1 * -2.0


@program(
    lambda: (torch.randn(4, 3, dtype=torch.float64),),
    "r0 = b.sum() * -2; add_(r0, (b + r0).sum()); v = r0.view(1, 1); r4 = r0.amax() + "
    "r0.mean(); t = v * 1; two(r4, v); return t.cumsum(1).cumsum(1), v: a clone the call "
    "writes through a view",
)
def clone_taken_through_a_view(b):
    # Note [A clone the op takes through views]: Inductor computed the view of r0's clone for
    # the op and the clone again for the returned view (fuzz seed 20261909 #227, shrunk:
    # 8 B over the built-in)
    r0 = b.sum() * -2.0
    add_(r0, (b + r0).sum())
    v = r0.view(1, 1)
    r4 = r0.amax() + r0.mean()
    t = v * 1.0
    two(r4, v)
    return t.cumsum(1).cumsum(1), v


@program(
    lambda: (torch.randn(6, dtype=torch.float64),),
    "v = b[4:5]; r = v.sum() * 1.5; two_read_first(r, r, b); v.add_(r); two_read_first(r, r, "
    "r.view(1)); return r: a native in-place op on an input between two calls, reading what "
    "the second writes",
)
def scatter_copied_back_before_a_call(b):
    # Note [Copies back where their value is computed]: the scatter of v's new value into b
    # read r before the second call, and only its copy back into b at the end was after it
    # (fuzz seed 20261917 #20, shrunk: 8 B over the built-in)
    v = b[4:5]
    r = v.sum() * 1.5
    two_read_first(r, r, b)
    v.add_(r)
    two_read_first(r, r, r.view(1))
    return (r,)


@program(
    lambda: (torch.randn(3, 2, dtype=torch.float64), torch.randn(4, dtype=torch.float64)),
    "r = b.sum(0) * 3; two_read_first(r, r, a); t = b.t(); t.add_(r[0]); o = "
    "ret_after_write(r, r[:1]); "
    "return o, t: an input's new value, read before a call, copied back at the end",
)
def copy_back_computed_before_a_call(b, a):
    # Note [Copies back where their value is computed]: b's new value read r[0] before the
    # second call, and its copy back into b at the end was after it (fuzz seed 20261919 #108,
    # shrunk: 16 B over the built-in)
    r = b.sum(0) * 3.0
    two_read_first(r, r, a)
    t = b.t()
    t.add_(r[0])
    o = ret_after_write(r, r[:1])
    return o, t


@program(
    lambda: (torch.randn(10, 4, 3, dtype=torch.float64)[::2],),
    "v7 = b.narrow(1, 1, 3).view(5, 9); v8 = v7.select(0, 2); two_read_first(v8, v7, b); "
    "v7.mul_(0.5); return v8.clone(): a clone of a reshaped scatter into an input, returned",
)
def returned_clone_of_a_reshaped_scatter(b):
    # Note [Returned scatters under Inductor]: remove_noop_ops drops the clone, and the view
    # returned is built from the scatter into b through a reshape, which Inductor re-inplaces
    # into b: the output was b's memory (fuzz seed 20261920 #32, shrunk; the built-in right)
    v7 = b.narrow(1, 1, 3).view(5, 9)
    v8 = v7.select(0, 2)
    two_read_first(v8, v7, b)
    v7.mul_(0.5)
    return (v8.clone(),)


@program(
    lambda: (torch.randn(3, 5, dtype=torch.float64),),
    "t1 = a * 1; t = a[1:3] * 1; v7, v8 = t.split([1, 1]); add_(a, t1); v8.mul_(-1); "
    "return t1, v7[0][2:]: a value read before a call, scattered into after it",
)
def scatter_into_a_value_read_before_a_call(a):
    # Note [A scatter into the frontier after the call]: t copied before the call made
    # Inductor compute the scatter of v8's new value into a buffer of its own, so the plan cost
    # as much as the clone of a, which stayed (fuzz seed 20261920 #95, shrunk: 120 B over the
    # built-in)
    t1 = a * 1.0
    t = a[1:3] * 1.0
    v7, v8 = t.split([1, 1], 0)
    add_(a, t1)
    v8.mul_(-1.0)
    return t1, v7[0][2:]


@program(
    lambda: (torch.randn(3, 2, 6, dtype=torch.float64),),
    "o = ret_after_write(a, (a * 1).view(6, 3, 2)); t = o + 0.25; add_(o, t); v = "
    "t.as_strided([2, 3], [6, 2], 14); add_list([a], o.sum()); return v[:, 0:2]: a value a "
    "call takes, returned through a view",
)
def taken_value_returned_through_views(a):
    # Note [A value the call takes, returned through views]: the returned view of t counted as
    # a lazy reader after add_, so the plan cost t's size, as much as the clone of o, which
    # stayed (fuzz seed 20261920 #252, shrunk: 288 B over the built-in)
    o = ret_after_write(a, (a * 1.0).view(6, 3, 2))
    t = o + 0.25
    add_(o, t)
    v = t.as_strided([2, 3], [6, 2], 14)
    add_list([a], o.sum())
    return (v[:, 0:2],)


@program(
    lambda: (torch.randn(4, dtype=torch.float64),),
    "v = a[2:3]; a.mul_(0.5); write_then_read(v, arange(4)): an input's new value written "
    "through a view by a call",
    # measured on this CPU with a itself written (the built-in 72 B, eager 88 B); 64 B where a
    # buffer of a's new value is written and copied into a at the end
    necessary_bytes=32,
)
def input_scaled_then_its_view_written(a):
    # Note [A buffer copied into an input is the input]: the call wrote the new value's buffer
    # in place, copied into a at the end, a buffer of its own where the built-in writes a copy
    # of the slice (fuzz seed 20261917 #231, shrunk: 24 B over the built-in)
    v = a[2:3]
    a.mul_(0.5)
    write_then_read(v, torch.arange(4, dtype=a.dtype, device=a.device).mean().reshape(1))
    return ()


@program(
    lambda: (torch.randn(4, 2, dtype=torch.float64)[::2],),
    "v0 = a[:, 0:1]; v1 = v0.diagonal(); v1.mul_(0.5); two(v1, v0) on a strided a: a "
    "scatter into a strided input written by a call",
)
def scatter_into_a_strided_input_written(a):
    # Note [A buffer copied into an input is the input]: the scatter of v1's new value into a
    # was cloned in a's layout for the call and copied into a at the end (fuzz seed 20261922
    # #157, shrunk: 48 B over the built-in)
    v0 = a[:, 0:1]
    v1 = v0.diagonal()
    v1.mul_(0.5)
    two(v1, v0)
    return ()


@program(
    lambda: (torch.randn(12, 2, 5, dtype=torch.float64)[::2],),
    "add_(a, a); a.unsqueeze(0).diagonal(1, 1, 3).mul_(0.5) on a strided a: a scatter into a "
    "view of an input a call wrote",
)
def scatter_into_a_view_of_a_written_input(a):
    # Note [A scatter into an input written in place]: Inductor computed the scatter into a
    # buffer of its own (dense, where a is strided) and copied it into a (fuzz seed 20261925
    # #69, shrunk: 480 B over the built-in)
    add_(a, a)
    a.unsqueeze(0).diagonal(1, 1, 3).mul_(0.5)
    return ()


@program(
    lambda: (
        torch.randn(4, 4, 5, dtype=torch.float64)[1:],
        torch.randn(1, 3, 1, 5, dtype=torch.float64),
    ),
    "v = a.unsqueeze(0)[:, :, 2:3]; v.mul_(0.5); add_(b, v) on an offset a: a scatter into a "
    "view of an input whose new value a call reads",
    necessary_bytes=0,  # eager writes a and b where they are
)
def scatter_into_an_input_view_read_by_a_call(a, b):
    # Note [A scatter into an input written in place]: the scatter, read by the call, was a
    # buffer of its own copied into a (fuzz seed 20261930 #66, shrunk: 480 B over the built-in)
    v = a.unsqueeze(0)[:, :, 2:3]
    v.mul_(0.5)
    add_(b, v)
    return ()


@program(
    lambda: (torch.randn(5, 4, 3, dtype=torch.float64).permute(0, 2, 1),),
    "o = ret_after_write(a, a); r = o * a; two(o, a); ret_after_write(r[2:], r[2:]): a read "
    "of both buffers of a call, moved back before it and pinned for the first",
)
def read_moved_back_for_two_buffers(a):
    # Note [Reads moved back before the call]: r, moved back before two() and pinned for o,
    # was still a pending read of a for the analysis, and a was copied (fuzz seed 20261931
    # #291, shrunk: one clone, 480 B over the built-in as drawn)
    o = ret_after_write(a, a)
    r = o * a
    two(o, a)
    head, tail = r.split([2, 3], 0)
    ret_after_write(tail, tail)
    return (o, head[:, :, 1:2])


@program(
    lambda: (torch.randn(2, 3, 4, dtype=torch.float64).permute(0, 2, 1),),
    "t = a * 1; v = t[:, 3:4]; v.mul_(-1); return ret_after_write(v, t.cumsum(1)) on a permuted "
    "a: a slice of a scatter into a permuted value, written where no one reads it",
)
def unread_write_into_a_permuted_scatter(a):
    # Note [A write no one reads]: the scatter's layout is Inductor's to choose, and the slice
    # was cloned into a span of the recorded layout (fuzz seed 20261930 #226, shrunk: 192 B
    # over the built-in, which passes the slice)
    t = a * 1
    v = t[:, 3:4]
    v.mul_(-1.0)
    return (ret_after_write(v, t.cumsum(1)),)


@program(
    lambda: (torch.randn(4, dtype=torch.float64),),
    "t = zeros(3, 6); v = t[:, 1::3]; r = v.cumsum(0); add_(r, r); ret_after_write(v, t): a "
    "constant a scan reads before the call that writes it",
)
def constant_scanned_before_a_call(a):
    # Note [A constant read apart from the write]: the scan, an extern kernel on a CPU, took a
    # copy of the constant, a buffer of its own (fuzz seed 20261930 #250, shrunk: 144 B over
    # the built-in)
    t, v, r = _scanned_zeros(a)
    add_(r, r)
    return (r, v.unsqueeze(-1), ret_after_write(v, t))


def _scanned_zeros(a):
    """``t = zeros(3, 6)``, a strided view of it, and that view's ``cumsum``."""
    t = torch.zeros((3, 6), dtype=a.dtype, device=a.device)
    v = t[:, 1:6:3]
    return t, v, v.cumsum(0)


@program(
    lambda: (torch.randn(4, dtype=torch.float64),),
    "t = zeros(3, 6); v = t[:, 1::3]; r = v.cumsum(0); add_(v, a.sum()); return r, v: a "
    "constant a scan reads after the call that writes it",
)
def constant_scanned_after_a_call(a):
    # Note [A constant read apart from the write]: Inductor moves the scan after the call; its
    # copy of the constant reads the old value (a clone of the written view otherwise)
    _, v, r = _scanned_zeros(a)
    add_(v, a.sum())
    return (r, v)


@program(
    lambda: (torch.randn(6, 6, 5, dtype=torch.float64)[::2],),
    "o = ret_after_write(b, b); v = o.diagonal(0, 1, 2)[:, 1:2]; o.mul_(2); two(b, v): a gappy "
    "view of a value computed into the buffer of one that dies there, written where no one "
    "reads it",
)
def unread_gappy_write_into_a_dying_buffer(b):
    # Note [A write no one reads]: unpinned, Inductor computed the view's elements into a
    # buffer of the view's span (fuzz seed 20261932 #20, shrunk: 488 B over the built-in,
    # which computes o * 2 into o's buffer)
    o = ret_after_write(b, b)
    v = o.diagonal(0, 1, 2)[:, 1:2]
    o.mul_(2.0)
    two(b, v)
    return ()


@program(
    lambda: (torch.randn(5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)),
    "r = a * b; head, tail = r.split([4, 1]); add_(a, b.sum()); ret_after_write(a, a); "
    "add_(head, tail): a value split, then pinned for one call, read after a second writing "
    "the same input",
)
def pinned_value_viewed_before_two_writes(a, b):
    # Note [Values computed where they are taken]: r, pinned before the first call, still
    # counted a pending read of a for the second through its split, a view taken before the
    # pin, and a was copied for the second call (fuzz seed 20261928 #112, shrunk; PyTorch's
    # built-in gives a wrong result here: it reads a after the second call)
    r = a * b
    head, tail = r.split([4, 1], 0)
    add_(a, b.sum())
    ret_after_write(a, a)
    add_(head, tail)
    return (head,)


@program(
    lambda: (torch.randn(2, 6, 5, dtype=torch.float64), torch.randn(2, dtype=torch.float64)),
    "add_(a, b); v = a.unfold(2, 4, 5); a.mul_(2); return v.as_strided([4, 1, 4], [2, 8, 8], "
    "12): an output of an input's view, regenerated from the input",
    # measured on this CPU (b.sum()); 488 B with the output a view of a's new value, computed
    # into a buffer of its own (eager 16 B)
    necessary_bytes=8,
)
def regenerated_view_of_a_written_input(a, b):
    # Note [Regenerated outputs taken from the input]: the output viewed a's new value, which
    # Inductor computed into a buffer of its own for it (fuzz seed 20261927 #166, shrunk: 96 B
    # over the built-in)
    add_(a, b.sum())
    v = a.unfold(2, 4, 5)
    a.mul_(2.0)
    return (v.as_strided([4, 1, 4], [2, 8, 8], 12),)


@program(
    lambda: (),
    "r = zeros(2, 6, 5).cumsum(0); v3, v4 = r.split([1, 1]); return ret_after_write(v4, ...): "
    "a view of a value that overlaps itself, written and read nowhere else",
)
def overlapping_value_written_through_a_view(*_):
    # Note [A write no one reads]: Inductor's patterns make the cumsum of zeros an expanded
    # iota, which the pass clones densely; the pin of that clone made Inductor compute all of
    # it, where the op takes one slice (fuzz seed 20261927 #150, shrunk: 240 B over the
    # built-in)
    t0 = torch.zeros((2, 6, 5), dtype=torch.float64)
    r2 = t0.cumsum(0)
    v3, v4 = r2.split([1, 1], 0)
    return (ret_after_write(v4, t0),)


def _written_input_and_a_vector():
    """An input a call writes (its values then read apart from where they are written), and
    the vector whose sum the call adds."""
    return torch.randn(5, 3, 2, dtype=torch.float64), torch.randn(4, dtype=torch.float64)


@program(
    _written_input_and_a_vector,
    "add_(b, a.sum()); v = b[1, :, 0]; v.add_(v[0] * 2): a row written from its own first "
    "element, after a call wrote the input",
    necessary_bytes=8,  # measured on this CPU: a.sum(), then v[0] * 2 in its buffer
)
def row_written_from_its_own_element(b, a):
    # Note [A write that reads its own memory elsewhere]: Inductor computed v[0] * 2 inline in
    # the loop writing the row into b, reading v[0] after it wrote it (fuzz seed 20261937 #164,
    # shrunk; PyTorch's built-in is wrong the same way)
    add_(b, a.sum())
    v = b[1, :, 0]
    v.add_(v[0] * 2.0)
    return ()


@program(
    _written_input_and_a_vector,
    "add_(b, a.sum()); b.copy_(b.flip(0) + 1): an input written from its own flip, after a "
    "call wrote it",
    necessary_bytes=8 + 240,  # a.sum() and the flip, as eager
)
def input_written_from_its_own_flip(b, a):
    # Note [A write that reads its own memory elsewhere] (PyTorch's built-in is wrong here)
    add_(b, a.sum())
    b.copy_(b.flip(0) + 1.0)
    return ()


@program(
    lambda: (
        torch.randn(4, 6, 4, 1, dtype=torch.float64),
        torch.randn(4, 6, 4, dtype=torch.float64),
    ),
    "t = b * 2; u = t.clone(); add_(a, t.unsqueeze(3)); two(t, u): a view of a value a call "
    "reads before a later call takes the value whole",
)
def view_read_then_value_taken_whole(a, b):
    # Note [A view of a value a later call takes whole]: Inductor computed t twice, the view for
    # add_ into a buffer of its own and t for two (fuzz seed 20261937 #65, shrunk: 768 B over
    # the built-in; Inductor drops the clone u, so two takes t twice and one is cloned)
    t = b * 2.0
    u = t.clone()
    add_(a, t.unsqueeze(3))
    two(t, u)
    return (u,)


@program(
    lambda: (
        torch.randn(5, 3, 2, dtype=torch.float64),
        torch.randn(4, dtype=torch.float64),
        torch.tensor([1, 3]),
        torch.randn(2, 3, 2, dtype=torch.float64),
    ),
    "add_(b, a.sum()); b.index_put_((i,), v): an indexed write into an input a call wrote",
)
def index_put_after_a_call(b, a, i, v):
    # Note [A write that reads its own memory elsewhere]: the input the indexed write starts
    # from lands where it writes; only its values may be read apart (the first form of the
    # repair copied the whole input here)
    add_(b, a.sum())
    b.index_put_((i,), v)
    return ()


@program(
    _written_input_and_a_vector,
    "add_(b, a.sum()); b[1:3] = b[0:2].clone() + 1: rows written from the rows before them, "
    "after a call wrote the input",
    necessary_bytes=8 + 96,  # a.sum() and the clone, as eager
)
def rows_shifted_after_a_call(b, a):
    # Note [A write that reads its own memory elsewhere]: Inductor drops the clone and reads
    # row 1 in the loop that writes it (right by chance where a vector load takes both rows;
    # PyTorch's built-in is wrong here)
    add_(b, a.sum())
    b[1:3] = b[0:2].clone() + 1.0
    return ()
