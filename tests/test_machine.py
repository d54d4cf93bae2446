"""The one-line description of a machine that runs and benchmarks record."""
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
