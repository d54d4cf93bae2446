"""Settings of the labelling process (torch-free, like a2c/config.py and
reward_predictor/config.py)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pref_interface.queries.pairs import OVERSAMPLE
from pref_interface.queries.schedule import ANNEAL_EVERY_FRAMES


@dataclass
class LabellingConfig:
    """Settings of the labelling process."""

    max_clips: int = 1000
    """Most recent clips kept to draw pairs from."""
    max_pairs_per_clip: int | None = 2
    """Each clip is offered in at most this many pairs (ClipBuffer); labelling waits for new
    clips when every clip has had its share. None: no limit."""
    synthetic: bool = False
    """Label with the true-reward oracle (§3.1); False means a person labels
    (pref_interface.labellers.human)."""
    clip_player: str = "terminal"
    """Human labelling: where the clips play, "window", "terminal" (pref_interface.labellers.player) or
    "web" (the labelling page, pref_interface.labellers.web)."""
    page_updates: Any = None
    """With "web": the queue to the labelling page in the main process."""
    labellers: tuple[str, ...] = ()
    """Several people, each on their own labelling page (pref_interface.labellers.team); empty:
    one person, or a teacher."""
    overlap: float = 0.0
    """With `labellers`: the share of pairs shown to two people (their agreement is measured)."""
    keep_typed_ahead: bool = False
    """Human labelling: let keys typed before a pair appeared answer it (answers piped in from a
    file). False drops them, so a double key press never labels a pair nobody has seen."""
    val_fraction: float = 1 / math.e
    """Probability that a new clip goes to the validation split (ClipBuffer); pairs are drawn
    within a split, so about this share of labels is validation and none shares a clip with a
    training label. App. A holds out 1/e of the data as validation for the adaptive L2
    (validation loss kept at 1.1-1.5x training loss); the split is stored with each label and
    survives restarts. A trainer that validates on bootstrap out-of-bag labels instead can set 0."""
    demonstrations: str | None = None
    """A file of clips of someone else's play (clips/demonstrations.py) that join the pool pairs
    are drawn from and are labelled like the agent's; None: the agent's clips only."""
    demonstration_share: float = 0.2
    """With `demonstrations`: the share of the clips joining the pool that are demonstrations
    (at 0.2, about a third of random pairs compare one with the agent's clip)."""
    max_in_flight: int = 4
    """Labels sent on `preferences` but not yet taken by the trainer; synthetic labelling pauses at
    this many so labels are made as fast as the trainer uses them and no faster. Without a
    trainer (no `preferences`: gathering) labels are made as fast as clips allow."""
    stop_after_labels: int | None = None
    """Return once the store holds this many labels (gather_initial_prefs: App. A, 500)."""
    seed: int | None = None
    """Seeds pair choice, the validation split and noisy teachers."""
    teacher: str = "oracle"
    """Synthetic labelling: a `make_teacher` spec, e.g. "oracle", "mistake:eps=0.1"."""
    episode_end_penalty: float = 0.0
    """Synthetic labelling: subtracted from a clip's return per episode end in it (App. A: the
    oracle penalises episode ends, except in Pong)."""
    queries: str = "pairs"
    """"pairs": each query a fresh pair of clips; "sort": each new clip is placed among the
    clips already sorted by a binary search of comparisons (pref_interface/queries/sorting.py)."""
    query_selection: str = "random"
    """Query selection: "random", "disagreement" (App. A: highest ensemble variance), "entropy"
    (B-Pref: most uncertain mean preference) or "k_center" (B-Pref: least like those shown)."""
    oversampling: int = OVERSAMPLE
    """A scored selection draws this many times more candidate pairs than it shows."""
    label_schedule: str = "none"
    """"none" (as fast as the trainer uses them), "constant" or "annealed" (App. A: rate
    proportional to 5e6 / (T + 5e6), T frames so far), spending `max_labels` over the run."""
    max_labels: int = 3300
    """Label budget of the run for a schedule (the paper's Atari runs: up to 5,500; 3,300 typical)."""
    total_frames: int = 0
    """Frames the run will see (agent steps x 4), for a schedule."""
    anneal_every_frames: int = ANNEAL_EVERY_FRAMES
    """Annealed schedule: frames per block of constant rate (App. A: 5e6 for Atari)."""
    initial_labels: int = 0
    """Labels given before policy training (App. A: 500), counted in a schedule's budget."""
