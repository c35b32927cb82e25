"""The engine file's checksum (src/util/checksum.cpp's checksum64, written out from its definition),
for tests and GPU scripts that re-seal an engine file after editing it, as a file from another machine
would read. No kiln import: the GPU machine's scripts use it without the package installed.
"""
import struct

M64 = (1 << 64) - 1
ODD1, ODD2 = 0xD6E8FEB86659FD93, 0xA0761D6478BD642F


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def _mix(h):
    h ^= h >> 32
    h = (h * ODD1) & M64
    h ^= h >> 29
    h = (h * ODD2) & M64
    return h ^ (h >> 32)


def checksum64(data: bytes) -> int:
    lanes = [ODD1, ODD2, ~ODD1 & M64, ~ODD2 & M64]
    full = len(data) // 32 * 32
    words = struct.unpack(f"<{full // 8}Q", data[:full])
    tail = struct.unpack("<4Q", data[full:] + b"\0" * (32 - (len(data) - full)))
    for block in [words[i:i + 4] for i in range(0, len(words), 4)] + [tail]:
        for k in range(4):
            lanes[k] = (_rotl(lanes[k] ^ ((block[k] * ODD2) & M64), 27) * ODD1) & M64
    h = (len(data) * ODD1) & M64
    for k in range(4):
        h = (_mix(h ^ lanes[k]) + _rotl(lanes[k], 17 * k + 1)) & M64
    return _mix(h)
