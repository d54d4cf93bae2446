"""stable-baselines3's PPO learns a game from preferences, through PreferenceVecEnv.

    pipenv run python -m examples.ppo MovingDotNoFrameskip-v0 --synthetic_prefs --log_dir ~/runs/ppo_dot
    pipenv run python -m examples.ppo EnduroNoFrameskip-v4 --synthetic_prefs \\
        --teacher alongside_shaped --max_labels 1300 --million_timesteps 4 --log_dir ~/runs/ppo_enduro
    pipenv run python -m examples.ppo --resume ~/runs/ppo_enduro

Every flag but `--stop_at_level` is run.py's (`python run.py --help`), with the environment's own
settings as in run.py; PPO trains for the run's `--million_timesteps`, on its `--n_envs` envs,
with `--torch_threads` threads and its `--seed`; A2C's own flags (`--ent_coef`, `--lr`, ...) do
not reach PPO, whose settings are PPO_SETTINGS below. PPO sees only r̂, the reward
predictor's; the run directory is run.py's (label store, predictor checkpoints, TensorBoard logs,
settings.json), with PPO's own model saved as `ppo.zip` every 100,000 agent steps and when the
script stops (Ctrl-C, SIGTERM); in an Atari game its network is saved beside it as our policy
weights file `ppo_policy.pt`, which `experiments.evaluate` and `run_checkpoint.py` play.
`--resume DIR` goes on from the saved model, labels and predictor (after a crash or SIGKILL,
from the last save).
With `--stop_at_level` (MovingDot only) training stops once the mean true return of the last 64
episodes reaches 90% of the scripted policy's (envs/scores.py), as
`benchmarks/bench_ppo_wrapper.py` measures it.
"""
from __future__ import annotations

import argparse
import json
import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from launch.rundir import PPO_POLICY_FILE
from runtime.outputs import written_whole

if TYPE_CHECKING:
    from stable_baselines3 import PPO

DEFAULT_ENV = "MovingDotNoFrameskip-v0"
# PPO's Atari settings from rl-baselines3-zoo (n_steps 128, 4 epochs of minibatches of 256,
# clip 0.1, lr 2.5e-4), with 16 envs as our A2C.
PPO_SETTINGS = dict(n_steps=128, batch_size=256, n_epochs=4, learning_rate=2.5e-4, clip_range=0.1,
                    ent_coef=0.01, vf_coef=0.5)
MODEL_FILE = "ppo.zip"
# PPO's network is also saved as one of our policy weights files (PPO_POLICY_FILE) in Atari
# games: what experiments.evaluate, run_checkpoint.py and the GIFs play. SB3's CnnPolicy is our
# nature_cnn.
_SB3_NAMES = {"pi_features_extractor.cnn.0": "torso.0", "pi_features_extractor.cnn.2": "torso.2",
              "pi_features_extractor.cnn.4": "torso.4", "pi_features_extractor.linear.0": "torso.7",
              "action_net": "policy", "value_net": "value"}
SAVE_EVERY = 100_000  # agent steps between saves of PPO's model


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], allow_abbrev=False,
        usage="python -m examples.ppo [GAME] [--stop_at_level] [run.py's flags]",
        epilog=f"GAME: default {DEFAULT_ENV}, with --resume the run's; every other flag is "
               "run.py's (python run.py --help)")
    p.add_argument("--stop_at_level", action="store_true",
                   help="MovingDot: stop once the mean true return of the last 64 episodes "
                        "reaches 90%% of the scripted policy's")
    return p


