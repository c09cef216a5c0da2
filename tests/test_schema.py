"""Tests for autofunc.schema through ``autofunc.register``: which op schemas are accepted, and
how an unsupported one is reported (the op, the argument, and the reason)."""

from __future__ import annotations

import itertools

import pytest
import torch

import autofunc
from autofunc.registry import registered_strategy
from autofunc.schema import ArgKind, op_info
from autofunc.testing import compile_capture

_counter = itertools.count()


@pytest.fixture
def lib():
    """A fresh op namespace per test (a scoped library fragment, as in PyTorch's own tests)."""
    ns = f"aftest_schema{next(_counter)}"
    library = torch.library.Library(ns, "FRAGMENT")
    library.ns_name = ns
    yield library
    library._destroy()


def _define(lib, schema: str) -> str:
    """Defines ``schema`` in ``lib`` and returns the op's ``ns::name`` string."""
    lib.define(schema)
    return f"{lib.ns_name}::{schema.split('(', 1)[0]}"


def _unsupported(lib, schema: str) -> autofunc.UnsupportedOpError:
    name = _define(lib, schema)
    with pytest.raises(autofunc.UnsupportedOpError) as info:
        autofunc.register(name)
    # Raised before anything is registered.
    assert registered_strategy(f"{name}.default") is None
    assert f"{name}.default" in str(info.value)
    return info.value


# -- unsupported schemas ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "schema",
    [
        "alias_out(Tensor(a!) x) -> Tensor(a!)",
        "alias_out(Tensor(a!) x, Tensor(b) y) -> Tensor(b)",
    ],
    ids=["mutable", "read_only"],
)
def test_output_aliasing_an_input_is_rejected(lib, schema):
    err = _unsupported(lib, schema)
    aliased = "x" if "Tensor(a!)" in schema.split("->")[1] else "y"
    assert err.arg == aliased
    assert f"argument '{aliased}'" in str(err)
    assert "output 0" in str(err) and "aliases" in str(err)
    assert "object at 0x" not in str(err)


@pytest.mark.parametrize(
    "schema, arg, type_text",
    [
        ("nested(Tensor x, int(a!) n) -> ()", "n", "int"),
        ("nested(Tensor x, float(a!)? f) -> ()", "f", "Optional[float]"),
    ],
    ids=["int", "optional_float"],
)
def test_mutable_arg_of_unsupported_type_is_rejected(lib, schema, arg, type_text):
    err = _unsupported(lib, schema)
    assert err.arg == arg
    assert f"argument '{arg}'" in str(err)
    assert type_text in str(err)


@pytest.mark.parametrize(
    "schema",
    ["shared(Tensor(a!) x, Tensor(a!) y) -> ()", "shared(Tensor(a!)? x, Tensor(a!)? y) -> ()"],
    ids=["tensor", "optional"],
)
def test_two_mutable_args_in_one_alias_set_are_rejected(lib, schema):
    err = _unsupported(lib, schema)
    # The second argument is at fault; the message also names the first one.
    assert err.arg == "y"
    assert "argument 'y'" in str(err) and "'x'" in str(err)
    assert "alias set" in str(err)


@pytest.mark.parametrize(
    "schema",
    [
        "shared(Tensor(a!)[] xs, Tensor(a!) y) -> ()",
        "shared(Tensor(a!)[] xs, Tensor(a!)[] y) -> ()",
        "shared(Tensor(a!) xs, Tensor(a!)[] y) -> ()",
        "shared(Tensor(a!)?[] xs, Tensor(a!) y) -> ()",
        "shared(Tensor(a!)[]? xs, Tensor(a!)?[]? y) -> ()",
    ],
    ids=["list_tensor", "list_list", "tensor_list", "list_of_optional", "optional_lists"],
)
def test_list_sharing_an_alias_set_is_rejected(lib, schema):
    # A list's alias set sits on its elements; it still counts.
    err = _unsupported(lib, schema)
    assert err.arg == "y"
    assert "alias set" in str(err)


def test_lists_with_own_alias_sets_register(lib):
    name = _define(lib, "lists(Tensor(a!)[] xs, Tensor(b!)[] ys) -> ()")
    with autofunc.register(name):
        assert op_info(getattr(torch.ops, lib.ns_name).lists.default).mutable_names == ("xs", "ys")


