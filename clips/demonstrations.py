"""Demonstrations: clips of someone else's play, labelled beside the agent's.

Clips of a person's or a scripted driver's own play, cut as the agent's are (25 steps), can join
the pool labelling draws its pairs from (`--demonstrations FILE`). The labeller compares them with
the agent's clips like any others, so r̂ can learn what the behaviour looks like before the policy
first shows it. Ibarz et al. (2018) combine demonstrations with preferences; there a demonstration
is taken to beat the agent's clip, here it is labelled as any pair is.

`demonstrate.py` records a person's play into such a file, `experiments.record_demonstrations`
a scripted driver's. A file holds one game's clips as a compressed NumPy archive: `frames` uint8
(N, T + 3, 84, 84), `actions` int64 (N, T), `true_rewards` float32 (N, T), `dones` bool (N, T)
and `env_id`.
"""
from __future__ import annotations

import zipfile
from collections import deque
from pathlib import Path
from typing import Sequence

import numpy as np

from clips.clip import CLIP_LENGTH, FRAME_SHAPE, STACK, Clip, Preference
from runtime.outputs import written_whole

DEMONSTRATION_SIDES = ("left", "right", "both")  # which clips of a label are demonstrations
RECENT_LABELS = 100  # labels the TensorBoard share of demonstrations preferred is taken over
KEYS = ("frames", "actions", "true_rewards", "dones", "env_id")


class DemonstrationsError(ValueError):
    """A demonstrations file that cannot be used; its message is one line naming the file."""


def save_demonstrations(path: str | Path, env_id: str, clips: Sequence[Clip]) -> None:
    """Write `clips` of one game (all of one length) to `path`."""
    if not clips or len({len(c) for c in clips}) != 1:
        raise DemonstrationsError(f"{path}: needs clips, all of one length")
    # put in place whole: a recording stopped mid-write leaves none
    with written_whole(path) as tmp, open(tmp, "wb") as f:  # savez adds ".npz" to a bare name
        np.savez_compressed(
            f, frames=np.stack([c.frames() for c in clips]),
            actions=np.stack([c.actions for c in clips]).astype(np.int64),
            true_rewards=np.stack([c.true_rewards for c in clips]).astype(np.float32),
            dones=np.stack([np.zeros(len(c), bool) if c.dones is None else c.dones
                            for c in clips]),
            env_id=np.array(env_id))


def load_demonstrations(path: str | Path, env_id: str | None = None) -> list[Clip]:
    """The clips in `path`; with `env_id`, they must be of that game. Raises DemonstrationsError."""
    try:
        loaded = np.load(Path(path).expanduser(), allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):  # one array (.npy), not an archive
            raise ValueError(path)
        with loaded as f:
            missing = [k for k in KEYS if k not in f.files]
            data = {k: f[k] for k in KEYS if k in f.files}
    except zipfile.BadZipFile:  # e.g. a file cut short while it was written
        raise DemonstrationsError(f"{path} is damaged (not a whole NumPy archive)") from None
    except OSError as e:
        raise DemonstrationsError(f"{path}: {e.strerror or e}") from None
    except (ValueError, EOFError):
        raise DemonstrationsError(f"{path} is not a demonstrations file (not a NumPy archive "
                                  "of arrays)") from None
    if missing:
        raise DemonstrationsError(f"{path} is not a demonstrations file (no {', '.join(missing)})")
    frames, actions = data["frames"], data["actions"]
    n, t = actions.shape if actions.ndim == 2 else (0, 0)
    if (n == 0 or frames.dtype != np.uint8 or frames.shape != (n, t + STACK - 1, *FRAME_SHAPE)
            or data["true_rewards"].shape != (n, t) or data["dones"].shape != (n, t)):
        raise DemonstrationsError(f"{path}: clips of uint8 frames (N, T + {STACK - 1}, "
                                  f"{FRAME_SHAPE[0]}, {FRAME_SHAPE[1]}) and (N, T) steps expected, "
                                  f"got frames {frames.shape} and actions {actions.shape}")
    from envs import action_names, same_game

    if t != CLIP_LENGTH:  # stacked with the agent's clips to train the predictor
        raise DemonstrationsError(f"{path}: clips of {t} steps; a run's clips are "
                                  f"{CLIP_LENGTH} steps long")
    if env_id is not None and not same_game(str(data["env_id"]), env_id):
        raise DemonstrationsError(f"{path} holds clips of {data['env_id']}, not {env_id}")
    if not np.all(np.isfinite(data["true_rewards"])):
        raise DemonstrationsError(f"{path}: a reward is not a finite number")
    if env_id is not None:  # an action the policy does not have would fail the run's training
        n_actions = len(action_names(env_id))
        if not np.issubdtype(actions.dtype, np.integer) or actions.min() < 0 \
                or actions.max() >= n_actions:
            raise DemonstrationsError(f"{path}: actions must be whole numbers in [0, "
                                      f"{n_actions - 1}] ({env_id} has {n_actions}), got "
                                      f"{actions.min()} to {actions.max()}")
    return [Clip.pack(frames[i], actions[i].astype(np.int64),
                      data["true_rewards"][i].astype(np.float32), data["dones"][i].astype(bool))
            for i in range(n)]


