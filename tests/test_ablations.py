"""The ablation benchmark's commands: each setting is a command run.py takes, and a run that
fails to start says why instead of counting as a seed that never reached the level."""
import pytest

from benchmarks import ablations
from benchmarks.time_to_level import run_until_level
from launch.cli import build_parser


@pytest.mark.parametrize("name", list(ablations.SETTINGS))
def test_every_setting_is_a_command_run_py_accepts(name):
    args = build_parser().parse_args(ablations.command(name))
    if "--adaptive_l2" in ablations.SETTINGS[name]:
        assert args.adaptive_l2  # the setting, not the baseline's --no_adaptive_l2


def test_a_run_that_fails_to_start_is_an_error_with_its_reason(tmp_path):
    with pytest.raises(RuntimeError, match="status 2: .*NoSuchGame"):
        run_until_level(["run.py", "train_policy_with_original_rewards", "NoSuchGame-v4",
                         "--log_dir", str(tmp_path / "run")], tmp_path / "run", 1.0, poll_s=0.1)
