"""The run releases the GIL, and Ctrl-C during a run ends in KeyboardInterrupt (not a crash)."""

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np

import deinsum


def test_gil_is_released_during_a_run():
    a = np.random.default_rng(0).standard_normal((700, 700))
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    t = threading.Thread(target=tick)
    t.start()
    time.sleep(0.01)
    before = len(ticks)
    t0 = time.perf_counter()
    for _ in range(3):
        deinsum.einsum("ij,jk->ik", a, a, procs=1, threads=1)
    elapsed = time.perf_counter() - t0
    during = len(ticks) - before
    stop.set()
    t.join()
    # A thread held off by the GIL would not tick at all while the runs go on.
    assert during >= min(10, int(elapsed * 100)), (during, elapsed)


SCRIPT = r"""
import sys, numpy as np, deinsum
a = np.random.default_rng(0).standard_normal((2400, 2400))
print("start", flush=True)
deinsum.einsum("ij,jk->ik", a, a, procs=1, threads=1)
print("after", flush=True)
"""


def test_ctrl_c_during_a_run_raises_keyboard_interrupt():
    p = subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    assert p.stdout.readline().strip() == "start"
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=300)
    assert "KeyboardInterrupt" in err, err
    assert "after" not in out
    # Raised by the binding's run call (its check after the run), not by a later bytecode.
    assert "out = run(arrays, threads)" in err, err
    # Python ends on an uncaught KeyboardInterrupt with status 1 or by re-raising SIGINT.
    assert p.returncode in (1, -signal.SIGINT), (p.returncode, err)


CHAIN = r"""
import sys, time, numpy as np, deinsum
n, k = int(sys.argv[1]), int(sys.argv[2])
letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
expr = ",".join(letters[i] + letters[i + 1] for i in range(k)) + "->" + letters[0] + letters[k]
ms = [np.random.default_rng(i).standard_normal((n, n)) / n for i in range(k)]
print("start", flush=True)
t0 = time.perf_counter()
try:
    deinsum.einsum(expr, *ms, procs=2, threads=1, optimize="greedy")
finally:
    print("seconds", time.perf_counter() - t0, flush=True)
"""


def test_ctrl_c_stops_a_long_run_between_its_steps():
    # One product's time, measured here, sizes a chain whose full run would take ~20 s; the
    # product grows until it takes 40 ms, so that the chain's fixed costs (the process, its
    # plan, the 50 ms between checks for Ctrl-C) stay small beside it on a fast machine.
    for n in (600, 1200, 2400):
        a = np.random.default_rng(1).standard_normal((n, n))
        deinsum.einsum("ij,jk->ik", a, a, procs=2, threads=1)
        t0 = time.perf_counter()
        deinsum.einsum("ij,jk->ik", a, a, procs=2, threads=1)
        one = time.perf_counter() - t0
        if one >= 0.04:
            break
    k = max(4, min(50, int(20.0 / max(one, 1e-3))))
    full = k * one
    p = subprocess.Popen(
        [sys.executable, "-c", CHAIN, str(n), str(k)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    assert p.stdout.readline().strip() == "start"
    time.sleep(min(0.5, full / 8))
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=600)
    assert "KeyboardInterrupt" in err, err
    took = float(out.split("seconds")[1])
    # Stopped between steps: far sooner than the k products would take.
    assert took < full / 2, (took, full, k)
