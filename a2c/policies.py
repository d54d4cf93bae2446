"""Actor-critic networks: the Nature-DQN torso for Atari (App. A.2) and a small one for MovingDot."""
from __future__ import annotations

import torch
from torch import nn


POLICY_GAIN, VALUE_GAIN = 0.01, 1.0  # the heads' orthogonal gains; the torso's is sqrt(2)


def _init(layer: nn.Module, gain: float = 2 ** 0.5,
          generator: torch.Generator | None = None) -> nn.Module:
    weight = torch.empty(layer.weight.shape)  # drawn contiguous: the layer may be channels_last
    nn.init.orthogonal_(weight, gain, generator=generator)
    with torch.no_grad():
        layer.weight.copy_(weight)
        layer.bias.zero_()
    return layer


class ActorCritic(nn.Module):
    """A conv torso shared by a softmax policy head and a value head.

    Takes uint8 (B, 4, 84, 84) observations; returns (logits (B, A), value (B,)).
    """

    def __init__(self, torso: nn.Sequential, n_features: int, n_actions: int):
        super().__init__()
        self.torso = torso
        self.policy = _init(nn.Linear(n_features, n_actions), gain=POLICY_GAIN)
        self.value = _init(nn.Linear(n_features, 1), gain=VALUE_GAIN)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # channels_last: oneDNN's convolution backward is faster on CPU in this layout.
        x = obs.float().mul_(1.0 / 255.0).contiguous(memory_format=torch.channels_last)
        h = self.torso(x)
        return self.policy(h), self.value(h).squeeze(-1)


def nature_cnn(n_actions: int) -> ActorCritic:
    """Mnih et al. 2015's network, the paper's policy for Atari (App. A.2)."""
    torso = nn.Sequential(
        _init(nn.Conv2d(4, 32, 8, stride=4)), nn.ReLU(),
        _init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
        _init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),
        nn.Flatten(), _init(nn.Linear(64 * 7 * 7, 512)), nn.ReLU())
    return ActorCritic(torso, 512, n_actions)


def small_cnn(n_actions: int) -> ActorCritic:
    """A lighter pixel network for MovingDot: two convs and a 128-unit layer."""
    torso = nn.Sequential(
        _init(nn.Conv2d(4, 16, 8, stride=4)), nn.ReLU(),
        _init(nn.Conv2d(16, 32, 4, stride=2)), nn.ReLU(),
        nn.Flatten(), _init(nn.Linear(32 * 9 * 9, 128)), nn.ReLU())
    return ActorCritic(torso, 128, n_actions)


def initialise(net: ActorCritic, generator: torch.Generator | None = None) -> None:
    """Fresh weights for every layer of `net`, drawn as the network is made (from `generator`,
    else torch's own random state)."""
    for layer in net.torso:
        if isinstance(layer, (nn.Conv2d, nn.Linear)):
            _init(layer, generator=generator)
    _init(net.policy, POLICY_GAIN, generator)
    _init(net.value, VALUE_GAIN, generator)


def make_policy(env_kind: str, n_actions: int) -> ActorCritic:
    """The policy network for an env kind ('atari' or 'moving_dot'); ValueError for another."""
    makers = {"moving_dot": small_cnn, "atari": nature_cnn}
    if env_kind not in makers:
        raise ValueError(f"no policy network for env kind {env_kind!r}: {', '.join(makers)}")
    net = makers[env_kind](n_actions)
    return net.to(memory_format=torch.channels_last)


def alive_units(net: ActorCritic, obs: torch.Tensor) -> list[float]:
    """Per ReLU layer of the torso, the share of its units (channels of a convolution, neurons of
    the dense layer) positive on at least one of `obs`. A layer at 0 passes nothing on: the
    policy is one fixed distribution whatever it sees, and no gradient reaches below it."""
    outputs = []
    hooks = [m.register_forward_hook(lambda _m, _i, out: outputs.append(out.detach()))
             for m in net.torso if isinstance(m, nn.ReLU)]
    try:
        with torch.no_grad():
            net(obs)
    finally:
        for h in hooks:
            h.remove()
    return [float(((o.flatten(2).amax(-1) if o.dim() == 4 else o) > 0).any(0).float().mean())
            for o in outputs]


def is_dead(alive: list[float]) -> bool:
    """A network with a layer none of whose units fired (`alive_units`) cannot learn again."""
    return min(alive) == 0.0


def alive_and_spread(net: ActorCritic, obs: torch.Tensor, autocast: torch.autocast
                     ) -> tuple[list[float], float, float]:
    """`alive_units` under `autocast` (as the net is trained), then `logit_spread` and the value's
    standard deviation across `obs` in fp32 (bf16 rounds logits of 5-10 to about 0.03)."""
    with autocast:
        alive = alive_units(net, obs)
    with torch.no_grad():
        logits, value = net(obs)
    return alive, logit_spread(logits), float(value.float().std())


def logit_spread(logits: torch.Tensor) -> float:
    """How much a policy's logits (B, A) vary across B observations: each action's standard
    deviation, averaged. Near 0, the policy plays one distribution whatever it sees."""
    return float(logits.float().std(0).mean())
