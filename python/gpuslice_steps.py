"""Step markers for `gpuslice profile` (standard library only).

`gpuslice profile -- CMD` sets GPUSLICE_STEP_FILE (and puts this module on PYTHONPATH). Mark
the training steps and profile reports how much of each step waits for data:

    import gpuslice_steps

    for batch in gpuslice_steps.steps(loader):      # any iterable, e.g. a DataLoader
        train_step(batch)

    # or, by hand:
    with gpuslice_steps.step() as s:
        batch = next(it)
        s.data_ready()
        train_step(batch)

Each marker is one JSON line appended to $GPUSLICE_STEP_FILE:
    {"step": 3, "mark": "start", "ns": 1764500000123456789, "pid": 4242}
`mark` is "start" (the step begins: waiting for its batch starts), "data" (the batch is
there), or "end" (the step's work is done). `ns` is time.time_ns() (CLOCK_REALTIME), the clock
gpuslice samples with. When GPUSLICE_STEP_FILE is unset every call is a cheap no-op.
"""

import os
import threading
import time

__all__ = ["step", "steps", "enabled"]

_lock = threading.Lock()
_next_step = 0


def enabled():
    """True when a step file is set (running under `gpuslice profile`)."""
    return bool(os.environ.get("GPUSLICE_STEP_FILE"))


def _write(number, mark, ns=None):
    path = os.environ.get("GPUSLICE_STEP_FILE")
    if not path:
        return
    line = '{"step": %d, "mark": "%s", "ns": %d, "pid": %d}\n' % (
        number, mark, time.time_ns() if ns is None else ns, os.getpid())
    # O_APPEND keeps each line whole even with several writers.
    with _lock:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode("ascii"))
        finally:
            os.close(fd)


def _take_number():
    global _next_step
    with _lock:
        n = _next_step
        _next_step += 1
    return n


class step:
    """Context manager around one training step. Call data_ready() once the batch is there."""

    def __init__(self, number=None):
        self.number = number

    def __enter__(self):
        if self.number is None:
            self.number = _take_number()
        _write(self.number, "start")
        return self

    def data_ready(self):
        _write(self.number, "data")

    def __exit__(self, exc_type, exc, tb):
        _write(self.number, "end")
        return False


def steps(iterable):
    """Yields the items of `iterable`; each item is one step. The time spent in next() is the
    step's data wait; the time until the following next() is its compute."""
    it = iter(iterable)
    number = None
    try:
        while True:
            t0 = time.time_ns()
            try:
                item = next(it)
            except StopIteration:
                return
            t1 = time.time_ns()  # before any marker I/O, so the wait is next() alone
            number = _take_number()
            _write(number, "start", t0)
            _write(number, "data", t1)
            yield item
            _write(number, "end")
            number = None
    finally:
        if number is not None:  # the loop stopped early (break, exception)
            _write(number, "end")