class DemonstrationMix:
    """Which demonstration clips join the pool, and when: beside the agent's clips, so that
    `share` of the clips that arrive are demonstrations, each taken in a shuffled order and the
    order shuffled again once all were taken. Each demonstration belongs to the validation split
    with probability `val_fraction`, drawn once, as the agent's clips do. It also follows how
    often the labels that compare a demonstration with the agent's clip prefer the
    demonstration."""

    def __init__(self, clips: Sequence[Clip], share: float, val_fraction: float,
                 rng: np.random.Generator) -> None:
        assert clips and 0.0 < share < 1.0, (len(clips), share)
        self.clips, self.rng = list(clips), rng
        self.is_validation = (rng.random(len(self.clips)) < val_fraction).tolist()
        self.keys = {c.key for c in self.clips}
        self.per_agent_clip = share / (1.0 - share)
        self._owed = 0.0
        self._order: list[int] = []
        self.n_labels = 0  # labels comparing a demonstration with the agent's clip
        self.recent: deque[float] = deque(maxlen=RECENT_LABELS)  # their preference for it

    def after(self, n_agent_clips: int) -> list[tuple[Clip, bool]]:
        """The demonstrations to add beside `n_agent_clips` newly arrived clips of the agent,
        each with its split (True: validation)."""
        self._owed += n_agent_clips * self.per_agent_clip
        due, self._owed = int(self._owed), self._owed - int(self._owed)
        taken = []
        for _ in range(due):
            if not self._order:
                self._order = self.rng.permutation(len(self.clips)).tolist()
            i = self._order.pop()
            taken.append((self.clips[i], self.is_validation[i]))
        return taken

    def sides(self, pref: Preference) -> str | None:
        """Which of the label's clips are demonstrations (a DEMONSTRATION_SIDES name), or None."""
        left, right = pref.left.key in self.keys, pref.right.key in self.keys
        return ("both" if right else "left") if left else ("right" if right else None)

    def labelled(self, pref: Preference) -> None:
        """Take a stored label into account if it compares a demonstration with the agent's clip."""
        side = self.sides(pref)
        if side in ("left", "right"):
            self.n_labels += 1
            self.recent.append(pref.mu if side == "left" else 1.0 - pref.mu)

    def scalars(self) -> dict[str, float]:
        """TensorBoard's: such labels so far, and their mean preference for the demonstration
        over the latest RECENT_LABELS (near 1 while the agent is far from the demonstrations)."""
        out = {"demonstrations/labels": float(self.n_labels)}
        if self.recent:
            out["demonstrations/preferred"] = float(np.mean(self.recent))
        return out
