"""Cut the agent's experience into the clips that are shown for comparison (App. A.2: 25 steps)."""
from __future__ import annotations

import warnings

import numpy as np

from clips.clip import CLIP_LENGTH, FRAME_SHAPE, STACK, Clip


class ClipCutter:
    """Builds one clip at a time from the A2C rollouts, rotating over the environments.

    The clip under construction belongs to one env; when it is complete the next clip starts in
    the next env (i, i+1 mod N, ...), so every worker contributes while the rate stays at one
    clip per `clip_length` steps of the vector env, i.e. one per N x `clip_length`
    agent steps (400 with the paper's 16 workers). Clips cut in turn come from different workers
    and lie N clip lengths apart in each worker's play. Each step copies only the new frame of that
    one env (consecutive 4-frame stacks share three frames). A clip may span an episode end (its
    `dones` say where), so the synthetic teacher can penalise it (App. A).

    Attributes `n_emitted` and `n_discarded` count clips made and abandoned.
    """

    def __init__(self, n_envs: int, clip_length: int = CLIP_LENGTH) -> None:
        assert n_envs >= 1 and clip_length >= 1
        self.n_envs = n_envs
        self.clip_length = clip_length
        self.n_emitted = 0
        self.n_discarded = 0
        self._env = 0  # the env the current clip comes from
        self._n = 0  # steps in the current clip so far
        self._new_buffers()

    def restart(self) -> None:
        """Drop the clip under way: the next rollout seen does not follow the last one."""
        self._n = 0

    def _new_buffers(self) -> None:
        self._frames = np.empty((self.clip_length + STACK - 1, *FRAME_SHAPE), np.uint8)
        self._actions = np.empty(self.clip_length, np.int64)
        self._rewards = np.empty(self.clip_length, np.float32)
        self._dones = np.zeros(self.clip_length, bool)

    def observe(self, obs: np.ndarray, actions: np.ndarray, true_rewards: np.ndarray,
                dones: np.ndarray) -> list[Clip]:
        """Take one rollout of `T` steps of `N` envs; returns the clips completed in it.

        Args:
            obs: uint8 (T + 1, N, 4, 84, 84); `obs[t]` is what `actions[t]` was taken on and
                `obs[T]` (the next rollout's `obs[0]`) is not used.
            actions: int (T, N).
            true_rewards: float (T, N), the env's own reward (for synthetic labels).
            dones: bool (T, N); `dones[t, i]` means env i was reset after step t, so `obs[t + 1, i]`
                is a new episode's first observation. Pass every real reset here, even when the
                agent itself is not told about episode ends (App. A: one continuous episode).
        """
        obs = np.asarray(obs)
        n_steps = len(actions)
        assert obs.dtype == np.uint8 and obs.shape[1:] == (self.n_envs, STACK, *FRAME_SHAPE), (
            obs.dtype, obs.shape)
        assert len(obs) == n_steps + 1 and np.shape(actions) == np.shape(true_rewards) == np.shape(dones) == (
            n_steps, self.n_envs), (obs.shape, np.shape(actions), np.shape(true_rewards), np.shape(dones))

        done_clips = []
        for t in range(n_steps):
            i, n = self._env, self._n
            if n == 0:
                self._frames[:STACK] = obs[t, i]
            elif self._dones[max(0, n - STACK + 1):n].any() or np.array_equal(
                    obs[t, i, :-1], self._frames[n:n + STACK - 1]):
                # After an episode end the new episode's stack starts afresh; the clip keeps only
                # its newest frame, so the next three stacks show the old episode's last frames
                # where the agent saw the new episode's padding (an approximation for 3 steps).
                self._frames[n + STACK - 1] = obs[t, i, -1]
            else:
                # The stacks stopped overlapping without a reset in `dones` (e.g. an env whose
                # autoreset returns the reset observation one step late): the clip would be
                # garbage, so restart it from this observation.
                warnings.warn("ClipCutter: consecutive observations do not share frames; "
                              "check that `dones` marks every reset", RuntimeWarning, stacklevel=2)
                self.n_discarded += 1
                n = 0
                self._frames[:STACK] = obs[t, i]
            self._actions[n] = actions[t, i]
            self._rewards[n] = true_rewards[t, i]
            # Episode ends are kept so a synthetic teacher can penalise them (App. A).
            self._dones[n] = dones[t, i]
            self._n = n + 1
            if self._n < self.clip_length:
                continue
            done_clips.append(Clip.pack(self._frames, self._actions, self._rewards, self._dones))
            self._new_buffers()
            self.n_emitted += 1
            self._n = 0
            self._env = (i + 1) % self.n_envs
        return done_clips


class EveryEnvCutter:
    """Cuts a clip from each of the `N` envs every `clip_length` steps: N times ClipCutter's rate.

    For gathering the initial labels, where the untrained policy's steps are spent on clips alone:
    500 clips take 12.5k agent steps of 16 envs instead of 200k. Env i's first clip starts
    `i * clip_length // N` steps late, so that the envs' clips arrive spread over the clip length
    rather than all in one step.
    """

    def __init__(self, n_envs: int, clip_length: int = CLIP_LENGTH) -> None:
        self.cutters = [ClipCutter(1, clip_length) for _ in range(n_envs)]
        self._skip = [i * clip_length // n_envs for i in range(n_envs)]

    def restart(self) -> None:
        for cutter in self.cutters:
            cutter.restart()

    @property
    def n_emitted(self) -> int:
        return sum(c.n_emitted for c in self.cutters)

    @property
    def n_discarded(self) -> int:
        return sum(c.n_discarded for c in self.cutters)

    def observe(self, obs: np.ndarray, actions: np.ndarray, true_rewards: np.ndarray,
                dones: np.ndarray) -> list[Clip]:
        """As `ClipCutter.observe`, for every env."""
        done_clips = []
        for i, cutter in enumerate(self.cutters):
            t0 = min(self._skip[i], len(actions))
            self._skip[i] -= t0
            env = slice(i, i + 1)
            done_clips += cutter.observe(obs[t0:, env], actions[t0:, env],
                                         true_rewards[t0:, env], dones[t0:, env])
        return done_clips
