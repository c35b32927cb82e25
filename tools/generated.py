"""Writing a generated file, or checking that the committed one is current (shared by tools/gen_*.py)."""

import os


def write_or_check(path: str, text: str, check: bool, regenerate: str) -> int:
    """Writes `text` to `path`, or with `check` compares them: 0 when current/written, 1 when stale."""
    name = os.path.relpath(path, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if check:
        current = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
        if current != text:
            print(f"{name} is stale: run {regenerate} and commit it")
            return 1
        print(f"{name} is current")
        return 0
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {name}")
    return 0
