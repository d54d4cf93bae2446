"""An ensemble of reward predictors, each fit to its own bootstrap resample of the labels."""
from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager
from itertools import islice
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from clips.clip import STACK, Clip, Preference
from reward_predictor.config import BATCH_SIZE, LABEL_NOISE, LEARNING_RATE, MAX_PREFS, REWARD_STD
from reward_predictor.loss import label_losses, preference_loss, rank_loss
from reward_predictor.nets import AtariRewardNet
from reward_predictor.normaliser import RunningNormaliser
from reward_predictor.stacked import StackedAtariNets, weights_version

MAX_FRAMES_PER_FORWARD = 400  # chunk of evaluation passes, which bounds their memory
# Clips of each training batch that a member's normaliser sees in eval mode (see train_step).
NORMALISER_CLIPS = 8
# Frames a normaliser remembers: 1e5 when it sees every frame of a default batch (32 clips of
# 25 steps, i.e. ~125 training steps); scaled down for the eval-mode subset to keep the same
# memory in training steps, so the statistics follow the predictor as fast.
NORMALISER_MEMORY = 1e5
EVAL_NORMALISER_MEMORY = NORMALISER_MEMORY * NORMALISER_CLIPS / (2 * BATCH_SIZE)
# Clips whose features ClipFeatures keeps: all those of the labels the trainer holds, twice over.
FEATURE_CLIPS = 4 * MAX_PREFS


def bootstrap_counts(n_labels: int, ensemble_size: int, rng: np.random.Generator) -> np.ndarray:
    """How often each member sees each new label: int (n_labels, ensemble_size).

    Online bootstrap (Sec. 2.2.3: "each trained on |D| triples sampled from D with replacement"):
    Poisson(1) counts approximate a resample with replacement as labels keep arriving. A single
    predictor uses every label once.
    """
    if ensemble_size == 1:
        return np.ones((n_labels, 1), dtype=np.int64)
    return rng.poisson(1.0, size=(n_labels, ensemble_size)).astype(np.int64)


