"""The machine: its one-line description that runs and benchmarks record, and the arithmetic it
does natively (--precision auto)."""
from runtime.machine import processor

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 sha_ni
processor\t: 1
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 sha_ni
"""


def test_the_processor_is_named_with_its_cores_and_fastest_bf16_flag():
    line = processor(CPUINFO)
    assert line.startswith("AMD EPYC 9R14, ") and line.endswith(" cores, avx512_bf16")
    assert processor(CPUINFO.replace(" avx512_bf16", " amx_bf16 avx512_bf16")).endswith("amx_bf16")
    assert processor(CPUINFO.replace(" avx512_bf16", "")).endswith(", avx2")
    assert processor("").startswith("unknown CPU, ")


def test_auto_precision_asks_the_device_that_computes(monkeypatch):
    """--precision auto: bf16 where the device has it natively, the CPU's flags for the CPU and
    the GPU's own support for a GPU (a GPU run on a host CPU without AVX512-BF16 still gets it)."""
    import pytest
    import torch

    from runtime.precision import use_bf16

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert not use_bf16("auto") and not use_bf16("auto", "cpu")
    assert use_bf16("auto", "cuda") and use_bf16("auto", "cuda:1")
    assert use_bf16("bf16", "cpu") and not use_bf16("fp32", "cuda")
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert use_bf16("auto", "cpu") and not use_bf16("auto", "cuda")
    with pytest.raises(ValueError, match="precision must be"):
        use_bf16("fp16")
