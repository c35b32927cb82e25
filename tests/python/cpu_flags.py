"""The CPU's feature flags as /proc/cpuinfo lists them (empty where it cannot be read), for tests whose
expectations depend on the instruction set (oneDNN's int8 kernels need VNNI, its Winograd kernels
AVX-512)."""

from __future__ import annotations


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return set(next((line for line in f if line.startswith("flags")), "").split())
    except OSError:
        return set()
