"""One start-up race, run in a fresh process by tests/test_startup_race.py.

Thread 1 registers a mutable custom op with autofunc while thread 2 makes the process's first
``torch.compile`` call; both start together (a barrier), one of them a few milliseconds late
(``argv[2]``: the delay of the compile, negative for the registration's). The compiled function
then calls the registered op, so the compile must also have found the pass. Prints ``OK`` or
each failure's traceback; exits 1 on any failure.

    python race_program.py BACKEND DELAY_MS    # BACKEND: inductor, default (none given), aot_eager
"""

import sys
import threading
import time
import traceback

import torch

import autofunc

BACKEND = sys.argv[1]
DELAY_S = float(sys.argv[2]) / 1000


@torch.library.custom_op("startup_race::put", mutates_args={"out"})
def put(out: torch.Tensor, x: torch.Tensor) -> None:
    out.copy_(x)


def plain(x):
    return x.sin() + 1


def with_op(out, x):
    put(out, x * 2)
    return out.sum()


failures: list[str] = []
barrier = threading.Barrier(2)


def guarded(who, fn):
    def run():
        barrier.wait()
        try:
            fn()
        except BaseException:  # noqa: BLE001 - every failure is reported
            failures.append(f"{who}:\n{traceback.format_exc()}")

    return run


def register():
    if DELAY_S < 0:
        time.sleep(-DELAY_S)
    autofunc.register(put)


def compile_first():
    if DELAY_S > 0:
        time.sleep(DELAY_S)
    kwargs = {} if BACKEND == "default" else {"backend": BACKEND}
    x = torch.randn(4)
    torch.testing.assert_close(torch.compile(plain, **kwargs)(x), plain(x))


threads = [threading.Thread(target=guarded("register", register)),
           threading.Thread(target=guarded("compile", compile_first))]
for t in threads:
    t.start()
for t in threads:
    t.join()
if not failures:  # both done: the registered op compiles, and writes its output
    try:
        out, x = torch.zeros(4), torch.randn(4)
        kwargs = {} if BACKEND == "default" else {"backend": BACKEND}
        total = torch.compile(with_op, **kwargs)(out, x)
        torch.testing.assert_close(out, x * 2)
        torch.testing.assert_close(total, (x * 2).sum())
    except BaseException:  # noqa: BLE001
        failures.append(f"after:\n{traceback.format_exc()}")
print("OK" if not failures else "\n".join(failures))
sys.exit(1 if failures else 0)
