"""autofunc.bench.kernels and kernel_cases on the CPU: byte accounting by hand, the case table
built at tiny shapes with the launchers under the Triton interpreter (TRITON_INTERPRET=1,
tests/conftest.py), the runner with a fixed timer instead of do_bench (timing needs a GPU), and
``autofunc bench-kernels``."""

import argparse
import importlib.util
import json

import pytest
import torch

from autofunc import cli
from autofunc.bench import kernel_cases as kc
from autofunc.bench import kernels as kb

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="the cases run the Triton launchers"
)

TINY = kc.Geometry(q_heads=4, kv_heads=2, head=16, block=4, hidden=64, max_pos=32)
TINY_SWEEP = {"tokens": (8,), "batch": (2,), "context": (10,)}
TINY_CASES = [
    kc.Case("reshape_and_cache", {"tokens": 8}, TINY),
    kc.Case("rotary_embedding", {"tokens": 8}, TINY),
    kc.Case("fused_add_rms_norm", {"tokens": 8}, TINY),
    kc.Case("paged_attention", {"batch": 2, "context": 10}, TINY),
]


def fixed_timer(kernel_ms=2.0, copy_ms=1.0, sdpa_ms=0.5):
    """Calls each fn once (so it must run) and answers kernel, copy, sdpa ms in turn."""
    answers = iter([kernel_ms, copy_ms, sdpa_ms])

    def timer(fn):
        fn()
        return next(answers)

    return timer


# -- bytes, by hand (bf16: 2 bytes) -----------------------------------------------------------


def test_reshape_and_cache_bytes():
    # 8 tokens x 2 heads x 16: K and V read (1024 B), written (1024 B), int64 slots (64 B).
    assert kc.reshape_and_cache_bytes(TINY, 8) == 1024 + 1024 + 64


def test_rotary_bytes():
    # q+k: 8 tokens x 6 heads x 16 x 2 B = 1536 read and written; 8 cos/sin rows of 16; positions.
    assert kc.rotary_bytes(TINY, 8, rows_touched=8) == 2 * 1536 + 8 * 16 * 2 + 8 * 8
    assert kc.rotary_bytes(TINY, 8, rows_touched=1) == 2 * 1536 + 16 * 2 + 8 * 8


def test_rms_norm_bytes():
    # x and residual (8 x 64 x 2 B each) read and written, the weight read.
    assert kc.rms_norm_bytes(TINY, 8) == 4 * 1024 + 128


def test_attention_bytes():
    # 2 sequences of 10 tokens: K+V 2*2*10*2*16*2; query and out 2*2*4*16*2; tables 2x3 int32
    # (10 tokens span 3 blocks of 4); seq_lens 2 int32.
    assert kc.attention_bytes(TINY, 2, 10) == 2560 + 512 + 24 + 8
    # Serving: one sequence of 1024 tokens holds 4 MiB of K and V.
    assert kc.attention_bytes(kc.SERVING, 1, 1024) == 4 * 2**20 + 2 * 32 * 128 * 2 + 65 * 4
    assert kc.kv_cache_bytes(kc.SERVING, 128, 32768) == 16 * 2**30
    assert kc.kv_cache_bytes(TINY, 2, 10) == 2 * 2 * 12 * 2 * 16 * 2  # whole blocks


def test_bandwidth_is_kernel_over_copy():
    # 4e6 bytes in 2 ms: 2 GB/s; the copy moves 2e6 each way in 1 ms: 4 GB/s.
    assert kb.bandwidth(4_000_000, 2.0, 1.0) == (2.0, 4.0, 0.5)


# -- the case table ---------------------------------------------------------------------------


def test_full_sweep_skips_attention_over_the_cap():
    todo, skipped = kc.plan(kc.SWEEPS["full"], list(kc.GOALS), max_gib=24)
    assert [c.kernel for c in todo].count("rotary_embedding") == 3
    assert len(todo) == 3 * 3 + 6 * 4 - 1
    assert [c.shape for c in skipped] == [{"batch": 256, "context": 32768}]  # 32 GiB of K/V
    todo, _ = kc.plan(kc.SWEEPS["quick"], ["paged_attention"], max_gib=24)
    assert {c.kernel for c in todo} == {"paged_attention"}


@pytest.mark.parametrize("case", TINY_CASES, ids=lambda c: c.kernel)
def test_cases_build_and_agree_with_their_reference(case):
    built = case.build("cpu")
    assert built.check()
    built.run()
    assert (built.baseline is not None) == (case.kernel == "paged_attention")
    if built.baseline is not None:
        built.baseline()()


def test_check_catches_a_wrong_kernel(monkeypatch):
    monkeypatch.setattr(kc, "fused_add_rms_norm", lambda x, residual, weight, eps: None)
    assert not kc.Case("fused_add_rms_norm", {"tokens": 8}, TINY).build("cpu").check()


# -- the runner, with a fixed timer -----------------------------------------------------------


def test_run_fills_every_field():
    rows = [kb.measure(c, "cpu", fixed_timer()) for c in TINY_CASES]
    assert [r.error for r in rows] == [""] * 4
    assert all(r.checked for r in rows)
    # The copy moves the kernel's bytes in half the kernel's time: half the copy's bandwidth.
    assert [r.fraction for r in rows] == [0.5] * 4
    assert [r.meets_goal for r in rows] == [False] * 4
    assert rows[0].gbps == rows[0].bytes / 2.0 / 1e6 and rows[0].copy_ms == 1.0
    assert (rows[-1].sdpa_ms, rows[-1].sdpa_speedup) == (0.5, 0.25)
    assert rows[0].sdpa_ms is None


