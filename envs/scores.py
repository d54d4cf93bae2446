"""Scores per episode to put a run's true return beside: random play and, for MovingDot, the
scripted go-to-centre policy."""
from __future__ import annotations

# MovingDot (250 agent steps per episode), measured here: uniform random play and the greedy
# go-to-centre policy (envs/moving_dot.py's `scripted_actions`).
MOVING_DOT_RANDOM, MOVING_DOT_SCRIPTED = -2.5, 21.8
# The MovingDot milestone: 90% of the scripted policy's return, i.e. 19.6.
MOVING_DOT_LEVEL = round(0.9 * MOVING_DOT_SCRIPTED, 1)
# Atari random play: Mnih et al. 2015 (Nature), Extended Data Table 2.
ATARI_RANDOM = {"pong": -20.7, "enduro": 0.0, "beam_rider": 363.9, "breakout": 1.7,
                "qbert": 163.9, "seaquest": 68.4, "space_invaders": 148.0}


def reference_scores(env_id: str) -> dict[str, float]:
    """{"random": ..., "scripted": ...} where known for this environment (may be empty)."""
    from envs import env_kind

    if env_kind(env_id) == "moving_dot":
        return {"random": MOVING_DOT_RANDOM, "scripted": MOVING_DOT_SCRIPTED}
    from envs.atari import game_from_env_id

    game = game_from_env_id(env_id)
    return {"random": ATARI_RANDOM[game]} if game in ATARI_RANDOM else {}