def test_op_that_mutates_nothing_is_rejected(lib):
    err = _unsupported(lib, "pure(Tensor x) -> Tensor")
    assert err.arg is None
    assert "mutates no argument" in str(err)


@pytest.mark.parametrize(
    "schema, arg",
    [
        ("res(Tensor(a!) x, Tensor _bases) -> ()", "_bases"),
        ("res(Tensor(a!) _bases) -> ()", "_bases"),
        ("res(Tensor(a!) x, int _views) -> ()", "_views"),
    ],
    ids=["bases", "mutable_bases", "views"],
)
def test_argument_named_like_a_hop_keyword_is_rejected(lib, schema, arg):
    err = _unsupported(lib, schema)
    assert err.arg == arg
    assert f"argument '{arg}'" in str(err)
    assert "reserved" in str(err)


def test_unsupported_return_type_is_rejected(lib):
    err = _unsupported(lib, "ret(Tensor(a!) x) -> str")
    assert "return type str" in str(err)


def test_unsupported_error_is_a_value_and_type_error(lib):
    err = _unsupported(lib, "pure(Tensor x) -> Tensor")
    assert isinstance(err, autofunc.AutofuncError)
    assert isinstance(err, ValueError) and isinstance(err, TypeError)


def test_one_bad_overload_rejects_the_whole_packet(lib):
    # register() validates every overload before it registers any.
    name = _define(lib, "pkt(Tensor(a!) x) -> ()")
    lib.define("pkt.bad(Tensor(a!) x, Tensor(b!) _bases) -> ()")
    with pytest.raises(autofunc.UnsupportedOpError, match="_bases"):
        autofunc.register(name)
    assert registered_strategy(f"{name}.default") is None
    assert registered_strategy(f"{name}.bad") is None


def test_the_aliases_keyword_is_reserved(lib):
    name = _define(lib, "uses_aliases(Tensor(a!) x, int[] _aliases) -> ()")
    with pytest.raises(autofunc.UnsupportedOpError, match="_aliases"):
        autofunc.register(name)


# -- bad register() arguments -------------------------------------------------------------------


def test_unknown_strategy_is_rejected(lib):
    name = _define(lib, "op(Tensor(a!) x) -> ()")
    with pytest.raises(autofunc.AutofuncError, match="strategy must be one of .*'v3'"):
        autofunc.register(name, strategy="v3")
    assert registered_strategy(f"{name}.default") is None


@pytest.mark.parametrize("name", ["aftest_nowhere::op", "aftest_schema_missing_op", "x::"])
def test_unknown_op_name_is_rejected(name):
    with pytest.raises(autofunc.AutofuncError, match="no op named"):
        autofunc.register(name)


def test_unknown_op_in_known_namespace_is_rejected(lib):
    _define(lib, "op(Tensor(a!) x) -> ()")
    with pytest.raises(autofunc.AutofuncError, match=f"{lib.ns_name}::nope"):
        autofunc.register(f"{lib.ns_name}::nope")


def test_a_typo_suggests_the_closest_op(lib):
    name = _define(lib, "put_rows(Tensor(a!) x) -> ()")
    with pytest.raises(autofunc.AutofuncError) as info:
        autofunc.register(name[:-1])  # ns::put_row
    assert str(info.value) == (
        f"autofunc.register: no op named '{name[:-1]}' (expected 'ns::name[.overload]'); "
        f"did you mean '{name}'?"
    )
    with pytest.raises(autofunc.AutofuncError, match=f"did you mean '{name}'"):
        autofunc.register(f"{name[:-1]}.default")  # the overload aside
    with pytest.raises(autofunc.AutofuncError) as info:
        autofunc.register("aftest_nowhere::zzqqxx")  # nothing close: no guess
    assert "did you mean" not in str(info.value)


def test_errors_through_the_decorator_name_the_decorator(lib):
    name = _define(lib, "op(Tensor(a!) x) -> ()")
    with pytest.raises(autofunc.AutofuncError, match=r"^autofunc\.functionalize: strategy must"):
        autofunc.functionalize(strategy="v3")(name)
    with pytest.raises(autofunc.AutofuncError, match=r"^autofunc\.functionalize: no op named"):
        autofunc.functionalize(name + "x")
    with pytest.raises(autofunc.AutofuncError, match=r"^autofunc\.override: no op named"):
        with autofunc.override("v1", [name + "x"]):
            pass
    assert registered_strategy(f"{name}.default") is None


