"""One trial of a sweep (`experiments.sweep`): its name, its run.py command line, and where a
sweep keeps its files. Apart from the sweep's driver and its Ray Tune side
(`experiments.sweep_tune`), which both use it."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from launch.rundir import is_run_dir

TUNE_DIR = "tune"  # Tune's experiment state, under the storage
RUNS_DIR = "runs"  # the trials' run directories, under the storage (unless given elsewhere)
CONSOLE_DIR = "console"  # what each trial's run.py printed, one file per trial


def slug(name: str) -> str:
    """A setting's name as part of a directory's name: `no noise model` -> `no_noise_model`."""
    return "".join(c if c.isalnum() else "_" for c in name).strip("_")


@dataclass(frozen=True)
class Trial:
    """One run of the sweep: a seed, optionally a named setting (its own run.py flags), and one
    value of each grid flag."""

    seed: int
    flags: tuple[tuple[str, str], ...] = ()  # (flag name, value), in the grid's order
    setting: str | None = None  # a named setting, e.g. "ensemble of 1"
    setting_flags: tuple[str, ...] = ()  # its run.py words, e.g. ("--ensemble_size", "1")

    @property
    def name(self) -> str:
        """The run directory's name: `seed3`, `predictor_pace_unit=member-seed3`, or with a
        setting `ensemble_of_1-seed3`."""
        parts = [f"{k}={v}".replace("/", "_") for k, v in self.flags] + [f"seed{self.seed}"]
        return "-".join(([slug(self.setting)] if self.setting else []) + parts)

    def words(self) -> list[str]:
        """The trial's own run.py words: its setting's flags, its seed and its grid values."""
        out = [*self.setting_flags, "--seed", str(self.seed)]
        for name, value in self.flags:
            out += bool_flag(name, value) if value in BOOL_WORDS else [f"--{name}", value]
        return out

    def argv(self, command: list[str], run_dir: Path) -> list[str]:
        """The run.py command line that starts this trial: the command, less any on/off switch
        whose other half the trial gives (run.py refuses the two together), then its words."""
        own = self.words()
        switched = {f"--no_{w[2:]}" for w in own if w.startswith("--")} | \
                   {f"--{w[5:]}" for w in own if w.startswith("--no_")} | \
                   {f"--{k}" for k, v in self.flags if v in BOOL_WORDS and not BOOL_WORDS[v]}
        return [*(w for w in command if w not in switched), *own, "--log_dir", str(run_dir)]

    def resume_argv(self, run_dir: Path) -> list[str]:
        """The run.py command line that continues this trial's run from its own directory: the
        run's saved settings, overridden by the trial's words again (so a setting such as a
        larger `--million_timesteps` applies), less those only a new run takes."""
        from launch.cli import NEW_RUN_ONLY

        own, kept = self.words(), []
        i = 0
        while i < len(own):
            if own[i].removeprefix("--") in NEW_RUN_ONLY:  # each with its value
                i += 2
                continue
            kept.append(own[i])
            i += 1
        return ["--resume", str(run_dir), *kept]

    def run_argv(self, command: list[str], run_dir: Path) -> list[str]:
        """`resume_argv` where the run directory holds a run, else `argv`."""
        if is_run_dir(run_dir):
            return self.resume_argv(run_dir)
        return self.argv(command, run_dir)


BOOL_WORDS = {"on": True, "off": False, "true": True, "false": False}


def bool_flag(name: str, value: str) -> list[str]:
    """`--name` for on; for off, its off switch (`--no_name`), or nothing for a switch that is
    off unless given (the command's `--name` is then left out: `Trial.argv`)."""
    from launch.settings import flag_fields

    if BOOL_WORDS[value]:
        return [f"--{name}"]
    negation = next((f.metadata["negation"] for f in flag_fields() if f.name == name), None)
    return [negation[0]] if negation else []


def device_flags(gpus_per_trial: float) -> list[str]:
    """The run.py words that put a trial's networks on the GPU Ray gives it."""
    return ["--device", "cuda", "--reward_predictor_device", "cuda"] if gpus_per_trial > 0 else []
