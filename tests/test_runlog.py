"""Run curves for the milestone reports: a resumed run's wall-clock leaves out the time it was stopped."""
import numpy as np

from experiments.runlog import RunLog


def test_wall_clock_leaves_out_the_time_a_resumed_run_was_stopped(tmp_path):
    log = RunLog(tmp_path)  # no tb/ yet: no points
    assert log.wall_clock_s() == 0.0
    # (wall time, step, SPS): 100 s of training, stopped for an hour, then 50 s more.
    t = np.concatenate([np.arange(0.0, 101.0), 3700.0 + np.arange(0.0, 51.0)])
    log.sps = np.stack([t, 1000.0 * np.arange(len(t)), np.full(len(t), 1000.0)], 1)
    assert log.wall_clock_s() == 150.0
