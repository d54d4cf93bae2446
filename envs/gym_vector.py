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
    the new episode's first, and the ended episode's last is in `info["final_obs"]`, masked by
    `info["_final_obs"]`).

    A game over is `terminated`; a time limit (MovingDot's 1,000 frames, ale-py's 108,000, Enduro's
    3,000 agent steps) is `truncated`. An episode's true score comes in `info["episode"]` as
    gymnasium's RecordEpisodeStatistics writes it: `r`, `l` per env and the mask `_episode`.
    `render()` gives what the agent sees: each env's newest 84x84 frame, as RGB.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": ["rgb_array"]}
    render_mode = "rgb_array"

    def __init__(self, env_id: str, num_envs: int, seed: int = 0, num_threads: int = 0) -> None:
        self.env_id = env_id
        self.env = make_vec_env(env_id, num_envs, seed=seed, num_threads=num_threads)
        self._last_obs: np.ndarray | None = None
        self.num_envs = num_envs
        self.single_observation_space = gymnasium.spaces.Box(0, 255, (4, 84, 84), np.uint8)
        self.single_action_space = gymnasium.spaces.Discrete(self.env.num_actions)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        self._last_obs = self.env.reset(seed=seed)
        return self._last_obs, {}

    def step(self, actions: np.ndarray):
        result = self.env.step(np.asarray(actions, dtype=np.int64).reshape(self.num_envs))
        self._last_obs = result.obs
        info: dict[str, Any] = {}
        if result.finished:
            mask = np.zeros(self.num_envs, dtype=bool)
            ret, length = np.zeros(self.num_envs), np.zeros(self.num_envs, dtype=np.int64)
            for ep in result.finished:
                mask[ep.env_index], ret[ep.env_index], length[ep.env_index] = (
                    True, ep.true_return, ep.length)
            info = {"episode": {"r": ret, "l": length, "_r": mask, "_l": mask}, "_episode": mask}
        if result.final_obs is not None:
            info["final_obs"], info["_final_obs"] = result.final_obs, result.dones.copy()
        truncated = (result.truncated if result.truncated is not None
                     else np.zeros(self.num_envs, dtype=bool))
        return result.obs, result.rewards, result.dones & ~truncated, truncated.copy(), info

    def render(self) -> tuple[np.ndarray, ...] | None:
        """Each env's newest frame, (84, 84, 3) uint8; None before the first reset."""
        if self._last_obs is None:
            return None
        return tuple(np.repeat(frame[-1][:, :, None], 3, axis=2) for frame in self._last_obs)

    # The sub-envs of make_vec_env are one object, not N: each method and attribute is theirs
    # (or this env's), the same for every sub-env, so these give N equal values.
    def get_attr(self, name: str) -> tuple[Any, ...]:
        """gymnasium's SyncVectorEnv.get_attr: the attribute `name`, once per sub-env."""
        return (self._attr(name),) * self.num_envs

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """gymnasium's SyncVectorEnv.call: call the method `name` (or read the attribute), once
        for all sub-envs, and give the result once per sub-env."""
        value = self._attr(name)
        return ((value(*args, **kwargs) if callable(value) else value),) * self.num_envs

    def set_attr(self, name: str, values: Any) -> None:
        """gymnasium's SyncVectorEnv.set_attr; the sub-envs share their attributes, so a list of
        values must hold one value N times."""
        if isinstance(values, (list, tuple)):
            if len(values) != self.num_envs or any(v != values[0] for v in values):
                raise ValueError(f"set_attr({name!r}): the sub-envs share their attributes, so "
                                 f"give one value (or {self.num_envs} equal ones)")
            values = values[0]
        setattr(self.env if hasattr(self.env, name) else self, name, values)

    def _attr(self, name: str) -> Any:
        for owner in (self.env, self):
            if hasattr(owner, name):
                return getattr(owner, name)
        raise AttributeError(f"GymVectorEnv({self.env_id!r}) has no attribute {name!r}")

    def close_extras(self, **kwargs: Any) -> None:
        self.env.close()
