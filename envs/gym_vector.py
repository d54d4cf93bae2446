"""Our environments as gymnasium 1.x vector envs, for any RL library and PreferenceVecEnv."""
from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from envs import make_vec_env


class GymVectorEnv(gymnasium.vector.VectorEnv):
    """`make_vec_env(env_id, num_envs)` behind gymnasium's vector API: uint8 (N, 4, 84, 84)
    observations, Discrete actions, same-step autoreset (on an episode end the observation is
    the new episode's first).

    Episode ends are reported as `terminated` (game over and time limit are not told apart, and
    there is no `final_obs`). An episode's true score comes in `info["episode"]` as gymnasium's
    RecordEpisodeStatistics writes it: `r`, `l` per env and the mask `_episode`.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, env_id: str, num_envs: int, seed: int = 0, num_threads: int = 0) -> None:
        self.env_id = env_id
        self.env = make_vec_env(env_id, num_envs, seed=seed, num_threads=num_threads)
        self.num_envs = num_envs
        self.single_observation_space = gymnasium.spaces.Box(0, 255, (4, 84, 84), np.uint8)
        self.single_action_space = gymnasium.spaces.Discrete(self.env.num_actions)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        return self.env.reset(seed=seed), {}

    def step(self, actions: np.ndarray):
        result = self.env.step(np.asarray(actions, dtype=np.int64).reshape(self.num_envs))
        info: dict[str, Any] = {}
        if result.finished:
            mask = np.zeros(self.num_envs, dtype=bool)
            r, l = np.zeros(self.num_envs), np.zeros(self.num_envs, dtype=np.int64)
            for ep in result.finished:
                mask[ep.env_index], r[ep.env_index], l[ep.env_index] = (True, ep.true_return,
                                                                        ep.length)
            info = {"episode": {"r": r, "l": l, "_r": mask, "_l": mask}, "_episode": mask}
        return (result.obs, result.rewards, result.dones.copy(),
                np.zeros(self.num_envs, dtype=bool), info)

    def close_extras(self, **kwargs: Any) -> None:
        self.env.close()
