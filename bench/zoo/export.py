#!/usr/bin/env python3
"""Exports the model zoo to ONNX with random weights (fixed seeds, no downloads).

Run it with the zoo's environment (scripts/setup_zoo.sh makes it):

    .venv-zoo/bin/python bench/zoo/export.py                 # every model at opsets 13 and 17
    .venv-zoo/bin/python bench/zoo/export.py --small         # the CI subset
    .venv-zoo/bin/python bench/zoo/export.py --models gpt2 --opsets 17 --force

Files go to build/zoo/<model>_op<opset>.onnx (a file already there is kept unless --force), and
build/zoo/manifest.json lists each: file, inputs (shapes with the dynamic "batch" axis, dtypes,
value ranges), outputs, opset, exporter versions and export time.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo  # noqa: E402

import torch  # noqa: E402


class _TupleOutputs(torch.nn.Module):
    """Turns a model's dict/ModelOutput result into a tuple of the named outputs."""

    def __init__(self, model: torch.nn.Module, keys: tuple, input_names: tuple) -> None:
        super().__init__()
        self.model = model
        self.keys = keys
        self.input_names = input_names

    def forward(self, *args):
        out = self.model(**dict(zip(self.input_names, args)))
        return tuple(out[k] for k in self.keys)


def build_torchvision(name: str) -> torch.nn.Module:
    import torchvision  # noqa: PLC0415

    if name == "deeplabv3_mobilenet_v3_large":
        from torchvision.models import segmentation  # noqa: PLC0415

        net = segmentation.deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None, aux_loss=False)
        return _TupleOutputs(net, ("out",), ("x",))
    return getattr(torchvision.models, name)(weights=None)


# --tiny: the transformers with 2 layers of 4 heads of 16 (hidden 64), for graph-pattern tests: the
# same exported structure as the full models (the installed transformers' attention code), small files.
TINY = {
    "bert_base": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128),
    "distilbert": dict(dim=64, n_layers=2, n_heads=4, hidden_dim=128),
    "gpt2": dict(n_embd=64, n_layer=2, n_head=4),
    "llama_gqa": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=128, vocab_size=1000),
}
# llama_gqa's full size: a small Llama-architecture decoder (the grouped-query layout of Llama 3,
# Mistral, Qwen 2), random weights.
LLAMA_GQA = dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4,
                 intermediate_size=2816, vocab_size=32000, max_position_embeddings=2048)
_tiny = False
_eager_attention = False


def build_transformers(name: str) -> torch.nn.Module:
    import transformers as tf  # noqa: PLC0415

    spec = zoo.MODELS[name]
    input_names = tuple(i.name for i in spec.inputs)
    small = dict(TINY[name]) if _tiny and name in TINY else {}
    # transformers' default attention (scaled_dot_product_attention where torch has it, as users
    # export); --eager-attention exports the older eager form instead (a second row for comparisons).
    if _eager_attention:
        small["attn_implementation"] = "eager"
    if name == "bert_base":
        net = tf.BertModel(tf.BertConfig(**small))
    elif name == "distilbert":
        net = tf.DistilBertModel(tf.DistilBertConfig(**small))
    elif name == "gpt2":
        net = tf.GPT2LMHeadModel(tf.GPT2Config(use_cache=False, **small))
    elif name == "llama_gqa":
        net = tf.LlamaModel(tf.LlamaConfig(use_cache=False, **(small or dict(LLAMA_GQA))))
    else:
        raise ValueError(name)
    return _TupleOutputs(net, spec.outputs, input_names)


