"""Attention as today's exporters write it (#40): tiny networks built by transformers, torchvision and
timm with their default settings, exported by torch 2.11's TorchScript exporter (opset 17, dynamic
batch), committed under tests/models/attention/ (made by export_tiny.py there). For each: the
optimized engine matches the unoptimized one and onnxruntime on padded inputs, and the attention
fusion fires where kiln recognizes that form. Forms it does not recognize yet are strict xfails: the
test starts failing (and must be updated) the day the fusion covers them."""

from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort
import pytest

import kiln
from placement import ops_after

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "tests", "models", "attention")

# model → (kiln.Attention steps expected after optimization, whether kiln recognizes the form yet)
FUSED = {
    "bert_default": 2,        # transformers SDPA export: additive mask, softmax guarded by Where(IsNaN)
    "gpt2_default": 2,        # causal + padding mask built by the model, the same guard
    "vit_torchvision": 2,     # nn.MultiheadAttention, sequence-first 4-D heads
    "vit_timm": 2,            # packed QKV: Reshape [B, N, 3, H, D], Transpose, Split, Squeeze
    "swin_timm": 4,           # packed QKV + relative position bias; the shifted-window blocks add their
                              # mask between two Reshapes of the scores (test_swin_windows_fuse below)
    "llama_gqa_default": 2,   # rotary embeddings on 4-D heads, grouped K/V heads (Unsqueeze, Expand,
                              # Reshape): heads_first + kv_num_heads (test_grouped_heads_are_not_repeated)
}
NOT_YET: dict = {}


def feeds_for(name: str, batch: int, rng) -> dict:
    if name in ("bert_default", "gpt2_default", "llama_gqa_default"):
        seq = 12
        ids = rng.integers(0, 128, (batch, seq)).astype(np.int64)
        mask = np.ones((batch, seq), np.int64)
        mask[0, :3] = 0      # left padding: for causal models query 0..2 see only padding
        mask[-1, 7:] = 0     # right padding
        if batch > 2:
            mask[1, :] = 0   # a fully padded sequence: every row of its scores is masked
        return {"input_ids": ids, "attention_mask": mask}
    size = 64 if name == "swin_timm" else 32
    return {"x": rng.standard_normal((batch, 3, size, size)).astype(np.float32)}


def run(engine, feeds):
    return engine.create_context().run(feeds)[0]


