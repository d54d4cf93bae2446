"""stable-baselines3's VecEnv API over a gymnasium 1.x vector env with same-step autoreset.

stable-baselines3 (2.x) trains on its own VecEnv class, not on gymnasium's vector envs. This
adapter is what it needs: step_async/step_wait, one info dict per env, `terminal_observation`
and `TimeLimit.truncated` at episode ends, and a Monitor-style `episode` entry whose return is
the game's true score when the env reports one in `info["true_reward"]` (PreferenceVecEnv does),
else the summed rewards given.
"""
from __future__ import annotations

import time
from typing import Any, Sequence

import gymnasium
import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import VecEnv

from envs.vec_env import EpisodeTracker


class SB3VecEnv(VecEnv):
    def __init__(self, env: gymnasium.vector.VectorEnv, seed: int = 0) -> None:
        self.env = env
        self.render_mode = None
        self._episodes = EpisodeTracker(env.num_envs)
        self._t0 = time.time()
        self._actions: np.ndarray | None = None
        super().__init__(env.num_envs, env.single_observation_space, env.single_action_space)
        self.seed(seed)

    def reset(self) -> np.ndarray:
        obs, _ = self.env.reset(seed=self._seeds[0])  # consecutive seeds from _seeds[0]
        self._reset_seeds()
        self._episodes = EpisodeTracker(self.num_envs)
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions).reshape(self.num_envs)

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        obs, rewards, terminated, truncated, info = self.env.step(self._actions)
        dones = np.logical_or(terminated, truncated)
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        score = info.get("true_reward", rewards)
        for ep in self._episodes(score, dones):
            i = ep.env_index
            infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
            infos[i]["episode"] = {"r": ep.true_return, "l": ep.length,
                                   "t": round(time.time() - self._t0, 6)}
            if "final_obs" in info:
                infos[i]["terminal_observation"] = info["final_obs"][i]
        return obs, np.asarray(rewards, dtype=np.float32), dones, infos

    def close(self) -> None:
        self.env.close()

    def _indices(self, indices: None | int | Sequence[int]) -> list[int]:
        if indices is None:
            return list(range(self.num_envs))
        return [indices] if isinstance(indices, int) else list(indices)

    def get_attr(self, attr_name: str, indices: None | int | Sequence[int] = None) -> list[Any]:
        if attr_name != "render_mode" and not hasattr(self.env, attr_name):
            raise AttributeError(attr_name)
        value = None if attr_name == "render_mode" else getattr(self.env, attr_name)
        return [value for _ in self._indices(indices)]

    def set_attr(self, attr_name: str, value: Any,
                 indices: None | int | Sequence[int] = None) -> None:
        raise NotImplementedError("the sub-environments live inside the gymnasium vector env")

    def env_method(self, method_name: str, *method_args: Any,
                   indices: None | int | Sequence[int] = None, **method_kwargs: Any) -> list[Any]:
        raise NotImplementedError("the sub-environments live inside the gymnasium vector env")

    def env_is_wrapped(self, wrapper_class: type,
                       indices: None | int | Sequence[int] = None) -> list[bool]:
        return [False for _ in self._indices(indices)]