def _batchnorms(net: nn.Module) -> list[nn.modules.batchnorm._BatchNorm]:
    return [m for m in net.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def _modes_differ(net: nn.Module) -> bool:
    """Whether `net` computes something else in training mode (dropout or batch norm)."""
    return getattr(net, "dropout", 0.0) > 0.0 or bool(_batchnorms(net))


def _device_of(net: nn.Module) -> torch.device:
    return next(net.parameters()).device


def clips_to_batch(clips: Sequence[Clip], device: torch.device | str = "cpu"
                      ) -> list[tuple[np.ndarray, torch.Tensor, torch.Tensor]]:
    """Group clips by length into network inputs on `device`.

    Returns a list of (indices into `clips`, obs uint8 (N, T, 4, 84, 84), actions int64 (N, T)).
    `obs` is a strided view of the stacked (N, T + 3, 84, 84) frames: the overlapping windows are
    never copied as uint8 (nor sent to a GPU twice); the net's float conversion is the only
    full-size copy.
    """
    groups = []
    for idx in _by_length(clips):
        frames = torch.from_numpy(np.stack([clips[i].frames() for i in idx])).to(device)
        obs = frames.unfold(1, STACK, 1).permute(0, 1, 4, 2, 3)  # (N, T, 4, 84, 84) view
        groups.append((idx, obs, _actions(clips, idx, device)))
    return groups


def _by_length(clips: Sequence[Clip]) -> list[np.ndarray]:
    """Indices into `clips`, one array per clip length."""
    by_length: dict[int, list[int]] = defaultdict(list)
    for i, clip in enumerate(clips):
        by_length[len(clip)].append(i)
    return [np.asarray(idx) for idx in by_length.values()]


def _actions(clips: Sequence[Clip], idx: np.ndarray, device: torch.device | str) -> torch.Tensor:
    return torch.from_numpy(np.stack([clips[i].actions for i in idx])).to(device)


class ClipFeatures:
    """The parameter-free first stage of the members' net (`net.features`: MovingDot's dot
    position) for each clip, computed once and kept. Otherwise it is most of a training step, as
    every member sees each clip in many batches. One for all members; the least recently used
    clips go first beyond `max_clips`."""

    def __init__(self, max_clips: int = FEATURE_CLIPS) -> None:
        self.max_clips = max_clips
        self._held: dict[bytes, torch.Tensor] = {}  # clip key -> float32 (T, F) on the CPU

    def __len__(self) -> int:
        return len(self._held)

    def to_batch(self, net: nn.Module, clips: Sequence[Clip], device: torch.device
                 ) -> list[tuple[np.ndarray, torch.Tensor, torch.Tensor]]:
        """As `clips_to_batch`, with the clips' features (N, T, F) in place of their frames."""
        keys = [clip.key for clip in clips]
        held = {key: self._held.pop(key) for key in keys if key in self._held}
        new = {key: clip for key, clip in zip(keys, clips) if key not in held}  # each once
        new_keys = list(new)
        with torch.no_grad():
            for idx, obs, _ in clips_to_batch(list(new.values()), device):
                for i, features in zip(idx, net.features(obs).float().cpu()):
                    held[new_keys[i]] = features
        self._held.update(held)  # these clips now the most recently used
        for key in list(islice(self._held, max(0, len(self._held) - self.max_clips))):
            del self._held[key]
        return [(idx, torch.stack([held[keys[i]] for i in idx]).to(device),
                 _actions(clips, idx, device)) for idx in _by_length(clips)]


def clip_returns(net: nn.Module, clips: Sequence[Clip], features: ClipFeatures | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Run `net` over every step of `clips` (one forward pass when all have the same length),
    from the clips' kept features and `net.head` when `features` is given.

    Returns (summed raw reward of each clip (N,), raw reward of every step (sum of T,)), both
    on the net's device.
    """
    device = _device_of(net)
    if features is None:
        groups, forward = clips_to_batch(clips, device), net
    else:
        groups, forward = features.to_batch(net, clips, device), net.head
    if len(groups) == 1:
        _, x, actions = groups[0]
        raw = forward(x, actions)  # (N, T)
        return raw.float().sum(1), raw.reshape(-1)  # summed in fp32 also under bf16 autocast
    returns = torch.zeros(len(clips), device=device)
    raws = []
    for idx, x, actions in groups:
        raw = forward(x, actions)
        returns = returns.index_add(0, torch.from_numpy(idx).to(device), raw.sum(1).float())
        raws.append(raw.reshape(-1))
    return returns, torch.cat(raws)


@contextmanager
def eval_mode(net: nn.Module) -> Iterator[None]:
    """`net` in eval mode (dropout off, batch norm on its running statistics) for the block; its
    mode is put back afterwards, also when the block raises."""
    was_training = net.training
    net.eval()
    try:
        yield
    finally:
        net.train(was_training)


@torch.no_grad()
def take_batchnorm_statistics(net: nn.Module, clips: Sequence[Clip],
                              features: ClipFeatures | None = None) -> torch.Tensor:
    """Set `net`'s batch-norm running statistics to those of a dropout-free pass over `clips`
    (what the trainer does before the agent gets new weights, and what mends an older checkpoint).

    Returns that pass's raw reward for every step as the eval-mode net now gives it: one pass over
    the clips serves both. A net without batch norm is only evaluated (from `features`, as
    `clip_returns`). `net`'s mode is kept.
    """
    with eval_mode(net):  # dropout off
        if not _batchnorms(net):
            return clip_returns(net, clips, features)[1]
        groups = clips_to_batch(clips, _device_of(net))
        obs = torch.cat([o.reshape(-1, *o.shape[-3:]) for _, o, _ in groups])
        actions = torch.cat([a.reshape(-1) for _, _, a in groups])
        return net(obs, actions, take_statistics=True)


class RewardPredictorEnsemble(nn.Module):
    """`ensemble_size` reward nets, each with its own running normaliser, Adam optimiser and L2
    coefficient. The reward given to the agent is the mean of the members' normalised outputs
    (App. A.2: each member is normalised on its own, then the members are averaged)."""

    def __init__(self, make_net: Callable[[], nn.Module], ensemble_size: int = 3,
                 lr: float = LEARNING_RATE, l2: float = 0.0, noise: float = LABEL_NOISE,
                 reward_std: float = REWARD_STD) -> None:
        super().__init__()
        assert ensemble_size >= 1, ensemble_size
        self.members = nn.ModuleList(make_net() for _ in range(ensemble_size))
        # Members whose training-mode outputs differ from what the agent gets (see train_step).
        self._eval_normalised = [_modes_differ(net) for net in self.members]
        self.normalisers = nn.ModuleList(
            RunningNormaliser(reward_std, EVAL_NORMALISER_MEMORY if differ else NORMALISER_MEMORY)
            for differ in self._eval_normalised)
        self.lr = lr
        self._optimizers: list[torch.optim.Optimizer] | None = None  # made at first use
        self.l2 = [float(l2)] * ensemble_size  # per member: adaptive L2 adjusts each one separately
        self.noise = noise
        self.bf16 = False  # set by the owner (see `_autocast`)
        self._stacked: tuple[tuple[int, ...], StackedAtariNets] | None = None  # (version, net)
        # Members with a parameter-free first stage (MovingDot's) run from each clip's kept result.
        self.clip_features = ClipFeatures() if hasattr(self.members[0], "features") else None

    @property
    def ensemble_size(self) -> int:
        return len(self.members)

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        """One Adam per member, made at first use: an ensemble that only predicts (A2C's r̂, a
        frozen reward, a checkpoint check) never imports what Adam imports (torch._dynamo, slow
        to import)."""
        if self._optimizers is None:
            self._optimizers = [torch.optim.Adam(m.parameters(), lr=self.lr) for m in self.members]
        return self._optimizers

    @property
    def device(self) -> torch.device:
        """Where the members' weights live (all members share it: move the ensemble with `.to`,
        before its optimisers get any state)."""
        return _device_of(self.members[0])

    def reward(self, obs: np.ndarray | torch.Tensor, actions: np.ndarray | torch.Tensor) -> np.ndarray:
        """Predicted reward for obs uint8 (B, 4, 84, 84) and actions int64 (B,): float32 (B,),
        the mean of the members' normalised predictions (App. A.2)."""
        return self.member_rewards(obs, actions).mean(axis=0)

    @torch.no_grad()
    def member_rewards(self, obs: np.ndarray | torch.Tensor,
                       actions: np.ndarray | torch.Tensor) -> np.ndarray:
        """Each member's normalised prediction for obs uint8 (B, 4, 84, 84) and actions int64
        (B,): float32 (ensemble_size, B)."""
        obs = torch.as_tensor(obs, device=self.device)
        actions = torch.as_tensor(actions, device=self.device)
        assert obs.dtype == torch.uint8 and obs.shape[-3:] == (STACK, 84, 84), (obs.dtype, obs.shape)
        with eval_mode(self):
            stacked = self._stacked_members()
            chunks = list(zip(obs.split(MAX_FRAMES_PER_FORWARD),
                              actions.split(MAX_FRAMES_PER_FORWARD)))
            with self._autocast():
                if stacked is not None:  # all members in one pass
                    raws = torch.cat([stacked(o) for o, _ in chunks], dim=1).float()
                else:
                    raws = [torch.cat([net(o, a) for o, a in chunks]).float()
                            for net in self.members]
            each = torch.stack([norm(raw) for norm, raw in zip(self.normalisers, raws)])
        return each.cpu().numpy().astype(np.float32)

    def _stacked_members(self) -> StackedAtariNets | None:
        """The members as one eval-mode net (Atari members only), rebuilt when weights change."""
        if not all(isinstance(net, AtariRewardNet) for net in self.members):
            return None
        version = weights_version(self.members)
        if self._stacked is None or self._stacked[0] != version:
            self._stacked = (version, StackedAtariNets(self.members))
        return self._stacked[1]

    def _autocast(self):
        """bfloat16 autocast for the nets' forward (and so backward) passes when `bf16` is set:
        faster on CPUs with native bf16 (docs/results.md); weights, loss and normalisers stay
        fp32."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16)

    def _weight_penalty(self, net: nn.Module) -> torch.Tensor:
        """Sum of squared weights of conv and linear layers (biases and batch-norm gains excluded)."""
        return sum(p.pow(2).sum() for p in net.parameters() if p.ndim > 1)

    def train_step(self, batch_per_member: Sequence[Sequence[Preference]],
                   ranked_per_member: Sequence[tuple[Sequence[Clip], np.ndarray]] | None = None,
                   preference_weight: float = 1.0) -> dict:
        """One Adam step per member on its own batch of labels.

        With `ranked_per_member` (sorted clips and their rank targets, `loss.rank_targets`) each
        member's loss also holds the rank regression of those clips' summed rewards, and the
        preference term is weighted by `preference_weight` (0: the rank loss instead).

        Loss = preference cross-entropy on the members' raw summed rewards + l2 * sum of squared
        weights. The agent gets each member in eval mode (no dropout, batch norm by its running
        statistics), so after each step `_agent_view` makes that net match the new weights, on
        NORMALISER_CLIPS of the batch's clips:
        - batch norm's running statistics are replaced by those of a dropout-free pass with the new
          weights. The usual running average over past training batches lags the weights, and on
          Pong the eval-mode net is very sensitive to that lag (first-layer channels that see
          mostly background have tiny variance; docs/experiments.md, "Batch norm statistics that
          lagged the weights").
        - the member's normaliser is fed that net's outputs. Dropout makes training-mode outputs
          several times more spread out (on Pong, with the paper's dropout of 0.5), and
          normalising by that spread would shrink the agent's reward far below the intended std.
        Returns mean `loss` (preference term only, comparable with validation), `accuracy`,
        `l2_penalty`, and the per-member lists `member_loss`, `member_accuracy`.
        """
        assert len(batch_per_member) == self.ensemble_size, (len(batch_per_member), self.ensemble_size)
        self.train()
        losses, accs, penalties, rank_losses = [], [], [], []
        for m, prefs in enumerate(batch_per_member):
            net, norm, opt = self.members[m], self.normalisers[m], self.optimizers[m]
            b = len(prefs)
            ranked, targets = ranked_per_member[m] if ranked_per_member else ([], None)
            clips = [p.left for p in prefs] + [p.right for p in prefs] + list(ranked)
            mu = torch.tensor([p.mu for p in prefs], dtype=torch.float32, device=self.device)
            with self._autocast():
                # one pass over all 2B (+ ranked) clips
                returns, raw = clip_returns(net, clips, self.clip_features)
            returns, raw = returns.float(), raw.float()
            loss, acc = preference_loss(returns[:b], returns[b:2 * b], mu, self.noise)
            total = preference_weight * loss
            if len(ranked):
                ranked_loss = rank_loss(returns[2 * b:], torch.from_numpy(targets).to(self.device))
                total = total + ranked_loss
                rank_losses.append(float(ranked_loss.detach()))
            if self.l2[m] > 0.0:
                penalty = self._weight_penalty(net)
                total = total + self.l2[m] * penalty
            else:
                with torch.no_grad():
                    penalty = self._weight_penalty(net)  # still reported
            opt.zero_grad(set_to_none=True)
            total.backward()
            opt.step()
            norm.update(self._agent_view(net, clips[:NORMALISER_CLIPS])
                        if self._eval_normalised[m] else raw.detach())
            losses.append(float(loss.detach()))
            accs.append(acc)
            penalties.append(float(penalty.detach()))
        out = {"loss": float(np.mean(losses)), "accuracy": _nanmean(accs),
               "l2_penalty": float(np.mean(penalties)),
               "member_loss": losses, "member_accuracy": accs}
        if rank_losses:
            out["rank_loss"] = float(np.mean(rank_losses))
        return out

    @torch.no_grad()
    def _agent_view(self, net: nn.Module, clips: Sequence[Clip]) -> torch.Tensor:
        """Raw per-step predictions of `net` in eval mode, as the agent's reward function sees them,
        once its batch-norm layers hold these clips' dropout-free statistics (see train_step)."""
        with self._autocast():
            return take_batchnorm_statistics(net, clips, self.clip_features).float()

    @torch.no_grad()
    def member_returns(self, clips: Sequence[Clip]) -> torch.Tensor:
        """Raw summed reward of each clip under each member, eval mode: (ensemble_size, N) on the
        CPU. Computed as the agent's reward is: all members in one pass where they stack, in
        bf16 when the ensemble trains in it."""
        out = torch.empty(self.ensemble_size, len(clips))
        longest = max((len(s) for s in clips), default=1)
        per_chunk = max(1, MAX_FRAMES_PER_FORWARD // max(1, longest))
        with eval_mode(self):
            stacked = self._stacked_members()
            with self._autocast():
                for start in range(0, len(clips), per_chunk):
                    chunk = clips[start:start + per_chunk]
                    if stacked is None:
                        for m, net in enumerate(self.members):
                            raw, _ = clip_returns(net, chunk, self.clip_features)
                            out[m, start:start + len(chunk)] = raw.float().cpu()
                        continue
                    for idx, obs, _ in clips_to_batch(chunk, self.device):
                        # (M, N, T): each member's reward of each clip's steps
                        raw = stacked(obs).float().view(self.ensemble_size, *obs.shape[:2])
                        out[:, torch.from_numpy(start + idx)] = raw.sum(-1).cpu()
        return out

    @torch.no_grad()
    def evaluate(self, prefs: Sequence[Preference], weights: np.ndarray | None = None) -> dict:
        """Scores on `prefs` in eval mode.

        `loss` is the mean over members of each member's loss as it is trained (raw returns,
        noisy Bradley-Terry), so it is comparable with the training loss as adaptive L2 requires.
        `accuracy` is that of the reward the agent is given: the mean of the members' normalised
        returns. Per-member figures are in `member_loss` and `member_accuracy`.

        `true_return_correlation` is the Pearson correlation between the members' mean raw return
        and the true return of every clip (known for synthetic labels; NaN where either is
        constant): a sanity check, not a training signal.

        With `weights` (B, ensemble_size), e.g. bootstrap counts, `member_weighted_loss` is each
        member's weighted mean loss (its plain mean where its weights sum to 0).
        """
        nan = float("nan")
        if not prefs:
            out = {"loss": nan, "accuracy": nan, "member_loss": [nan] * self.ensemble_size,
                   "member_accuracy": [nan] * self.ensemble_size, "true_return_correlation": nan}
            if weights is not None:
                out["member_weighted_loss"] = [nan] * self.ensemble_size
            return out
        b = len(prefs)
        clips = [p.left for p in prefs] + [p.right for p in prefs]
        returns = self.member_returns(clips)  # (M, 2B) raw
        mu = torch.tensor([p.mu for p in prefs], dtype=torch.float32)
        losses, accs = [], []
        for m in range(self.ensemble_size):
            loss, acc = preference_loss(returns[m, :b], returns[m, b:], mu, self.noise)
            losses.append(float(loss))
            accs.append(acc)
        # A normaliser is affine, so a clip's normalised return is T * normalise(R / T).
        lengths = torch.tensor([float(len(clip)) for clip in clips])
        normalised = torch.stack([norm((returns[m] / lengths).to(self.device)).cpu() * lengths
                                  for m, norm in enumerate(self.normalisers)]).mean(0)
        _, ensemble_acc = preference_loss(normalised[:b], normalised[b:], mu, self.noise)
        out = {"loss": float(np.mean(losses)), "accuracy": ensemble_acc,
               "member_loss": losses, "member_accuracy": accs,
               "true_return_correlation": _correlation(
                   returns.mean(0).numpy(), np.array([clip.true_return for clip in clips]))}
        if weights is not None:
            weights = np.asarray(weights, dtype=np.float64)
            assert weights.shape == (b, self.ensemble_size), (weights.shape, b, self.ensemble_size)
            weighted = []
            for m in range(self.ensemble_size):
                per_label = label_losses(returns[m, :b] - returns[m, b:], mu,
                                         self.noise).double().numpy()
                w = weights[:, m]
                weighted.append(float((w * per_label).sum() / w.sum()) if w.sum() > 0
                                else float(per_label.mean()))
            out["member_weighted_loss"] = weighted
        return out

    @torch.no_grad()
    def predict_preference(self, left_clips: Sequence[Clip], right_clips: Sequence[Clip]
                           ) -> np.ndarray:
        """P[left preferred] under each member's plain Bradley-Terry model: float32 (ensemble_size, B).
        Its variance across members is the disagreement used to pick queries (Sec. 2.2.4)."""
        assert len(left_clips) == len(right_clips), (len(left_clips), len(right_clips))
        b = len(left_clips)
        returns = self.member_returns(list(left_clips) + list(right_clips))
        return torch.sigmoid(returns[:, :b] - returns[:, b:]).numpy().astype(np.float32)


def _correlation(x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 3 or x.std() == 0 or y.std() == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def _nanmean(values: Sequence[float]) -> float:
    arr = np.asarray(values, dtype=np.float64)
    return float(arr[~np.isnan(arr)].mean()) if (~np.isnan(arr)).any() else float("nan")
