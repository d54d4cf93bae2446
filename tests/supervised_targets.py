"""Process bodies for the supervisor tests (spawned children import them from here)."""
import time


def crash_after(seconds: float) -> None:
    time.sleep(seconds)
    raise RuntimeError("the child broke on purpose")


def _count_up(started) -> None:
    """Count this child among those that are up (`started` may be None)."""
    if started is not None:
        with started.get_lock():  # += alone is a read and a write: two children could lose one
            started.value += 1


def work_until_stopped(stop_event, finished, started=None) -> None:
    _count_up(started)
    while not stop_event.is_set():
        time.sleep(0.05)
    finished.value = 1  # it noticed the stop and ended cleanly


def ignore_the_stop(stop_event, started=None) -> None:
    _count_up(started)
    while True:  # stuck, e.g. blocked on a half-written message
        time.sleep(0.05)


def ignore_the_stop_with_a_short_orphan_wait(stop_event, started) -> None:
    """Stuck as `ignore_the_stop`, in a child that ends itself 0.5 s after a stop signal."""
    from launch import stopping

    stopping.ORPHAN_EXIT_S = 0.5
    ignore_the_stop(stop_event, started)


def count_to(n: int, counter, step_s: float = 0.3) -> None:
    for _ in range(n):
        time.sleep(step_s)
        counter.value += 1


def report_malloc(path: str) -> None:
    """Write this process's GLIBC_TUNABLES and the 2 MB pages backing a freshly written 64 MB
    block from malloc (as torch allocates; numpy asks for huge pages itself)."""
    import ctypes
    import ctypes.util
    import json
    import os
    import re

    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype = ctypes.c_void_p
    size = 2**26
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    rollup = open("/proc/self/smaps_rollup").read()
    huge_kb = int(re.search(r"AnonHugePages:\s+(\d+)", rollup).group(1))
    libc.free(ctypes.c_void_p(block))
    with open(path, "w") as f:
        json.dump({"tunables": os.environ.get("GLIBC_TUNABLES"), "huge_kb": huge_kb}, f)


def fail_half_way_through_a_message(errors) -> None:
    """Leave a length and only part of a message in the supervisor's error queue, then exit 1 (as
    a child killed part-way through sending its traceback leaves the pipe)."""
    import os

    from tests.helpers import write_half_a_message

    write_half_a_message(errors)
    os._exit(1)


def send_an_unreadable_traceback(errors) -> None:
    """Put in the supervisor's error queue an item that does not unpickle, then exit 1."""
    import os

    from tests.helpers import Unpicklable

    errors.put(Unpicklable())
    errors.close()
    errors.join_thread()
    os._exit(1)
