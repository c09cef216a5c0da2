import os
from pathlib import Path

# Triton kernels run on CPU under the interpreter; this must be set before torch (whose
# Inductor imports triton) is imported. An explicit TRITON_INTERPRET=0 (on a GPU) is kept.
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import autofunc  # noqa: E402,F401
from tools import corpus  # noqa: E402

from tests.inductor_code import WrapperViews  # noqa: E402

try:  # records triton.language before any test interprets a kernel (Note [Triton's
    # interpreter leaves triton.language patched] in autofunc/bench/user_triton.py)
    from autofunc.bench import user_triton  # noqa: E402,F401
except Exception:  # no triton (or one this tooling does not know): the Triton tests skip
    pass
from torch.torch_version import TorchVersion  # noqa: E402

# torch 2.11 (the GPU machine's, run 2026-11-24): a nested_compile_region around a mutating
# custom op fails to compile under PyTorch's own handling too (BackendCompilerFailed for the
# built-in v1 and v2 on every such program), so autofunc loses nothing there. Those tests run
# from torch 2.12 on; on older torch they are skipped with this reason.
OLD_TORCH = TorchVersion(torch.__version__) < "2.12"
_NESTED_REGIONS = pytest.mark.skipif(
    OLD_TORCH,
    reason="nested_compile_region around a mutating custom op fails under the built-in too "
    "on this torch (< 2.12)",
)


# The test tiers
# Three tiers, one command each (the README gives their durations):
#   pytest -m quick   every test but the files below, the slow and the vLLM ones: at most
#                     5 minutes on a 2-core machine
#   pytest            the suite as CI runs it (.ci/run): everything but the slow conformance
#                     cells
#   pytest -m slow    the slow tests, the slow conformance cells among them
# The files below are left out of the quick tier: each takes 6 s or more in all, together
# about 70% of the full suite's time (``pytest --durations=0``, 2026-11-28, 2-core CPU, under
# load: the suite 13.4 min, these 9.4). A slow new file belongs here.
NOT_QUICK = frozenset(
    {
        "test_vllm.py",  # vLLM itself: ~8.5 min (the architectures and two ranks: 373 s)
        "test_startup_race.py",  # fresh interpreters racing their first compile: 95 s
        "conformance/test_conformance.py",  # the CI slice of the matrix: 82 s
        "test_compare.py",  # the program corpus under every configuration: 59 s
        "test_tp_decoder.py",  # two ranks: 33 s
        "test_fuzz.py",  # a seeded fuzz slice: 27 s
        "test_readme.py",  # the README's commands as printed: 22 s
        "test_cache_hit_report.py",  # fresh processes reading Inductor's cache: 18 s
        "test_worker.py",  # the benchmark's worker processes: 15 s
        "test_examples.py",  # the examples as scripts: 15 s
        "test_diagnostics.py",  # TORCH_LOGS in a fresh process: 13 s
        "test_bench.py",  # the benchmark end to end: 11 s
        "test_packaging.py",  # builds the wheel: 8 s
        "test_gpu_campaign.py",  # the GPU campaign's dry runs: 6 s
    }
)
_TESTS = Path(__file__).parent


def pytest_collection_modifyitems(items):
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.originalname == "test_nested_compile_region" or "nested_region_row" in (
            str(v) for v in params.values()
        ):
            item.add_marker(_NESTED_REGIONS)
        # the test tiers (above): everything else is quick
        where = Path(str(item.fspath)).relative_to(_TESTS).as_posix()
        if where not in NOT_QUICK and not {"slow", "vllm"} & set(item.keywords):
            item.add_marker(pytest.mark.quick)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


_WRAPPER_VIEWS = WrapperViews()
_WRAPPER_VIEWS.install()


@pytest.fixture(autouse=True)
def _no_view_past_its_buffer():
    """Fail a test during which Inductor generated a view past the buffer it views: the
    program would read and write memory that is not its own, and crash a later test
    (tests/inductor_code.py)."""
    _WRAPPER_VIEWS.found.clear()
    yield
    found = list(_WRAPPER_VIEWS.found)
    _WRAPPER_VIEWS.found.clear()
    if found:
        pytest.fail(f"Inductor generated views past their buffers: {found[:3]}")


@pytest.fixture(params=["v1", "v2"])
def strategy(request):
    """Registers every corpus op with one strategy for the duration of a test."""
    regs = corpus.register_all(request.param)
    yield request.param
    for r in regs:
        r.remove()
