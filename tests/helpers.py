"""Small builders shared by tests."""
import numpy as np

from pref_interface.segment import STACK, Segment


class NonBlockingOnly:
    """A queue on which a blocking `put` fails the test: what "never blocks the agent" means for
    a sender, checked without timing it. Everything else is the wrapped queue's."""

    def __init__(self, q) -> None:
        self._q = q

    def put(self, *args, **kwargs):
        raise AssertionError("the sender made a blocking put")

    def __getattr__(self, name: str):
        return getattr(self._q, name)


def segment_from_stacks(stacks: np.ndarray, actions, true_rewards, dones=None) -> Segment:
    """A segment from consecutive uint8 (T, 4, 84, 84) observations."""
    assert stacks.ndim == 4 and stacks.shape[1] == STACK, stacks.shape
    frames = np.concatenate([stacks[0, :-1], stacks[:, -1]], axis=0)
    return Segment(np.ascontiguousarray(frames, dtype=np.uint8),
                   np.asarray(actions, dtype=np.int64), np.asarray(true_rewards, dtype=np.float32),
                   None if dones is None else np.asarray(dones, dtype=bool))
