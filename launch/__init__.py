"""Launching a run: the command line and settings, the run directory, the modes' phases and the
supervisor of their processes, the gymnasium wrapper. Nothing below (a2c, clips,
reward_predictor, pref_interface, envs, runtime) imports from here."""
from launch.names import check_names

# Every entry point (run.py, the wrapper, the experiments) comes through here: refuse another
# installed package of one of our names before anything imports it in our place.
check_names()
