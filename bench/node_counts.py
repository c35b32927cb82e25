"""Node counts of the zoo models: as exported, after kiln's optimizer, after ONNX Runtime's.

    PYTHONPATH=python .venv/bin/python bench/node_counts.py [--zoo build/zoo] [--kiln build/kiln] [--level 2]

Prints a markdown table per model (and the kiln passes that fired) and rewrites the generated section
of docs/optimizer.md. ORT's count is of the model it saves with ORT_ENABLE_EXTENDED (CPU provider).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN = "<!-- node_counts.py: begin (generated, do not edit) -->"
END = "<!-- node_counts.py: end -->"


def kiln_inspect(kiln: str, path: str, level: int) -> tuple[int, int, dict[str, int], dict[str, int]]:
    out = subprocess.run([kiln, "inspect", path, "--opt-level", str(level)], check=True, capture_output=True,
                         text=True).stdout
    before, after = map(int, re.search(r"nodes: (\d+) before, (\d+) after", out).groups())
    passes, ops, section = {}, {}, None
    for line in out.splitlines():
        if line.startswith("passes"):
            section = "passes"
        elif line.startswith("ops after"):
            section = "ops"
        elif not line.startswith("  "):
            section = None
        elif section == "passes":
            name, n = line.split()
            passes[name] = int(n)
        elif section == "ops":
            m = re.match(r"\s+(\S+)\s+(\d+)", line)
            ops[m.group(1)] = int(m.group(2))
    return before, after, passes, ops


def ort_count(path: str) -> int | str:
    try:
        import onnxruntime as ort
    except ImportError:
        return "n/a"
    with tempfile.TemporaryDirectory() as d:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        so.optimized_model_filepath = os.path.join(d, "opt.onnx")
        ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        return len(onnx.load(so.optimized_model_filepath, load_external_data=False).graph.node)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--zoo", default=os.path.join(ROOT, "build", "zoo"))
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--level", type=int, default=2)
    ap.add_argument("--doc", default=os.path.join(ROOT, "docs", "optimizer.md"))
    args = ap.parse_args()
    models = sorted(f for f in os.listdir(args.zoo) if f.endswith(".onnx")) if os.path.isdir(args.zoo) else []
    if not models:
        print(f"no models in {args.zoo}: run bench/zoo/export.py first", file=sys.stderr)
        return 1
    lines = [f"Opt level {args.level}. Nodes are top-level graph nodes.", "",
             "| model | nodes (exported) | after kiln | after ONNX Runtime (extended) | kiln rewrites |",
             "|---|---:|---:|---:|---|"]
    for f in models:
        path = os.path.join(args.zoo, f)
        before, after, passes, ops = kiln_inspect(args.kiln, path, args.level)
        fired = ", ".join(f"{p} {n}" for p, n in passes.items() if n)
        lines.append(f"| {f[:-5]} | {before} | {after} | {ort_count(path)} | {fired} |")
        print(lines[-1], flush=True)
    table = "\n".join(lines)
    if os.path.exists(args.doc):
        doc = open(args.doc).read()
        if BEGIN in doc and END in doc:
            doc = doc[: doc.index(BEGIN) + len(BEGIN)] + "\n" + table + "\n" + doc[doc.index(END):]
            open(args.doc, "w").write(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
