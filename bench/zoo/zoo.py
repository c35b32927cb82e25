"""The model zoo: which models, their inputs, and where their exported files live.

Torch-free on purpose: the exporter (bench/zoo/export.py, needs torch), the agreement test
(tests/models/test_zoo.py) and the benchmark (bench/cpu_bench.py) all read this one list.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ZOO_DIR = os.path.join(ROOT, "build", "zoo")
MANIFEST = os.path.join(ZOO_DIR, "manifest.json")
OPSETS = (13, 17)
SMALL = ("mobilenet_v2", "efficientnet_b0", "distilbert")  # the CI subset, at opset 17
SMALL_OPSETS = (17,)


@dataclass(frozen=True)
class Input:
    name: str
    shape: tuple  # "batch" marks the dynamic batch axis
    dtype: str  # numpy dtype name
    high: int = 0  # integer inputs: values in [0, high)
    kind: str = "normal"  # "normal" (float N(0,1)), "ids" (ints < high), "mask" (ones, then zeros at the end)

    def concrete_shape(self, batch: int) -> tuple:
        return tuple(batch if d == "batch" else d for d in self.shape)


@dataclass(frozen=True)
class Model:
    name: str
    source: str  # "torchvision", "transformers" or "timm"
    inputs: tuple
    outputs: tuple
    note: str = ""
    # The agreement test's bound on each output's relative L2 error, kiln vs onnxruntime. 1e-5 unless
    # fp32 rounding alone moves the model further (measured against a float64 run in torch).
    rel_l2: float = 1e-5


def _image(size: int = 224) -> tuple:
    return (Input("input", ("batch", 3, size, size), "float32"),)


def _text(vocab: int, seq: int = 128, mask: bool = True) -> tuple:
    ids = Input("input_ids", ("batch", seq), "int64", high=vocab, kind="ids")
    if not mask:
        return (ids,)
    return (ids, Input("attention_mask", ("batch", seq), "int64", high=2, kind="mask"))


MODELS: dict[str, Model] = {
    m.name: m
    for m in (
        Model("resnet50", "torchvision", _image(), ("logits",), rel_l2=3e-5,
              note="fp32 noise floor: onnxruntime is 1.4e-5 and kiln 1.7e-5 (rel L2) from a float64 torch run"),
        Model("mobilenet_v2", "torchvision", _image(), ("logits",)),
        Model("efficientnet_b0", "torchvision", _image(), ("logits",)),
        Model("convnext_tiny", "torchvision", _image(), ("logits",)),
        Model("vit_b_16", "torchvision", _image(), ("logits",)),
        Model("densenet121", "torchvision", _image(), ("logits",)),
        # timm's models by their timm names (the GPU benchmark's default-export set, #40)
        Model("vit_base_patch16_224", "timm", _image(), ("logits",), note="timm ViT-B/16 (packed QKV attention)"),
        Model("swin_tiny_patch4_window7_224", "timm", _image(), ("logits",),
              note="timm Swin-T (window attention, relative position bias, shifted windows)"),
        Model("deeplabv3_mobilenet_v3_large", "torchvision", _image(256), ("out",),
              note="segmentation; torchvision DeepLabV3 with a MobileNetV3-Large backbone, 21 classes"),
        Model("bert_base", "transformers", _text(30522), ("last_hidden_state", "pooler_output"),
              note="BertConfig() defaults (BERT-base), seq 128"),
        Model("distilbert", "transformers", _text(30522), ("last_hidden_state",),
              note="DistilBertConfig() defaults, seq 128"),
        Model("gpt2", "transformers", _text(50257), ("logits",),
              note="GPT2Config() defaults (GPT-2 small) with the LM head, use_cache=False, seq 128"),
        Model("llama_gqa", "transformers", _text(32000), ("last_hidden_state",),
              note="LlamaModel, 8 layers of hidden 1024, 16 query heads on 4 K/V heads of 64 (grouped-query "
                   "attention, rotary embeddings), use_cache=False, seq 128"),
    )
}


def model_path(name: str, opset: int) -> str:
    return os.path.join(ZOO_DIR, f"{name}_op{opset}.onnx")


def export_command(name: str, opset: int) -> str:
    return f"scripts/setup_zoo.sh && .venv-zoo/bin/python bench/zoo/export.py --models {name} --opsets {opset}"


def make_inputs(model: Model, batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random inputs in each input's valid range."""
    rng = np.random.default_rng(seed)
    feed = {}
    for inp in model.inputs:
        shape = inp.concrete_shape(batch)
        if inp.kind == "ids":
            feed[inp.name] = rng.integers(0, inp.high, size=shape, dtype=np.int64).astype(inp.dtype)
        elif inp.kind == "mask":
            # Right padding: each row keeps a random number (at least half) of leading ones.
            mask = np.zeros(shape, dtype=inp.dtype)
            seq = shape[-1]
            for row in range(shape[0]):
                mask[row, : int(rng.integers(seq // 2, seq + 1))] = 1
            feed[inp.name] = mask
        else:
            feed[inp.name] = rng.standard_normal(shape).astype(inp.dtype)
    return feed


def read_manifest() -> dict:
    if not os.path.exists(MANIFEST):
        return {}
    with open(MANIFEST) as f:
        return json.load(f)
