"""`--precision`: fp32, bf16 autocast, or auto (bf16 where the CPU does it natively). Resolved
in the process that computes, so the supervising process never imports torch."""
from __future__ import annotations


def bf16_is_fast() -> bool:
    """True where the CPU has native bfloat16 arithmetic (AVX512-BF16), so autocast pays off."""
    import torch

    return bool(torch.cpu._is_avx512_bf16_supported())


def use_bf16(precision: str) -> bool:
    """Whether to run with bfloat16 autocast under `precision` ("fp32", "bf16" or "auto")."""
    if precision not in ("fp32", "bf16", "auto"):
        raise ValueError(f"precision must be fp32, bf16 or auto, got {precision!r}")
    return precision == "bf16" or (precision == "auto" and bf16_is_fast())
