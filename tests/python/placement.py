"""Shared by the Python tests: what an engine's placement report says."""

from __future__ import annotations

import collections
import re


def ops_after(engine) -> collections.Counter:
    """op type → count of the optimized graph's steps (fused ops appear as their own op types)."""
    c = collections.Counter()
    for line in engine.placement_report().splitlines():
        m = re.match(r"\[\w+\] .* \(([\w.]+)\) -> ", line)
        if m:
            c[m.group(1)] += 1
    return c