def test_a_failing_point_is_a_row():
    timer = fixed_timer(kernel_ms=0.0)  # a zero time: division by zero in the bandwidth
    row = kb.measure(TINY_CASES[0], "cpu", timer)
    assert row.error.startswith("ZeroDivisionError") and row.checked
    assert "ERROR" in "\n".join(kb.format_rows([row]))


def test_main_writes_json(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(kc.SWEEPS, "quick", TINY_SWEEP)
    path = tmp_path / "k.json"
    times = iter([2.0, 1.0] * 3 + [1.0, 1.0, 4.0])

    def timer(fn):
        fn()
        return next(times)

    args = argparse.Namespace(quick=True, device="cpu", json=str(path), kernels=[], max_gib=24.0)
    assert kb.main(args, timer=timer, geometry=TINY) == 0
    doc = json.loads(path.read_text())
    assert doc["env"]["torch"] == torch.__version__ and doc["sweep"]["name"] == "quick"
    assert doc["geometry"]["dtype"] == "torch.bfloat16" and doc["goals"] == kc.GOALS
    records = doc["records"]
    assert [r["kernel"] for r in records] == list(kc.GOALS)
    assert [r["fraction"] for r in records] == [0.5, 0.5, 0.5, 1.0]
    assert [r["meets_goal"] for r in records] == [False, False, False, True]
    assert records[-1]["sdpa_speedup"] == 4.0 and all(r["checked"] for r in records)
    out = capsys.readouterr()
    assert "paged_attention" in out.out and "[4/4]" in out.err


def test_a_run_stopped_part_way_keeps_its_points(tmp_path, monkeypatch):
    # The GPU campaign stops a step out of budget with SIGINT: the points measured are on disk.
    monkeypatch.setitem(kc.SWEEPS, "quick", TINY_SWEEP)
    path = tmp_path / "k.json"
    calls = iter(range(100))

    def timer(fn):
        if next(calls) == 4:  # the third point's kernel (two timings per point before it)
            raise KeyboardInterrupt
        fn()
        return 1.0

    args = argparse.Namespace(quick=True, device="cpu", json=str(path), kernels=[], max_gib=24.0)
    with pytest.raises(KeyboardInterrupt):
        kb.main(args, timer=timer, geometry=TINY)
    records = json.loads(path.read_text())["records"]
    assert [r["kernel"] for r in records] == list(kc.GOALS)[:2]


# -- CLI --------------------------------------------------------------------------------------


@pytest.fixture
def handed_over(monkeypatch):
    """The arguments ``autofunc bench-kernels`` hands to ``kernels.main`` (which does no work)."""
    seen = []
    monkeypatch.setattr(kb, "main", lambda args: seen.append(args) or 0)
    return seen


def test_cli_defaults_and_flags(handed_over):
    assert cli.main(["bench-kernels", "--device", "cpu"]) == 0
    args = handed_over[-1]
    assert (args.max_gib, args.quick, args.json) == (24.0, False, "")
    assert args.kernels == list(kc.GOALS)
    argv = ["--kernels", "rotary_embedding,paged_attention", "--max-gib", "8", "--device", "cpu"]
    assert cli.main(["bench-kernels", *argv]) == 0
    args = handed_over[-1]
    assert (args.kernels, args.max_gib) == (["rotary_embedding", "paged_attention"], 8.0)


def test_cli_rejects_unknown_kernels(handed_over, capsys):
    assert cli.main(["bench-kernels", "--kernels", "rotary", "--device", "cpu"]) == 2
    assert "known: reshape_and_cache," in capsys.readouterr().err and not handed_over


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_cli_without_cuda_says_so(handed_over, capsys):
    assert cli.main(["bench-kernels", "--quick"]) == 2  # --device cuda by default
    assert "torch.cuda.is_available() is False" in capsys.readouterr().err and not handed_over


@pytest.mark.parametrize("gqa", [True, False], ids=["enable_gqa", "repeat_interleave"])
def test_sdpa_baseline_attends_over_the_same_tokens(gqa, monkeypatch):
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if not gqa:  # a torch without enable_gqa

        def old_sdpa(q, k, v, scale, **kwargs):
            if kwargs:
                raise TypeError(f"unexpected keyword arguments {list(kwargs)}")
            return sdpa(q, k, v, scale=scale)

        monkeypatch.setattr(kc.F, "scaled_dot_product_attention", old_sdpa)
    torch.manual_seed(0)
    kv_cache = torch.randn(2, 6, TINY.block, TINY.kv_heads, TINY.head)
    query = torch.randn(2, TINY.q_heads, TINY.head)
    tables = torch.tensor([[4, 0, 2], [1, 5, 3]], dtype=torch.int32)
    seq_lens = torch.tensor([10, 10], dtype=torch.int32)
    k, v = (kc._gather(c, tables, 10) for c in kv_cache)
    got = kc._sdpa(query.unsqueeze(2), k, v, 0.25)().squeeze(2)
    want = torch.empty_like(query)
    kc.paged_decode_attention_ref(want, query, kv_cache[0], kv_cache[1], tables, seq_lens, 0.25)
    torch.testing.assert_close(got, want)
