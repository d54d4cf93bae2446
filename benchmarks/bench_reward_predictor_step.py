"""Time one reward-predictor train step: the paper's Atari net (dropout 0.5, batch norm, App. A.2)
on a batch of 16 pairs x 25 steps (800 observations forward and backward), one member.

    .venv/bin/python benchmarks/bench_reward_predictor_step.py [--steps 10] [--threads 1 2]
    .venv/bin/python benchmarks/bench_reward_predictor_step.py --device cuda   # on a GPU

Each thread count is timed in fp32 and with bfloat16 autocast (what `--precision auto` uses on
CPUs with native bf16). `--device cuda` times the step as `--reward_predictor_device cuda` runs it.
`--conv_floor` also times the convolutions alone at the step's shapes: what a step would take
if everything else were free; `--phases`, where the rest goes (wall-clock timers around the
forward and backward passes, their first-layer parts, Adam and the agent's view). `--malloc`
sets up memory as a run's trainer does: `tunables` (the default: glibc's malloc tunables,
runtime/process_setup.py; the script restarts itself with them), `keep` (what
--reward_predictor_keep_freed_memory does) or `default` (glibc as it is).
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np
import torch

from clips.clip import Clip, Preference
from reward_predictor.ensemble import NORMALISER_CLIPS, RewardPredictorEnsemble
from reward_predictor.nets import FRAME, AtariRewardNet
from runtime.process_setup import reuse_freed_memory, trainer_malloc_environ
from runtime.script_args import ScriptParser, first_paragraph


def make_batch(rng: np.random.Generator, pairs: int, t: int) -> list[Preference]:
    def clip() -> Clip:
        # Atari-like frames: mostly dark with some structure, not pure noise.
        frames = (rng.random((t + 3, 84, 84)) < 0.1).astype(np.uint8) * 200
        return Clip.pack(frames, rng.integers(0, 6, t), np.zeros(t, np.float32))
    return [Preference(clip(), clip(), float(rng.choice([0.0, 1.0]))) for _ in range(pairs)]


MALLOC_MODES = ("tunables", "keep", "default")


def set_up_malloc(mode: str) -> None:
    """Memory as a run's trainer has it: "tunables" (glibc's, read as a process starts: this
    process restarts itself with them, once), "keep" (--reward_predictor_keep_freed_memory) or
    "default" (glibc as it is)."""
    environ = trainer_malloc_environ()
    if mode == "tunables" and environ:
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **environ})
    if mode == "keep":
        reuse_freed_memory()
    print(f"malloc: {mode} (GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES')})")


def time_steps(threads: int, steps: int, warmup: int, pairs: int, t: int,
               bf16: bool = False, device: str = "cpu") -> list[float]:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    ens = RewardPredictorEnsemble(lambda: AtariRewardNet(dropout=0.5, batchnorm=True),
                                  ensemble_size=1).to(device)
    ens.bf16 = bf16
    sync = torch.cuda.synchronize if ens.device.type == "cuda" else (lambda: None)
    batches = [make_batch(rng, pairs, t) for _ in range(2)]
    times = []
    for i in range(warmup + steps):
        start = time.perf_counter()
        ens.train_step([batches[i % 2]])
        sync()
        times.append(time.perf_counter() - start)
    return times[warmup:]


def warm_member(threads: int, pairs: int, t: int, bf16: bool
                ) -> tuple[RewardPredictorEnsemble, list[Preference]]:
    """One member and its batch, after 3 untimed steps at `threads` threads."""
    torch.set_num_threads(threads)
    ens = RewardPredictorEnsemble(lambda: AtariRewardNet(dropout=0.5, batchnorm=True), ensemble_size=1)
    ens.bf16 = bf16
    batch = make_batch(np.random.default_rng(0), pairs, t)
    for _ in range(3):
        ens.train_step([batch])
    return ens, batch


def profile_steps(threads: int, steps: int, pairs: int, t: int, bf16: bool) -> None:
    """Print the operators that took most of `steps` training steps (after 3 untimed ones)."""
    from torch.profiler import ProfilerActivity, profile

    ens, batch = warm_member(threads, pairs, t, bf16)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(steps):
            ens.train_step([batch])
    print(f"\nprofile of {steps} steps at {threads} threads, {'bf16 autocast' if bf16 else 'fp32'} "
          f"(self time per step = total / {steps}):")
    print(prof.key_averages(group_by_input_shape=True).table(
        sort_by="self_cpu_time_total", row_limit=20, max_name_column_width=32,
        max_shapes_column_width=60))


def phase_times(threads: int, steps: int, pairs: int, t: int, bf16: bool) -> dict[str, float]:
    """Print and return the wall-clock ms a member step spends in each phase, by timers wrapped
    around the functions a step calls (torch.profiler's per-operator times overlap across
    threads and can add up to more than the step's wall clock, so its shares mislead). Nested
    phases are indented; a parent's time includes its children's."""
    from collections import defaultdict
    from contextlib import ExitStack
    from unittest import mock

    from reward_predictor import ensemble, nets

    ens, batch = warm_member(threads, pairs, t, bf16)
    totals: dict[int, float] = defaultdict(float)
    active: set[int] = set()
    phases = [  # (name, owner, attribute, parent phase or None)
        ("forward (training batch)", ensemble, "clip_returns", None),
        ("clips to a uint8 batch", ensemble, "clips_to_batch", 0),
        ("4-frame stacks gathered (NHWC, uint8)", nets, "nhwc_frames", 0),
        ("first conv (input to bf16/fp32 in chunks)", nets.FirstConv, "forward", 0),
        ("batch norm + leaky ReLU + dropout", nets.NormActDrop, "forward", 0),
        ("backward", torch.Tensor, "backward", None),
        ("first conv", nets.FirstConv, "backward", 5),
        ("batch norm + leaky ReLU + dropout", nets.NormActDrop, "backward", 5),
        ("Adam", ens.optimizers[0], "step", None),
        ("agent view (statistics pass + normaliser)", ens, "_agent_view", None),
    ]

    def timed(i: int, parent: int | None, fn):
        def wrapper(*args, **kwargs):
            if parent is not None and parent not in active:  # called from another phase
                return fn(*args, **kwargs)
            active.add(i)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                totals[i] += time.perf_counter() - start
                active.discard(i)
        return wrapper

    with ExitStack() as patches:
        for i, (_, owner, attr, parent) in enumerate(phases):
            wrapped = timed(i, parent, getattr(owner, attr))
            if isinstance(owner, type) and isinstance(owner.__dict__.get(attr), staticmethod):
                wrapped = staticmethod(wrapped)
            patches.enter_context(mock.patch.object(owner, attr, wrapped))
        start = time.perf_counter()
        for _ in range(steps):
            ens.train_step([batch])
        total = time.perf_counter() - start
    print(f"\nphases of a step, wall clock, threads {threads}, {'bf16' if bf16 else 'fp32'} "
          f"(mean of {steps} steps):")
    print(f"  whole step {total / steps * 1000:6.1f} ms")
    result = {"step": total / steps * 1000}
    for i, (name, _, _, parent) in enumerate(phases):
        ms = totals[i] / steps * 1000
        result[name if parent is None else f"{phases[parent][0]}: {name}"] = ms
        indent = "" if parent is None else "  "
        print(f"  {indent}{name:<{46 - len(indent)}} {ms:6.1f} ms")
    return result


def conv_floor(threads: int, steps: int, pairs: int, t: int, bf16: bool) -> float:
    """Print and return the ms a member step spends in the paper net's convolutions alone: each
    layer's forward and backward on the batch (no input gradient for the first) and the forward
    of the eval-mode pass over NORMALISER_CLIPS clips. The rest of a step is elementwise
    work, conversions and bookkeeping."""
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    dtype = torch.bfloat16 if bf16 else torch.float32
    frames, eval_frames = 2 * pairs * t, NORMALISER_CLIPS * t
    net = AtariRewardNet(dropout=0.5, batchnorm=True)
    size, total = FRAME, 0.0
    for i, conv in enumerate(net.convs):
        x = torch.randn(frames, conv.in_channels, size, size, dtype=dtype).to(
            memory_format=torch.channels_last)
        w = conv.weight.detach().to(dtype)
        y = F.conv2d(x, w, None, conv.stride)
        grad = torch.randn_like(y)

        def median_ms(fn) -> float:
            for _ in range(2):
                fn()
            times = []
            for _ in range(steps):
                start = time.perf_counter()
                fn()
                times.append(time.perf_counter() - start)
            return float(np.median(times)) * 1000

        forward = median_ms(lambda: F.conv2d(x, w, None, conv.stride))
        backward = median_ms(lambda: torch.ops.aten.convolution_backward(
            grad, x, w, None, conv.stride, [0, 0], [1, 1], False, [0, 0], 1, [i > 0, True, False]))
        evaluation = median_ms(lambda: F.conv2d(x[:eval_frames], w, None, conv.stride))
        print(f"  conv{i + 1} {conv.in_channels}->16 {conv.kernel_size[0]}x{conv.kernel_size[0]}/"
              f"{conv.stride[0]} on {size}x{size}: forward {forward:.1f} ms, backward "
              f"{backward:.1f}, eval pass {evaluation:.1f}")
        total += forward + backward + evaluation
        size = y.shape[-1]
    print(f"convolutions alone, threads {threads}, {'bf16' if bf16 else 'fp32'}: {total:.0f} ms "
          "per member step")
    return total


def main() -> None:
    parser = ScriptParser(description=first_paragraph(__doc__))
    parser.add_argument("--steps", type=int, default=10, help="timed steps per thread count")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch thread counts")
    parser.add_argument("--pairs", type=int, default=16, help="clip pairs per batch")
    parser.add_argument("--length", type=int, default=25, help="steps per clip")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--malloc", choices=MALLOC_MODES, default="tunables",
                        help="memory set-up: a run's trainer's (glibc tunables), that of "
                             "--reward_predictor_keep_freed_memory, or glibc's default")
    parser.add_argument("--precisions", nargs="+", choices=["fp32", "bf16"], default=["fp32", "bf16"],
                        help="the arithmetic to time: fp32 and/or bf16 autocast")
    parser.add_argument("--conv_floor", action="store_true",
                        help="also time the convolutions alone at the step's shapes, per thread "
                             "count and precision (the floor of a step in eager torch)")
    parser.add_argument("--phases", action="store_true",
                        help="also time a step's phases by wall clock (forward, backward, Adam, "
                             "the agent's view; at the first --threads and --precisions)")
    parser.add_argument("--profile", action="store_true",
                        help="also print a profile of --steps steps by operator (at the first "
                             "--threads and --precisions)")
    args = parser.parse_args()
    set_up_malloc(args.malloc)
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, {args.device}, batch {args.pairs} pairs x "
          f"{args.length} steps = {2 * args.pairs * args.length} observations")
    for threads, bf16 in [(th, p == "bf16") for th in args.threads for p in args.precisions]:
        times = time_steps(threads, args.steps, args.warmup, args.pairs, args.length, bf16,
                           args.device)
        print(f"threads {threads}, {'bf16 autocast' if bf16 else 'fp32'}: "
              f"median {np.median(times) * 1000:.0f} ms/step "
              f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f})")
    if args.conv_floor:
        for threads, bf16 in [(th, p == "bf16") for th in args.threads for p in args.precisions]:
            conv_floor(threads, args.steps, args.pairs, args.length, bf16)
    if args.phases:
        phase_times(args.threads[0], args.steps, args.pairs, args.length,
                    args.precisions[0] == "bf16")
    if args.profile:
        profile_steps(args.threads[0], args.steps, args.pairs, args.length,
                      args.precisions[0] == "bf16")


if __name__ == "__main__":
    main()