@pytest.mark.parametrize("name", sorted(FUSED) + sorted(NOT_YET))
@pytest.mark.parametrize("batch", [1, 3])
def test_default_exports_match_unoptimized_and_onnxruntime(name, batch):
    path = os.path.join(MODELS, name + ".onnx")
    feeds = feeds_for(name, batch, np.random.default_rng(batch))
    ref = run(kiln.Engine.build(path, opt_level=0), feeds)
    opt_engine = kiln.Engine.build(path)
    got = run(opt_engine, feeds)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    # Fully masked rows are NaN-guarded to 0 by the export itself: the outputs are finite everywhere.
    assert np.isfinite(want).all()
    np.testing.assert_allclose(ref, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


NOT_YET_XFAIL = pytest.mark.xfail(strict=True, reason="kiln does not recognize this attention form yet (#40)")


@pytest.mark.parametrize("name", sorted(FUSED) + [pytest.param(n, marks=NOT_YET_XFAIL) for n in sorted(NOT_YET)])
def test_attention_fuses_in_default_exports(name):
    ops = ops_after(kiln.Engine.build(os.path.join(MODELS, name + ".onnx")))
    want = FUSED.get(name) or NOT_YET[name]
    assert ops["Attention"] == want and ops["Softmax"] == 0 and ops["IsNaN"] == 0, dict(ops)


@pytest.mark.parametrize("name", sorted(FUSED))
@pytest.mark.parametrize("batch", [1, 3])
def test_attention_fuses_with_fixed_shapes(name, batch):
    """Built for fixed input shapes (`kiln build --shapes`, one profile with min = opt = max), the
    shape computations fold to constants — torchvision's head reshape becomes [B, H, S, -1] — and
    every attention still fuses (ViT-B/16 at batch 64 ran 13.8 ms instead of 6.3 when it did not)."""
    path = os.path.join(MODELS, name + ".onnx")
    feeds = feeds_for(name, batch, np.random.default_rng(batch + 10))
    fixed = {k: (list(v.shape), list(v.shape), list(v.shape)) for k, v in feeds.items()}
    engine = kiln.Engine.build(path, profiles=[fixed])
    ops = ops_after(engine)
    assert ops["Attention"] == FUSED[name] and ops["Softmax"] == 0, dict(ops)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(run(engine, feeds), want, rtol=1e-4, atol=1e-4)


def test_swin_windows_fuse():
    """Swin's plain window blocks (packed QKV, relative position bias as the additive mask) and its
    shifted-window blocks (the mask added to the scores viewed [B/nW, nW, H, N, N], folded with the
    bias into one mask read with a batch period: tests/python/test_attention_windows.py) all fuse."""
    ops = ops_after(kiln.Engine.build(os.path.join(MODELS, "swin_timm.onnx")))
    assert ops["Attention"] == 4 and ops["Softmax"] == 0, dict(ops)


# The cut of one projection into Q, K and V: GPT-2's Split, torch 2.x nn.MultiheadAttention's
# Reshape/Unsqueeze/Transpose/Squeeze then three Gathers. fuse-attention makes the attentions read the
# projection in place (packed_qkv), so those copies go: per attention, the steps the cut costs fewer
# (the outputs still match onnxruntime: test_default_exports_match_unoptimized_and_onnxruntime).
CUTS = {
    "gpt2_default": {"Split": 1},
    "vit_torchvision": {"Gather": 3, "Squeeze": 1, "Unsqueeze": 1, "Transpose": 1},
}


@pytest.mark.parametrize("name", sorted(CUTS))
def test_attention_reads_the_projection_in_place(name):
    path = os.path.join(MODELS, name + ".onnx")
    kept = ops_after(kiln.Engine.build(path, opt_level=1))
    fused = ops_after(kiln.Engine.build(path))
    attentions = fused["Attention"]
    assert attentions == FUSED[name]
    for op, per_attention in CUTS[name].items():
        assert kept[op] - fused[op] >= per_attention * attentions, (op, dict(kept), dict(fused))


def test_multihead_attention_runs_batch_first():
    """torchvision's nn.MultiheadAttention transposes each block to sequence-first and back around the
    projections and the attention; batch-first-attention runs the block batch-first, so both Transposes
    of every attention go (the outputs still match onnxruntime at batch 1 and 3:
    test_default_exports_match_unoptimized_and_onnxruntime)."""
    path = os.path.join(MODELS, "vit_torchvision.onnx")
    kept = ops_after(kiln.Engine.build(path, disabled_passes=["batch-first-attention"]))
    fused = ops_after(kiln.Engine.build(path))
    assert fused["Attention"] == kept["Attention"] == FUSED["vit_torchvision"]
    assert kept["Transpose"] - fused["Transpose"] == 2 * fused["Attention"], (dict(kept), dict(fused))


def test_grouped_heads_are_not_repeated():
    """Llama's grouped-query attention repeats each K/V head for its query heads (Unsqueeze, Expand,
    Reshape) and transposes K for the product; the fused op reads the 2 K/V heads in place
    (kv_num_heads), so per attention those copies go (Expand x2, Transpose of K) and Q's heads are read
    as the rotary embedding leaves them (heads_first)."""
    path = os.path.join(MODELS, "llama_gqa_default.onnx")
    kept = ops_after(kiln.Engine.build(path, opt_level=1))
    fused = ops_after(kiln.Engine.build(path))
    assert fused["Attention"] == 2
    assert kept["Expand"] - fused["Expand"] >= 2 * 2, (dict(kept), dict(fused))
    assert kept["Transpose"] - fused["Transpose"] >= 2, (dict(kept), dict(fused))


@pytest.mark.parametrize("fixed", [False, True])
def test_rotary_embeddings_fuse(fixed):
    """Llama's rotary embeddings (x·cos + rotate_half(x)·sin on Q and K) become one kiln.Rotary each, with
    dynamic shapes (where the half width is the export's Shape/Gather/Div) and fixed ones; the engine
    still matches onnxruntime."""
    path = os.path.join(MODELS, "llama_gqa_default.onnx")
    feeds = feeds_for("llama_gqa_default", 3, np.random.default_rng(7))
    profiles = [{k: (list(v.shape),) * 3 for k, v in feeds.items()}] if fixed else None
    engine = kiln.Engine.build(path, profiles=profiles)
    ops = ops_after(engine)
    assert ops["Rotary"] == 4 and ops["Neg"] == 0 and ops["RMSNormalization"] == 1, dict(ops)
    assert ops["SkipLayerNorm"] == 4, dict(ops)  # each residual Add + RMSNorm: one kernel
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(run(engine, feeds), want, rtol=1e-4, atol=1e-4)
