"""stable-baselines3's PPO learns MovingDot from synthetic preferences, through PreferenceVecEnv.

    pipenv run python -m examples.ppo_moving_dot --log_dir ~/runs/ppo_dot

PPO sees only r̂, the reward predictor's; the run directory is run.py's (label store, predictor
checkpoints, TensorBoard logs, settings.json), with PPO's own model saved as `ppo.zip`. With
`--stop_at_level` training stops once the mean true return of the last 64 episodes reaches 90% of
the scripted policy's (envs/scores.py), as `benchmarks/bench_ppo_wrapper.py` measures it.
"""
from __future__ import annotations

import argparse
import signal
import sys


# PPO's Atari settings from rl-baselines3-zoo (n_steps 128, 4 epochs of minibatches of 256,
# clip 0.1, lr 2.5e-4), with 16 envs as our A2C.
PPO_SETTINGS = dict(n_steps=128, batch_size=256, n_epochs=4, learning_rate=2.5e-4, clip_range=0.1,
                    ent_coef=0.01, vf_coef=0.5)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log_dir", help="the run directory (must not exist yet); default runs/NAME")
    p.add_argument("--million_timesteps", type=float, default=0.5,
                   help="PPO's agent steps, in millions")
    p.add_argument("--n_envs", type=int, default=16, help="envs of the vector env")
    p.add_argument("--seed", type=int, default=0, help="seed of the envs, the labels and PPO")
    p.add_argument("--torch_threads", type=int, default=1, help="torch threads for PPO and r̂")
    p.add_argument("--n_initial_prefs", type=int,
                   help="labels before pretraining (default: MovingDot's settings)")
    p.add_argument("--n_initial_epochs", type=int,
                   help="pretraining epochs (default: MovingDot's settings)")
    p.add_argument("--stop_at_level", action="store_true",
                   help="stop once the mean true return of the last 64 episodes reaches 90%% of "
                        "the scripted policy's")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    # Ctrl-C (and kill -TERM) end training cleanly, also when the script was started in the
    # background, where the shell leaves SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback

    from envs.gym_vector import GymVectorEnv
    from envs.scores import MOVING_DOT_LEVEL
    from examples.sb3_vec_env import SB3VecEnv
    from launch.preference_env import PreferenceVecEnv

    torch.set_num_threads(a.torch_threads)
    env = PreferenceVecEnv(GymVectorEnv("MovingDotNoFrameskip-v0", a.n_envs, seed=a.seed),
                           synthetic_prefs=True, seed=a.seed, log_dir=a.log_dir,
                           million_timesteps=a.million_timesteps,
                           n_initial_prefs=a.n_initial_prefs, n_initial_epochs=a.n_initial_epochs)

    class StopAtLevel(BaseCallback):
        def _on_step(self) -> bool:
            returns = [ep["r"] for ep in self.model.ep_info_buffer][-64:]
            return not (a.stop_at_level and len(returns) == 64 and
                        sum(returns) / 64 >= MOVING_DOT_LEVEL)

    try:
        model = PPO("CnnPolicy", SB3VecEnv(env, seed=a.seed), seed=a.seed, verbose=0,
                    **PPO_SETTINGS)
        model.learn(int(a.million_timesteps * 1e6), callback=StopAtLevel())
        model.save(env.run_dir / "ppo.zip")
    finally:
        env.close()  # the labels and the predictor are saved; the run's summary is printed
    return 0


if __name__ == "__main__":
    sys.exit(main())