def test_unknown_overload_is_rejected(lib):
    name = _define(lib, "op(Tensor(a!) x) -> ()")
    lib.define("op.other(Tensor(a!) x, int n) -> ()")
    with pytest.raises(autofunc.AutofuncError, match="no overload 'nope'.*default, other"):
        autofunc.register(f"{name}.nope")
    assert registered_strategy(f"{name}.default") is None


def test_non_op_object_is_rejected():
    with pytest.raises(autofunc.AutofuncError, match="got int"):
        autofunc.register(42)


# -- supported schemas --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "schema, kind, kwarg_only",
    [
        ("op(Tensor(a!) x, Tensor y) -> ()", ArgKind.TENSOR, False),
        ("op(Tensor(a!)? x, Tensor y) -> ()", ArgKind.OPTIONAL, False),
        ("op(Tensor(a!)[] x, Tensor y) -> ()", ArgKind.LIST, False),
        ("op(Tensor(a!)?[] x, Tensor y) -> ()", ArgKind.LIST, False),
        ("op(Tensor(a!)[]? x, Tensor y) -> ()", ArgKind.OPTIONAL_LIST, False),
        ("op(Tensor(a!)?[]? x, Tensor y) -> ()", ArgKind.OPTIONAL_LIST, False),
        ("op(Tensor y, *, Tensor(a!) x) -> ()", ArgKind.TENSOR, True),
        ("op(Tensor(a!) x, Tensor y) -> Tensor", ArgKind.TENSOR, False),
        ("op(Tensor(a!) x, Tensor y) -> (Tensor, int)", ArgKind.TENSOR, False),
    ],
    ids=["tensor", "optional", "list", "list_of_optional", "optional_list",
         "optional_list_of_optional", "kwarg_only", "returns_tensor", "returns_tuple"],
)
@pytest.mark.parametrize("strategy", ["v1", "v2"])
def test_supported_kinds_register(lib, schema, kind, kwarg_only, strategy):
    name = _define(lib, schema)
    with autofunc.register(name, strategy=strategy) as reg:
        assert reg.ops == (f"{name}.default",)
        assert registered_strategy(f"{name}.default") == strategy
        info = op_info(getattr(torch.ops, lib.ns_name).op.default)
        assert [(a.name, a.kind, a.kwarg_only) for a in info.mutable_args] == [
            ("x", kind, kwarg_only)
        ]
    assert registered_strategy(f"{name}.default") is None


def test_two_mutable_args_with_own_alias_sets_register(lib):
    name = _define(lib, "op(Tensor(a!) x, Tensor(b!)? y, Tensor(c!)[] zs) -> ()")
    with autofunc.register(name):
        info = op_info(getattr(torch.ops, lib.ns_name).op.default)
        assert info.mutable_names == ("x", "y", "zs")


def _impl_add_(x, y):
    x.add_(y)


def _impl_add_opt(x, y):
    if x is not None:
        x.add_(y)


def _impl_add_list(x, y):
    for t in x:
        t.add_(y)


def _impl_add_kw(y, *, x):
    x.add_(y)


