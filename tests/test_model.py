"""The vLLM-style decoder compiled under each strategy: same output and KV cache as eager, and
where the cache went according to ``autofunc.explain``."""

import contextlib

import pytest
import torch
import torch._functorch.config as functorch_config
import torch._inductor.config as inductor_config

import autofunc
from autofunc.bench.model import MUTABLE_OPS, ModelConfig, TinyDecoder, make_inputs
from autofunc.inductor import last_reports
from autofunc.testing import same_result

CONFIG = ModelConfig(layers=2)
TOL = 1e-4

# (strategy, backend): the built-in v2 only through aot_eager, to keep the file under a minute.
COMPILES = [
    ("autofunc_v1", "aot_eager"),
    ("autofunc_v2", "aot_eager"),
    ("builtin_v2", "aot_eager"),
    ("autofunc_v1", "inductor"),
    ("autofunc_v2", "inductor"),
]


@pytest.fixture(scope="module")
def model():
    return TinyDecoder(CONFIG)


@contextlib.contextmanager
def registered(strategy):
    """autofunc_v1/v2: the four ops registered with autofunc; builtin_v2: PyTorch's handling."""
    regs = []
    if strategy.startswith("autofunc"):
        regs = [autofunc.register(op, strategy=strategy[-2:]) for op in MUTABLE_OPS]
    try:
        with (
            inductor_config.patch(enable_auto_functionalized_v2=True, fx_graph_cache=False),
            functorch_config.patch(enable_autograd_cache=False),
        ):
            yield
    finally:
        for r in regs:
            r.remove()


def test_inputs_are_a_decode_step():
    i = make_inputs(CONFIG)
    assert i.kv_cache.shape == CONFIG.cache_shape()
    assert i.hidden.shape == (CONFIG.batch, CONFIG.hidden)
    # each new token goes to a distinct slot inside its own sequence's blocks
    assert len(set(i.slot_mapping.tolist())) == CONFIG.batch
    blocks = (i.slot_mapping // CONFIG.block_size).tolist()
    assert all(b in i.block_tables[s].tolist() for s, b in enumerate(blocks))


@pytest.mark.parametrize("strategy,backend", COMPILES)
def test_compiled_matches_eager(model, strategy, backend):
    eager = make_inputs(CONFIG)
    expected = model(*eager.args())
    inputs = make_inputs(CONFIG)
    with registered(strategy):
        last_reports(clear=True)
        got = torch.compile(model, backend=backend)(*inputs.args())
        reports = last_reports(clear=True)
    assert same_result(got, expected, TOL, TOL)
    assert same_result(inputs.kv_cache, eager.kv_cache, TOL, TOL)
    assert not same_result(inputs.kv_cache, make_inputs(CONFIG).kv_cache)  # the step wrote it
    if backend == "inductor":
        # 4 mutable calls per layer, each an autofunc HOP the pass rewrote
        assert sum(len(r.calls) for r in reports) == 4 * CONFIG.layers
        if strategy == "autofunc_v2":
            # No cache clone. The one clone allowed is of `hidden`: Inductor's remove_noop_ops
            # drops the model's `hidden.clone()` before the pass runs, so the pass must copy the
            # graph input it would otherwise overwrite (the bytes eager's clone costs anyway).
            cloned = [d for r in reports for d in r.decisions if not d]
            assert sum(d.nbytes for d in cloned) <= inputs.hidden.numel() * inputs.hidden.itemsize


def test_explain_v2_clones_nothing(model):
    report = autofunc.explain(
        model, *make_inputs(CONFIG).args(), strategy="v2", backend="aot_eager", ops=MUTABLE_OPS
    )
    assert len(report.calls) == 4 * CONFIG.layers
    assert report.num_clones == 0, str(report)
    assert report.bytes_cloned == 0


def test_explain_v1_writes_each_cache_view_in_place(model):
    inputs = make_inputs(CONFIG)
    cache_bytes = inputs.kv_cache.numel() * inputs.kv_cache.itemsize
    report = autofunc.explain(
        model, *inputs.args(), strategy="v1", backend="aot_eager", ops=MUTABLE_OPS
    )
    cloned = [d for d in report.decisions if not d]
    # v1 clones views, never the cache: each clone is at most one layer's K (or V) half (the
    # rotary's key view is no longer cloned: Note [Scatter chains overwrite what they copy]) ...
    assert all(d.nbytes <= cache_bytes // (2 * CONFIG.layers) for d in cloned), str(report)
    # ... and no cache view at all: the V half of a layer is decided once the scatter writing
    # back its K half is folded (Note [Buffers of one call decided in turn]); before, that
    # scatter still read the old V half and every layer's V half was cloned.
    cache = [d for d in report.decisions if d.args in (("key_cache",), ("value_cache",))]
    assert [d.args for d in cache] == [("key_cache",), ("value_cache",)] * CONFIG.layers
    assert all(cache), str(report)