def calibrate_batchnorm(net: torch.nn.Module, spec: zoo.Model) -> None:
    """Sets BatchNorm running statistics from random inputs (seeded).

    With fresh statistics (mean 0, variance 1) random-weight CNNs shrink their signal layer after
    layer: MobileNetV2's logits come out near 1e-8, DeepLabV3's output hardly depends on its input.
    Statistics measured on inputs keep activations near unit scale, like a trained network's, so
    that the agreement test compares outputs that carry the input's signal.
    """
    bns = [m for m in net.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None  # a cumulative average over the calibration batches
    net.train()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(2):
            shape = spec.inputs[0].concrete_shape(8)
            net(torch.randn(shape, generator=gen))
    net.eval()


def build(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    spec = zoo.MODELS[name]
    if spec.source == "timm":
        import timm  # noqa: PLC0415

        net = timm.create_model(name, pretrained=False)
    else:
        net = build_torchvision(name) if spec.source == "torchvision" else build_transformers(name)
    if name == "vit_b_16":
        # torchvision zero-initializes ViT's classification head: every logit would be 0.
        torch.nn.init.normal_(net.heads.head.weight, std=0.02)
        torch.nn.init.normal_(net.heads.head.bias, std=0.02)
    calibrate_batchnorm(net, spec)
    return net.eval()


def export_one(name: str, opset: int, path: str) -> float:
    spec = zoo.MODELS[name]
    net = build(name)
    feed = zoo.make_inputs(spec, batch=1, seed=0)
    args = tuple(torch.from_numpy(feed[i.name]) for i in spec.inputs)
    input_names = [i.name for i in spec.inputs]
    dynamic_axes = {i.name: {0: "batch"} for i in spec.inputs}
    dynamic_axes.update({o: {0: "batch"} for o in spec.outputs})
    tmp = path + ".tmp"
    start = time.perf_counter()
    # torch 1.13's nn.MultiheadAttention (ViT) takes a fused fast path, which has no ONNX export,
    # when gradients are off: keep them on for it; every other model is traced under no_grad.
    grad = name == "vit_b_16"
    with warnings.catch_warnings(), torch.set_grad_enabled(grad):
        warnings.simplefilter("ignore")  # tracer warnings about Python values in transformers' code
        # The TorchScript exporter on every torch (newer torch defaults to the dynamo exporter, which
        # takes dynamic_shapes instead of dynamic_axes).
        extra = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
        torch.onnx.export(
            net, args, tmp,
            opset_version=opset,
            input_names=input_names,
            output_names=list(spec.outputs),
            dynamic_axes=dynamic_axes,
            do_constant_folding=True,
            **extra,
        )
    seconds = time.perf_counter() - start
    os.replace(tmp, path)  # a file that exists is a complete export
    return seconds


def versions() -> dict:
    out = {"torch": torch.__version__}
    for mod in ("torchvision", "transformers", "timm", "onnx"):
        try:
            out[mod] = __import__(mod).__version__
        except ImportError:
            pass
    return out


def manifest_entry(name: str, opset: int, seconds: float | None) -> dict:
    spec = zoo.MODELS[name]
    path = zoo.model_path(name, opset)
    return {
        "model": name,
        "source": spec.source,
        "note": spec.note,
        "file": os.path.relpath(path, zoo.ROOT),
        "bytes": os.path.getsize(path),
        "opset": opset,
        "inputs": [
            {"name": i.name, "shape": list(i.shape), "dtype": i.dtype, "kind": i.kind,
             **({"high": i.high} if i.high else {})}
            for i in spec.inputs
        ],
        "outputs": list(spec.outputs),
        "export_seconds": None if seconds is None else round(seconds, 2),
        "exporter": versions(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", help="comma-separated names (default: all): " + ",".join(zoo.MODELS))
    ap.add_argument("--opsets", help="comma-separated opsets (default: 13,17)")
    ap.add_argument("--small", action="store_true", help="the CI subset: " + ",".join(zoo.SMALL) + " at opset 17")
    ap.add_argument("--force", action="store_true", help="export again even where the file exists")
    ap.add_argument("--tiny", metavar="DIR",
                    help="export the transformers (" + ",".join(TINY) + ") with 2 small layers to "
                    "DIR/<model>_tiny_op<opset>.onnx instead (structure tests; no manifest)")
    ap.add_argument("--eager-attention", action="store_true",
                    help="transformers models with attn_implementation='eager' instead of the default (SDPA)")
    args = ap.parse_args()
    global _eager_attention
    _eager_attention = args.eager_attention
    if args.tiny:
        global _tiny
        _tiny = True
        os.makedirs(args.tiny, exist_ok=True)
        names = [n.strip() for n in (args.models or ",".join(TINY)).split(",") if n.strip()]
        for name in names:
            if name not in TINY:
                ap.error(f"--tiny exports {', '.join(TINY)} only")
            for opset in [int(o) for o in (args.opsets or "17").split(",")]:
                path = os.path.join(args.tiny, f"{name}_tiny_op{opset}.onnx")
                export_one(name, opset, path)
                print(f"export: {path}: {os.path.getsize(path) / 1e6:.1f} MB", flush=True)
        return 0

    names = list(zoo.SMALL) if args.small else list(zoo.MODELS)
    opsets = list(zoo.SMALL_OPSETS) if args.small else list(zoo.OPSETS)
    if args.models:
        names = [n.strip() for n in args.models.split(",") if n.strip()]
    else:
        # timm's models only where timm is installed (the GPU machine; Debian has no timm package)
        try:
            import timm  # noqa: F401, PLC0415
        except ImportError:
            skipped = [n for n in names if zoo.MODELS[n].source == "timm"]
            names = [n for n in names if n not in skipped]
            if skipped:
                print(f"export: timm is not installed: skipping {', '.join(skipped)}", flush=True)
    if args.opsets:
        opsets = [int(o) for o in args.opsets.split(",") if o.strip()]
    unknown = [n for n in names if n not in zoo.MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(zoo.MODELS)}")

    os.makedirs(zoo.ZOO_DIR, exist_ok=True)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    manifest = zoo.read_manifest()
    failed = []
    for name in names:
        for opset in opsets:
            key = f"{name}_op{opset}"
            path = zoo.model_path(name, opset)
            if os.path.exists(path) and not args.force:
                print(f"export: {key}: kept {os.path.relpath(path, zoo.ROOT)}", flush=True)
                if key not in manifest:
                    manifest[key] = manifest_entry(name, opset, None)
                continue
            try:
                seconds = export_one(name, opset, path)
            except Exception as e:  # noqa: BLE001 - report every model, then fail
                print(f"export: {key}: FAILED: {type(e).__name__}: {e}", flush=True)
                failed.append(key)
                continue
            manifest[key] = manifest_entry(name, opset, seconds)
            print(f"export: {key}: {seconds:.1f} s, {os.path.getsize(path) / 1e6:.1f} MB", flush=True)
            with open(zoo.MANIFEST, "w") as f:
                json.dump(dict(sorted(manifest.items())), f, indent=2)
    with open(zoo.MANIFEST, "w") as f:
        json.dump(dict(sorted(manifest.items())), f, indent=2)
    if failed:
        print(f"export: {len(failed)} failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
