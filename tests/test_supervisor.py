"""A crashing child: its error is printed, the others are stopped within seconds, status 1."""
import multiprocessing as mp
import time

from launch.supervisor import Supervisor

WORKER = "tests.supervised_targets:work_until_stopped"  # children import their targets


def test_a_crashed_child_stops_the_others_and_the_run_fails(capsys):
    ctx = mp.get_context("spawn")
    sup = Supervisor(ctx, ctx.Event())
    finished = ctx.Value("i", 0)
    sup.start("worker", WORKER, sup.stop_event, finished)
    sup.start("crasher", "tests.supervised_targets:crash_after", 1.0)
    t0 = time.monotonic()
    code = sup.wait()
    assert code == 1
    assert time.monotonic() - t0 < 15
    assert not any(p.is_alive() for p in sup.procs.values())
    assert finished.value == 1  # the healthy child was asked to stop, not killed
    err = capsys.readouterr().err
    assert "process 'crasher' failed" in err and "the child broke on purpose" in err


def test_a_child_stuck_after_the_stop_is_terminated_after_the_grace(capsys):
    ctx = mp.get_context("spawn")
    sup = Supervisor(ctx, ctx.Event())
    finished = ctx.Value("i", 0)
    sup.start("worker", WORKER, sup.stop_event, finished)
    sup.start("stuck", "tests.supervised_targets:ignore_the_stop", sup.stop_event)
    assert sup.wait(until=lambda: True, grace_s=2.0) == 0
    assert not any(p.is_alive() for p in sup.procs.values())
    assert finished.value == 1
    assert "stopping stuck" in capsys.readouterr().err
