#!/usr/bin/env python3
"""What a test run did not test on this machine: the skipped tests of JUnit XML reports (ctest's
--output-junit, Google Test's --gtest_output=xml, pytest's --junitxml), counted per reason.

    python tests/skip_summary.py LABEL=REPORT.xml [LABEL=REPORT.xml ...]

Prints one line per (run, reason) with its count, most frequent first, so a reader sees at the end of
scripts/test.sh which tests this machine skipped and why (no GPU, no VNNI, a tool not installed).
A report that is missing is named as such: a run that wrote none did not run."""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path


def reason_of(case: ET.Element, skipped: ET.Element) -> str:
    """The skip's own words: pytest and Google Test put them in the message; ctest only says its skip
    expression matched, and the reason is the line after Google Test's "file:line: Skipped"."""
    message = (skipped.get("message") or "").strip()
    if message == "SKIP_REGULAR_EXPRESSION_MATCHED":
        out = "".join(e.text or "" for e in case.iter("system-out"))
        m = re.search(r": Skipped\n(.*)", out)
        message = m.group(1) if m else ""
    # Google Test starts with "file:line" (and a newline), pytest with "file:line: ".
    message = re.sub(r"^\S+:\d+(:\s|\n)", "", message).strip()
    # The first clause names the reason; what follows (how to get the missing piece) is for the log.
    message = " ".join(message.split(";", 1)[0].split())
    return message or "(no reason given)"


def skips(report: Path) -> Counter[str]:
    counts: Counter[str] = Counter()
    for case in ET.parse(report).getroot().iter("testcase"):
        skipped = case.find("skipped")
        if skipped is not None:
            counts[reason_of(case, skipped)] += 1
    return counts


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    print("== skipped tests, by reason (what this machine did not test)")
    total = 0
    for arg in argv:
        label, _, path = arg.partition("=")
        report = Path(path)
        if not report.is_file():
            print(f"  {label}: no report ({path})")
            continue
        try:
            counts = skips(report)
        except ET.ParseError as e:
            print(f"  {label}: unreadable report ({e})")
            continue
        if not counts:
            print(f"  {label}: none skipped")
        for reason, n in counts.most_common():
            print(f"  {label}: {n:4d}  {reason}")
        total += sum(counts.values())
    print(f"  total skipped: {total}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
