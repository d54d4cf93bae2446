"""Installed: after the README's set-up a script anywhere imports the wrapper and the envs, and
a package that takes one of our names is refused in one line."""
import os
import subprocess
import sys

SCRIPT = ("from launch.preference_env import PreferenceVecEnv\n"
          "from envs.gym_vector import GymVectorEnv\n"
          "env = GymVectorEnv('MovingDotNoFrameskip-v0', 2)\n"
          "print(env.reset(seed=0)[0].shape)\n")


def _run_outside(tmp_path):
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    (tmp_path / "user_script.py").write_text(SCRIPT)
    return subprocess.run([sys.executable, "user_script.py"], cwd=tmp_path, env=environ,
                          capture_output=True, text=True, timeout=120)


def test_a_script_outside_the_checkout_imports_the_wrapper_and_the_envs(tmp_path):
    r = _run_outside(tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "(2, 4, 84, 84)"


def test_another_package_with_one_of_our_names_is_refused_in_one_line(tmp_path):
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "__init__.py").write_text("")  # e.g. PyPI's `envs`
    r = _run_outside(tmp_path)
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: these packages are not this checkout's") and (
        f"envs ({tmp_path / 'envs' / '__init__.py'})" in last), r.stderr
