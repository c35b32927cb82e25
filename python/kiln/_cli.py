"""The `kiln` command of an installed package (pyproject.toml's [project.scripts]).

It replaces this process with the kiln binary shipped in the package (kiln/bin/kiln), passing the
arguments on: output, exit status and signals are the binary's own.
"""

from __future__ import annotations

import os
import sys


def binary() -> str:
    """The path of the packaged kiln binary."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "kiln")


def main() -> None:
    exe = binary()
    if not os.access(exe, os.X_OK):
        sys.exit(f"kiln: {exe} is missing: the `kiln` command comes with an installed package "
                 "(`pip install .`); in a source tree it is build/kiln")
    # `kiln compare --against onnxruntime` runs its reference with $KILN_PYTHON: this environment's.
    os.environ.setdefault("KILN_PYTHON", sys.executable)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, [sys.argv[0], *sys.argv[1:]])


if __name__ == "__main__":
    main()
