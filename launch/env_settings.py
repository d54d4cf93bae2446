"""Settings per environment: the flags our measured runs used, so that a short command reproduces
them. A flag given on the command line wins over these; `run.py --help` lists them."""
from __future__ import annotations

# MovingDot keeps App. A's 500 initial labels: with fewer the level held on fewer seeds
# (docs/experiments.md, "MovingDot's first command on a faster machine").
_MOVING_DOT = {
    "n_initial_epochs": 20, "reward_predictor_learning_rate": 3e-3,
    "million_timesteps": 0.3, "lr_zero_million_timesteps": 0.3,
    # App. A.2's entropy bonus of 0.01 outweighs this small learned reward and the policy drifts
    # back towards uniform (docs/experiments.md, "MovingDot's entropy bonus and fall-back").
    "ent_coef": 0.003,
    # The initial labels' clips from every env: far fewer agent steps, ending as high
    # (docs/experiments.md, "Gathering from every env").
    "gather_clips": "every_env",
    # A ceiling on the predictor's training per agent step, so that it does not depend on the
    # processor: a fast predictor held the level less often (docs/experiments.md, "The
    # predictor's pace after its speed-up").
    "max_predictor_labels_per_step": 0.06,
}
# App. A.2's predictor for every Atari game: dropout 0.5 and batch norm on its convolutions.
ATARI_PREDICTOR = {"dropout": 0.5, "batchnorm": True}
# Pong and Enduro also: labels annealed over the run (App. A), the predictor trained on about one
# label per 10 agent steps (App. A); 20 pretraining epochs, not App. A's 200, which are slow on a
# CPU (docs/experiments.md, "Pong from preferences: what we found").
_ATARI = {
    **ATARI_PREDICTOR, "label_schedule": "annealed", "max_labels": 3300,
    "n_initial_epochs": 20, "min_predictor_labels_per_step": 0.1,
}
# Pong: A2C's rate rises from 0 over the first 0.02M steps, where the full rate blinded the
# policy's torso on six seeds of six, then decays to zero over the run's 6M steps (the paper's
# over 80M, nearly constant here); a network whose units all stop firing goes back to a live
# checkpoint, so every checkpoint is kept (docs/reproduction.md, "Pong from preferences").
_PONG = {
    **_ATARI, "million_timesteps": 6.0, "lr_warmup_million_timesteps": 0.02,
    "lr_zero_million_timesteps": 6.0, "revive_dead_policy": True, "policy_ckpts_kept": 0,
}
ENV_SETTINGS: dict[str, dict[str, object]] = {
    "MovingDotNoFrameskip-v0": _MOVING_DOT,
    "MovingDot-v0": _MOVING_DOT,
    "PongNoFrameskip-v4": _PONG,
    "EnduroNoFrameskip-v4": _ATARI,
}


def env_settings(env_id: str | None) -> dict[str, object]:
    """The settings this environment runs with unless a flag says otherwise: its own, App. A.2's
    predictor for another Atari game, none for an env we do not know."""
    if env_id in ENV_SETTINGS:
        return dict(ENV_SETTINGS[env_id])
    from envs import UnknownEnvError, env_kind

    try:
        return dict(ATARI_PREDICTOR) if env_id and env_kind(env_id) == "atari" else {}
    except UnknownEnvError:  # refused with its own message once the settings are checked
        return {}


def _flags(settings: dict[str, object]) -> str:
    return " ".join(f"--{k}" if v is True else f"--{k} {v}" for k, v in settings.items())


def describe() -> str:
    """The settings per environment, for `--help`."""
    lines = ["settings per environment (a flag given on the command line wins):"]
    lines += [f"  {env_id}: {_flags(settings)}" for env_id, settings in ENV_SETTINGS.items()]
    lines.append(f"  any other <Game>NoFrameskip-v4: {_flags(ATARI_PREDICTOR)}")
    return "\n".join(lines)
