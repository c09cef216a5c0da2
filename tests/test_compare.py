"""The comparison with PyTorch's built-in auto-functionalization, as a test: on a chosen set of
corpus programs compiled with Inductor, autofunc is right (outputs and final inputs), leaves the
expected clones, and passes the bytes gate (no more than a correct built-in v2, no more than the
program's necessary bytes)."""

import pytest

from tools import corpus
from tools.compare import Row, bytes_gate, run_program

# program: clones autofunc v2 leaves under Inductor (0, or a clone eager has too)
PROGRAMS = {
    "kv_layers": 0,  # each layer writes kv[l, 0], kv[l, 1] of the cache input in place
    "kv_reordered_read": 0,  # disjoint regions: in place (the built-in v2 clones here)
    "list_arg": 0,
    "dst_src_clone": 1,  # PR #198260: the built-in writes x in place and reads clobbered data
    # uint8 cache written through fp8 dtype views, per layer: 0 bytes above eager (the built-in
    # v2 is wrong here); a same-dtype cache[1].view(torch.float32) write
    "kv_fp8_layers": 0,
    "cache_same_dtype_view": 0,
    # the op returns a tensor: Inductor reuses its buffer for ``s * 2``, as under the built-in
    # (Note [The Functionalize kernel and Inductor]); the clone is the program's own
    "returns_and_mutates": 1,
    # a native in-place op after the calls (the copy-back is of its value), a view of
    # the cache returned (AOTAutograd regenerates it from the input), a copy of one returned
    # (the built-in v2 returns a view of the input: wrong aliasing)
    "kv_then_native_inplace": 0,
    "kv_returned_view": 0,
    "kv_returned_copy": 0,
    "copy_then_call": 0,
    "shared_storage_layers": 0,
    # rope(q, k, q, k): the op reads and writes qkv in place, as in eager (was a copy of qkv)
    # SGLang's rope given query.view(-1, H, D) twice (read and written): one memory, as in
    # eager (was a copy of qkv per call); with FusedSetKVBufferArg the pool too, per layer
    "sglang_rope_inplace": 0,
    "sglang_rope_set_kv": 0,
    "rope_in_place": 0,  # per-layer caches over one storage (the built-in clones none)  # the copy into dst moves before the call (the built-in copies src)
    # vLLM's fused norm + fp8 quant chain, each output a fresh empty(fp8)
    # written in place; as many bytes as the built-in v2 (was 1,368 B more)
    "fp8_norm_quant_chain": 0,
}


@pytest.fixture(scope="module")
def rows():
    out = {}
    for name in PROGRAMS:
        for config in ("eager", "builtin_v2", "autofunc_v1", "autofunc_v2"):
            out[name, config] = run_program(name, config)
    return out


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_autofunc_is_right(rows, name):
    for config in ("autofunc_v1", "autofunc_v2"):
        row = rows[name, config]
        assert not row.error and row.correct, (config, row)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_autofunc_v2_clones_and_bytes(rows, name):
    ours, builtin, eager = (rows[name, c] for c in ("autofunc_v2", "builtin_v2", "eager"))
    assert ours.clones == PROGRAMS[name]
    assert ours.allocated <= eager.allocated  # nothing beyond what eager allocates
    if builtin.correct:
        assert ours.allocated <= builtin.allocated


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_bytes_gate(rows, name):
    gate_rows = [rows[name, c] for c in ("autofunc_v2", "builtin_v2")]
    assert bytes_gate(gate_rows) == []
    need = corpus.PROGRAMS[name].necessary_bytes
    if need is not None:
        assert rows[name, "autofunc_v2"].allocated <= need


def test_bytes_gate_fails_above_a_correct_builtin_or_the_necessary_bytes():
    name = "kv_fp8_layers"  # states necessary_bytes
    need = corpus.PROGRAMS[name].necessary_bytes
    ours = Row(name, "autofunc_v2", correct=True, allocated=need + 1)
    assert len(bytes_gate([ours])) == 1
    right = Row(name, "builtin_v2", correct=True, allocated=need // 2)
    assert len(bytes_gate([ours, right])) == 2
    # On CUDA the allocator rounds blocks up: only the built-in is the bar there.
    assert len(bytes_gate([ours, right], device="cuda")) == 1
    wrong = Row(name, "builtin_v2", correct=False, allocated=need // 2)
    assert len(bytes_gate([ours, wrong])) == 1
    assert bytes_gate([Row(name, "autofunc_v2", correct=True, allocated=need)]) == []


# Programs where the built-in's re-inplacing was reported to remove a clone
# autofunc keeps. autofunc v2 allocates no more than the built-in v2 wherever that is correct.
REPORTED_CLONES = ("bn_running_stats", "nested_region_row", "views_around", "clone_saved")


@pytest.fixture(scope="module")
def clone_rows():
    return {
        (name, config): run_program(name, config)
        for name in REPORTED_CLONES
        for config in ("eager", "builtin_v2", "autofunc_v2")
    }


@pytest.mark.parametrize("name", REPORTED_CLONES)
def test_no_more_bytes_than_the_builtin(clone_rows, name):
    ours, builtin = clone_rows[name, "autofunc_v2"], clone_rows[name, "builtin_v2"]
    assert not ours.error and ours.correct, ours
    if builtin.error or not builtin.correct:
        pytest.skip(f"the built-in v2 is wrong here: {builtin}")
    assert ours.allocated <= builtin.allocated
    assert bytes_gate([ours, builtin]) == []


def test_builtin_v2_is_wrong_on_the_pr_198260_trap(rows):
    # Documents why autofunc checks the other arguments of a call (Reason.READ_BY_CALL).
    assert rows["dst_src_clone", "builtin_v2"].correct is False


def test_json_is_rewritten_after_each_configuration(tmp_path, monkeypatch):
    # The GPU campaign stops a step out of budget with SIGINT: the configurations done stay.
    import json

    import tools.compare as cmp

    def fake(programs, configs, device):
        if configs == ["builtin_v2"]:
            raise KeyboardInterrupt
        return [Row(p, configs[0], correct=True) for p in programs]

    monkeypatch.setattr(cmp, "compare", fake)
    path = tmp_path / "c.json"
    argv = ["--programs", "kv_layers,list_arg", "--configs", "eager,autofunc_v2,builtin_v2"]
    with pytest.raises(KeyboardInterrupt):
        cmp.main([*argv, "--json", str(path)])
    rows = json.loads(path.read_text())["rows"]
    assert [(r["program"], r["config"]) for r in rows] == [
        ("kv_layers", "eager"), ("list_arg", "eager"),
        ("kv_layers", "autofunc_v2"), ("list_arg", "autofunc_v2"),
    ]