@pytest.mark.parametrize(
    "schema, impl, call",
    [
        ("op(Tensor(a!) x, Tensor y) -> ()", _impl_add_, lambda op, b, y: op(b[1], y)),
        ("op(Tensor(a!)? x, Tensor y) -> ()", _impl_add_opt, lambda op, b, y: op(b[1], y)),
        (
            "op(Tensor(a!)[] x, Tensor y) -> ()",
            _impl_add_list,
            lambda op, b, y: op([b[0], b[2]], y),
        ),
        ("op(Tensor y, *, Tensor(a!) x) -> ()", _impl_add_kw, lambda op, b, y: op(y, x=b[:, 1])),
    ],
    ids=["tensor", "optional", "list", "kwarg_only"],
)
@pytest.mark.parametrize("strategy", ["v1", "v2"])
def test_supported_kinds_compile(lib, schema, impl, call, strategy):
    # A freshly defined op of each supported kind compiles and matches eager.
    name = _define(lib, schema)
    lib.impl("op", impl, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{name}", lambda *a, **k: None, lib=lib)
    op = getattr(torch.ops, lib.ns_name).op.default

    def fn(x, y):
        buf = x.clone()
        call(op, buf, y)
        return buf

    x, y = torch.randn(3, 3), torch.randn(3)
    with autofunc.register(name, strategy=strategy):
        compiled, captured = compile_capture(fn)
        got = compiled(x, y)
    assert f"torch.ops.higher_order.autofunc_{strategy}('{name}.default'" in captured.functional[0]
    torch.testing.assert_close(got, fn(x, y))
    assert not torch.equal(got, x)


@pytest.mark.parametrize("strategy", ["v1", "v2"])
def test_op_defined_again_after_its_library_is_destroyed(strategy):
    # A library destroyed and defined again (a per-test fixture, a reloaded module) frees the old
    # operator handle: the HOPs carry the op by name and must resolve it to the live handle. A
    # cached OpOverload called the freed handle and crashed the process (CI, exit 139).
    import gc

    from autofunc.schema import resolve

    def define(k):
        lib = torch.library.Library("aftest_redefined", "FRAGMENT")
        lib.define("op(Tensor(a!) x) -> ()")

        def impl(x):
            x.add_(k)

        lib.impl("op", impl, "CompositeExplicitAutograd")
        return lib

    def run():
        op = torch.ops.aftest_redefined.op.default

        def fn(x):
            y = x + 0
            op(y)
            return y

        with autofunc.register(op, strategy=strategy):
            return torch.compile(fn, backend="aot_eager", fullgraph=True)(torch.zeros(3))

    lib = define(1)
    torch.testing.assert_close(run(), torch.full((3,), 1.0))
    lib._destroy()
    del lib
    gc.collect()
    torch._dynamo.reset()
    lib = define(2)
    try:
        # The live handle, never one from the destroyed library.
        assert resolve("aftest_redefined::op.default")._op is torch.ops.aftest_redefined.op.default._op
        torch.testing.assert_close(run(), torch.full((3,), 2.0))
    finally:
        lib._destroy()


# -- ops that return their arguments (Note [Ops that return their arguments]) -------------------


_TAGS = pytest.mark.skipif(
    not (hasattr(torch.Tag, "inplace") and hasattr(torch.Tag, "out")),
    reason="torch.Tag.inplace / torch.Tag.out: a newer torch",
)


@_TAGS
@pytest.mark.parametrize(
    "schema, tag, returned",
    [
        ("op_(Tensor(a!) x, float s) -> Tensor(a!)", "inplace", ("x",)),
        ("op.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)", "out", ("out",)),
        ("op.out(Tensor x, *, Tensor(a!) o1, Tensor(b!) o2) -> (Tensor(a!), Tensor(b!))",
         "out", ("o1", "o2")),
    ],
    ids=["inplace", "out", "two_outs"],
)  # fmt: skip
def test_tagged_op_returning_its_mutable_arguments_registers(lib, schema, tag, returned):
    lib.define(schema, tags=getattr(torch.Tag, tag))
    name, _, overload = schema.split("(", 1)[0].partition(".")
    packet = getattr(getattr(torch.ops, lib.ns_name), name)
    op = getattr(packet, overload or "default")
    with autofunc.register(op) as reg:
        assert reg.ops == (f"{lib.ns_name}::{name}.{overload or 'default'}",)
        info = op_info(op)
        assert info.returned_args == returned
        assert info.num_returns == 0  # the HOPs return only the new values


def test_untagged_op_returning_its_mutable_argument_is_rejected(lib):
    # Without torch.Tag.inplace / torch.Tag.out nothing promises the output is the argument
    # itself (rather than some other view of it), so it stays refused, as by the built-in.
    # (Other tagged layouts - a returned list, an optional, fresh and aliased outputs mixed -
    # are refused by torch.library.define itself; schema._returned_args refuses them too.)
    err = _unsupported(lib, "op_(Tensor(a!) x) -> Tensor(a!)")
    assert err.arg == "x" and "aliases" in str(err)
    assert "torch.Tag.inplace" in str(err)
