"""The reward predictor's settings, their paper defaults and the counters its processes share,
importable without torch (the supervising process builds them)."""
from __future__ import annotations

from dataclasses import dataclass
from multiprocessing.context import BaseContext
from typing import Any

LEARNING_RATE = 2e-4  # Adam's rate, the TensorFlow reproduction's (Ibarz et al. 2018: 3e-4)
MAX_PREFS = 3000  # App. A: "only the last 3,000 labels" are kept
BATCH_SIZE = 16  # Ibarz et al. 2018: batches of 16 clip pairs
# The predictor's loss: the paper's on labels, rank regression on sorted clips instead, or both.
LOSSES = ("preference", "rank", "both")
# What a pace of labels per agent step counts: each member's labels, or all members' together.
PACE_UNITS = ("member", "ensemble")
VAL_MAX_PAIRS = 256  # labels scored per validation pass (a random subset beyond this)
REWARD_STD = 0.05  # App. A.2: predicted rewards rescaled to mean 0 and std 0.05 (Atari)
LABEL_NOISE = 0.1  # Sec. 2.2.3: assume a 10% chance that the human answers uniformly at random


@dataclass
class TrainerConfig:
    """Settings of the reward-predictor trainer process."""

    env_kind: str = "atari"  # reward net: "atari" or "moving_dot"
    ensemble_size: int = 3  # App. A: an ensemble of 3 predictors
    dropout: float = 0.0  # dropout on the conv layers (App. A.2 uses 0.5)
    batchnorm: bool = False  # batch norm on the conv layers (App. A.2)
    lr: float = LEARNING_RATE  # Adam learning rate
    max_prefs: int = MAX_PREFS  # labels kept, oldest dropped first (App. A: 3,000)
    batch_size: int = BATCH_SIZE  # clip pairs per member per step
    ckpt_interval: int = 500  # train steps between checkpoints (0: only on exit)
    ckpt_path: str | None = None  # where checkpoints are written (None: never)
    load_ckpt_path: str | None = None  # checkpoint to start from (None: fresh weights)
    torch_threads: int = 1  # torch intra-op threads of this process
    seed: int = 0  # seeds weight init, bootstrap counts and minibatch sampling
    publish_every_steps: int = 10  # publish weights after this many steps ...
    publish_every_s: float = 1.0  # ... or this many seconds, whichever comes first
    validate_every_steps: int = 50  # steps between validation passes (adaptive L2 follows them)
    val_max_pairs: int = VAL_MAX_PAIRS  # labels scored per validation pass
    reward_std: float = REWARD_STD
    label_noise: float = LABEL_NOISE  # 0: plain Bradley-Terry
    adaptive_l2: bool = True  # App. A: keep validation loss at 1.1-1.5x training loss
    implied_pairs: bool = False  # --queries sort: also train on pairs the sorted order implies
    # --queries sort: "rank" regresses sorted clips' returns on their rank instead of the paper's
    # loss on labels (once an order exists), "both" adds it to the paper's
    loss: str = "preference"
    duty: float = 0.5  # fraction of the time spent training; the rest is left to A2C
    # a ceiling on each member's labels per agent step: the trainer rests while ahead (0: none)
    max_labels_per_step: float = 0.0
    # True: the training processes serve all memory from a heap they never trim, faster steps
    # for more memory held (docs/results.md, "Memory"). False: glibc tunables
    # (runtime/process_setup.py).
    keep_freed_memory: bool = False
    # torch threads while A2C is idle: waiting for it, or not yet running (pretraining).
    # 0: torch_threads
    threads_while_agent_idle: int = 0
    # "bf16": bfloat16 autocast in the nets; "auto": where the device has it natively
    precision: str = "fp32"
    initial_prefs_path: str | None = None  # a preference store whose latest labels start the buffer
    left_out: tuple[str, ...] = ()  # labellers whose labels are not trained on (kept in the store)
    pretrain_epochs: int = 0  # run_pretraining's passes over those labels
    device: str = "cpu"  # where the trainer trains ("cuda": a GPU); consumers always use the CPU


VAL_TIES_ONLY = -1.0  # TrainerStats.val_accuracy while every validation label scored is a tie


@dataclass
class TrainerStats:
    """Counters the trainer process shares with the rest of the run."""

    labels_received: Any  # mp.Value('i')
    val_accuracy: Any  # mp.Value('d'), NaN until the first validation; VAL_TIES_ONLY
    epoch: Any  # mp.Value('i'): pretraining epochs done

    @staticmethod
    def create(ctx: BaseContext) -> "TrainerStats":
        return TrainerStats(ctx.Value("i", 0), ctx.Value("d", float("nan")), ctx.Value("i", 0))

    def val_accuracy_text(self) -> str:
        """`val acc 80%`, `val acc -` before the first validation, and `val acc - (ties only)`
        while every validation label scored is a tie (an accuracy counts the labels that prefer
        a clip)."""
        value = self.val_accuracy.value
        if value == VAL_TIES_ONLY:
            return "val acc - (ties only)"
        return "val acc " + ("-" if value != value else f"{value:.0%}")
