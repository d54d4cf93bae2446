"""Process bodies for the supervisor tests (spawned children import them from here)."""
import time


def crash_after(seconds: float) -> None:
    time.sleep(seconds)
    raise RuntimeError("the child broke on purpose")


def work_until_stopped(stop_event, finished) -> None:
    while not stop_event.is_set():
        time.sleep(0.05)
    finished.value = 1  # it noticed the stop and ended cleanly


def ignore_the_stop(stop_event) -> None:
    while True:  # stuck, e.g. blocked on a half-written message
        time.sleep(0.05)


def count_to(n: int, counter, step_s: float = 0.3) -> None:
    for _ in range(n):
        time.sleep(step_s)
        counter.value += 1
