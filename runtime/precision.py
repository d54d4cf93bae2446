"""`--precision`: fp32, bf16 autocast, or auto (bf16 where the device does it natively). Resolved
in the process that computes, so the supervising process never imports torch."""
from __future__ import annotations

PRECISIONS = ("auto", "fp32", "bf16")  # --precision's choices


def bf16_is_fast(device: str = "cpu") -> bool:
    """True where the device has native bfloat16 arithmetic, so autocast pays off: a CPU with
    AVX512-BF16, a GPU that supports bf16 (Ampere and later)."""
    import torch

    if torch.device(device).type == "cuda":
        # That GPU's own (cuda:N, not the current one), Ampere (compute capability 8) and later:
        # torch.cuda.is_bf16_supported() also says yes where bf16 is only emulated, and slow.
        return torch.cuda.get_device_capability(torch.device(device))[0] >= 8
    return bool(torch.cpu._is_avx512_bf16_supported())


def use_bf16(precision: str, device: str = "cpu") -> bool:
    """Whether to run with bfloat16 autocast under `precision` ("fp32", "bf16" or "auto") on
    `device`."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return precision == "bf16" or (precision == "auto" and bf16_is_fast(device))