def usage_error(message: str) -> NoReturn:
    """A mistake on the command line: one line on stderr, exit status 2 (as run.py's)."""
    from launch.cli import EXIT_USAGE

    print(f"python -m examples.ppo: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)


def wrapper_settings(rest: list[str]) -> tuple[str, int, dict]:
    """The game, the envs' seed and PreferenceVecEnv's keyword settings from run.py's command line
    (the game, then its flags); with --resume the game and seed are the run's. SystemExit, in one
    line on stderr and exit status 2, for a bad flag."""
    from launch.cli import TargetReached, UsageError, check_steps_left, given_flags, parse_args
    from launch.settings import Settings

    try:
        given = given_flags(["train_policy_with_preferences", *rest])
        given.pop("mode")
        env_id = given.pop("env_id", None)
        resumed = bool(given.get("resume"))
        # Every flag checked as run.py checks it, before any env starts.
        run = parse_args(["train_policy_with_preferences",
                          *([] if env_id or resumed else [DEFAULT_ENV]), *rest])
        if resumed and (run.dir / MODEL_FILE).is_file():  # PPO's own steps, kept in its model
            with zipfile.ZipFile(run.dir / MODEL_FILE) as z:
                done = int(json.loads(z.read("data"))["num_timesteps"])
            check_steps_left(run.dir, done, run.settings.million_timesteps)
    except UsageError as e:
        usage_error(str(e))
    except TargetReached as e:  # a finished run: nothing to do, as run.py says it
        print(e, file=sys.stderr)
        raise SystemExit(0) from None
    if resumed:
        s = run.settings
        return s.env_id, s.seed, {"n_envs": s.n_envs, **given}
    return (env_id or DEFAULT_ENV, given.get("seed", Settings.seed),
            {"n_envs": Settings.n_envs, **given})


def policy_weights(model: "PPO") -> dict:
    """PPO's CnnPolicy as our weights file's contents ({'policy', 'timesteps'}), for
    `a2c.checkpoint.save_policy_weights`: the Nature CNN torso and the two heads, renamed."""
    state = model.policy.state_dict()
    policy = {f"{ours}.{kind}": state[f"{theirs}.{kind}"].detach().clone()
              for theirs, ours in _SB3_NAMES.items() for kind in ("weight", "bias")}
    return {"policy": policy, "timesteps": int(model.num_timesteps)}


def save_ppo(model: "PPO", folder: Path, env_id: str, atari: bool = True) -> None:
    """PPO's model (`ppo.zip`) and, in an Atari game, its network as our policy weights file
    (`ppo_policy.pt`, naming `env_id`) into `folder`, each written whole before it replaces the
    last."""
    from a2c.checkpoint import save_policy_weights

    with written_whole(folder / MODEL_FILE, ".tmp.zip") as tmp:  # SB3 adds .zip to a bare name
        model.save(tmp)
    if atari:
        with written_whole(folder / PPO_POLICY_FILE) as tmp:
            save_policy_weights(tmp, {**policy_weights(model), "env_id": env_id})


def main(argv: list[str] | None = None) -> int:
    a, rest = build_parser().parse_known_args(argv)
    env_id, seed, settings = wrapper_settings(rest)
    if a.stop_at_level and not env_id.startswith("MovingDot"):
        usage_error("--stop_at_level is for MovingDot, whose level is known")
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.logger import Logger

    from envs import env_kind
    from envs.gym_vector import GymVectorEnv
    from envs.scores import MOVING_DOT_LEVEL
    from examples.sb3_vec_env import SB3VecEnv
    from launch.preference_env import PreferenceVecEnv
    from launch.stopping import interrupted_status

    atari = env_kind(env_id) == "atari"  # PPO's network is then also our policy weights file
    try:
        env = PreferenceVecEnv(
            GymVectorEnv(env_id, settings["n_envs"], seed=seed),
            resume_hint="python -m examples.ppo --resume {run_dir}",
            watch_hint=(f"python run_checkpoint.py {env_id} {{run_dir}}/{PPO_POLICY_FILE} --watch"
                        if atari else None),
            **settings)
    except KeyboardInterrupt:  # Ctrl-C while gathering or pretraining: the summary is printed
        return interrupted_status()
    except ValueError as e:  # a run this wrapper cannot take (one line, nothing started)
        usage_error(str(e))
    s = env.settings
    torch.set_num_threads(s.torch_threads)
    model_path = env.run_dir / MODEL_FILE

    def save(model: PPO) -> None:
        """PPO's model and network, and the wrapper's count of agent steps with them."""
        save_ppo(model, env.run_dir, env_id, atari)
        env.save_progress()

    class Callback(BaseCallback):
        """Saves the model every SAVE_EVERY agent steps; with --stop_at_level, stops there."""

        def _on_step(self) -> bool:
            if self.num_timesteps // SAVE_EVERY > (self.num_timesteps - s.n_envs) // SAVE_EVERY:
                save(self.model)
            returns = [ep["r"] for ep in self.model.ep_info_buffer][-64:]
            return not (a.stop_at_level and len(returns) == 64 and
                        sum(returns) / 64 >= MOVING_DOT_LEVEL)

    model, code = None, 0
    try:
        vec = SB3VecEnv(env, seed=s.seed)
        if model_path.is_file():  # a resumed run: PPO goes on from its saved model
            model = PPO.load(model_path, env=vec)
        else:
            model = PPO("CnnPolicy", vec, seed=s.seed, verbose=0, **PPO_SETTINGS)
        # The run's curves are the wrapper's (tb/): SB3's own logger writes nothing, and makes
        # no folder of its own in the system's temp directory.
        model.set_logger(Logger(folder=None, output_formats=[]))
        total = int(s.million_timesteps * 1e6)
        model.learn(max(total - model.num_timesteps, 0), callback=Callback(),
                    reset_num_timesteps=False)
    except KeyboardInterrupt:  # Ctrl-C: saved below, and said by the summary and the status
        code = interrupted_status()
    finally:  # SIGTERM (the wrapper makes it SystemExit) comes here too
        try:
            if model is not None:
                save(model)
        finally:
            env.close()  # the labels and the predictor are saved; the run's summary is printed
    return code


if __name__ == "__main__":
    sys.exit(main())
