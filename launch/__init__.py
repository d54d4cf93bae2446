"""Launching a run: the command line and settings, the run directory, the modes' phases and the
supervisor of their processes, the gymnasium wrapper. Nothing below (a2c, reward_predictor,
pref_interface, envs, runtime) imports from here."""
