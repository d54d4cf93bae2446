"""The machine: its one-line description that runs and benchmarks record, and the arithmetic it
does natively (--precision auto)."""
from runtime.machine import processor, usable_cores

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 sha_ni
processor\t: 1
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 sha_ni
"""


def test_the_processor_is_named_with_its_cores_and_the_fastest_of_the_flags_named():
    line = processor(CPUINFO)
    assert line == f"AMD EPYC 9R14, {usable_cores()} cores, avx512_bf16"  # the cores it may use
    assert processor(CPUINFO.replace(" avx512_bf16", " amx_bf16 avx512_bf16")).endswith("amx_bf16")
    assert processor(CPUINFO.replace(" avx512_bf16", "")).endswith(", avx512f")
    assert processor(CPUINFO.replace(" avx512f avx512_bf16", "")).endswith(", avx2")
    assert processor("").startswith("unknown CPU, ")


def test_auto_precision_asks_the_device_that_computes(monkeypatch):
    """--precision auto: bf16 where the device has it natively, the CPU's flags for the CPU and
    the named GPU's own support for a GPU (a GPU run on a host CPU without AVX512-BF16 still
    gets it; a pre-Ampere GPU, which only emulates bf16, does not)."""
    import pytest
    import torch

    from runtime.precision import use_bf16

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    capability = {0: (9, 0), 1: (7, 0)}  # an H100 as cuda:0 (the current GPU), a V100 as cuda:1
    monkeypatch.setattr(torch.cuda, "get_device_capability",
                        lambda d=None: capability[0 if d is None or d.index is None else d.index])
    assert not use_bf16("auto") and not use_bf16("auto", "cpu")
    assert use_bf16("auto", "cuda") and use_bf16("auto", "cuda:0")
    assert not use_bf16("auto", "cuda:1")
    assert use_bf16("bf16", "cpu") and not use_bf16("fp32", "cuda")
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    capability[0] = (7, 5)
    assert use_bf16("auto", "cpu") and not use_bf16("auto", "cuda")
    with pytest.raises(ValueError, match="precision must be"):
        use_bf16("fp16")
