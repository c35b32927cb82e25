"""ONNX Runtime's com.microsoft MultiHeadAttention and GroupQueryAttention (#44), lowered to the opset-23
Attention op (passes/lower_contrib.cpp): each single-node model is built here and run by kiln (opt
levels 0 and 2) and by onnxruntime's CPU provider on the same random float32 inputs."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import kiln
from test_contrib_ops import MS, f32, kiln_engine, model, ort_run

RNG = np.random.default_rng(4444)
TOL = dict(rtol=2e-5, atol=2e-5)


def run_both(m, feeds, rows=None, want=None):
    """kiln's outputs at levels 0 and 2 against onnxruntime's (or `want`); `rows(i, got, want)` may
    select the part of output i that onnxruntime defines. Returns the largest difference seen."""
    want = want or ort_run(m, feeds)
    worst = 0.0
    for level in (0, 2):
        got = kiln_engine(m, level).create_context().run(feeds)
        assert len(got) == len(want)
        for i, (g, w) in enumerate(zip(got, want)):
            g = np.asarray(g)
            assert g.shape == w.shape, (i, g.shape, w.shape)
            if rows:
                g, w = rows(i, g, w)
            np.testing.assert_allclose(g, w, err_msg=f"output {i}, opt level {level}", **TOL)
            worst = max(worst, float(np.abs(g - w).max()) if g.size else 0.0)
    print(f"max |kiln - onnxruntime| = {worst:.3g}")
    return worst


def node_model(op, ins, feeds, outs, **attrs):
    names = [k if k else "" for k in ins]
    while names and names[-1] == "":
        names.pop()
    node = helper.make_node(op, names, outs, domain=MS, **attrs)
    return model([node], feeds, outs)


# ---- MultiHeadAttention

@pytest.mark.parametrize("form", ["separate", "bias", "packed_kv", "packed_qkv", "bnsh_kv"])
@pytest.mark.parametrize("B,S,L,N,H", [(2, 5, 5, 2, 8), (1, 3, 7, 4, 4)])
def test_mha_forms(form, B, S, L, N, H):
    """Q, K, V as separate 3-D inputs (with or without the bias), packed KV [B, L, N, 2, H], packed QKV
    [B, S, N, 3, H] (self-attention: L = S), and K, V already split into heads [B, N, L, H].
    onnxruntime's CPU provider has neither packed form: they are compared with it on the same Q, K and
    V unpacked."""
    if form == "packed_qkv":
        L = S
    D = N * H
    feeds, ins = {}, []
    if form == "packed_qkv":
        feeds["qkv"] = f32(B, S, N, 3, H)
        ins = ["qkv"]
    elif form == "packed_kv":
        feeds.update(q=f32(B, S, D), kv=f32(B, L, N, 2, H))
        ins = ["q", "kv"]
    elif form == "bnsh_kv":
        feeds.update(q=f32(B, S, D), k=f32(B, N, L, H), v=f32(B, N, L, H))
        ins = ["q", "k", "v"]
    else:
        feeds.update(q=f32(B, S, D), k=f32(B, L, D), v=f32(B, L, D))
        ins = ["q", "k", "v"]
        if form == "bias":
            feeds["bias"] = f32(3 * D)
            ins.append("bias")
    want = None
    if form in ("packed_qkv", "packed_kv"):
        if form == "packed_qkv":
            q, k, v = (feeds["qkv"][:, :, :, i].reshape(B, S, D) for i in range(3))
        else:
            q, (k, v) = feeds["q"], (feeds["kv"][:, :, :, i].reshape(B, L, D) for i in range(2))
        plain = {"q": q, "k": k, "v": v}
        want = ort_run(node_model("MultiHeadAttention", ["q", "k", "v"], plain, ["y"], num_heads=N), plain)
    run_both(node_model("MultiHeadAttention", ins, feeds, ["y"], num_heads=N), feeds, want=want)


@pytest.mark.parametrize("mask,attn_bias,unidirectional,scale,Dv", [
    ("2d", False, 0, None, 16),
    ("lengths", False, 1, None, 16),
    (None, "full", 0, 0.2, 16),
    (None, "broadcast", 1, None, 8),
    ("2d", "full", 1, None, 16),
    ("3d", False, 0, None, 16),
])
def test_mha_masks(mask, attn_bias, unidirectional, scale, Dv):
    """key_padding_mask (int32 [B, L] or [B, S, L], 0: masked, or the key lengths [B]), attention_bias ([B, N, S, L] or
    [1, 1, S, L]), unidirectional, scale, and a value head size other than the key's."""
    B, S, L, N, D = 2, 6, 6, 2, 16
    feeds = {"q": f32(B, S, D), "k": f32(B, L, D), "v": f32(B, L, Dv)}
    ins = ["q", "k", "v", ""]
    if mask == "2d":
        feeds["mask"] = np.array([[1] * L, [1, 1, 1, 1, 0, 0]], np.int32)
    elif mask == "3d":
        feeds["mask"] = (RNG.random((B, S, L)) > 0.3).astype(np.int32)
        feeds["mask"][:, :, 0] = 1
    elif mask == "lengths":
        feeds["mask"] = np.array([L, 4], np.int32)
    ins.append("mask" if mask else "")
    if attn_bias:
        feeds["ab"] = f32(B, N, S, L) if attn_bias == "full" else f32(1, 1, S, L)
    ins.append("ab" if attn_bias else "")
    attrs = {"num_heads": N, "unidirectional": unidirectional}
    if scale is not None:
        attrs["scale"] = scale
    run_both(node_model("MultiHeadAttention", ins, feeds, ["y"], **attrs), feeds)


@pytest.mark.parametrize("S,P,unidirectional,mask", [(1, 5, 1, None), (3, 4, 1, "2d"), (4, 2, 0, None),
                                                     (2, 5, 1, "lengths")])
def test_mha_past_present(S, P, unidirectional, mask):
    """past_key/past_value [B, N, P, H] and present outputs [B, N, P + S, H]: a decode step (S = 1) and
    chunks, causal (query i sees keys up to P + i) or not, with a key padding mask or key lengths over
    all P + S keys."""
    B, N, H = 2, 2, 8
    D = N * H
    feeds = {"q": f32(B, S, D), "k": f32(B, S, D), "v": f32(B, S, D), "bias": f32(3 * D),
             "pk": f32(B, N, P, H), "pv": f32(B, N, P, H)}
    ins = ["q", "k", "v", "bias", "", "", "pk", "pv"]
    if mask == "2d":
        feeds["mask"] = np.ones((B, P + S), np.int32)
        feeds["mask"][1, :2] = 0
    elif mask == "lengths":
        feeds["mask"] = np.array([P + S, P + S - 3], np.int32)
    if mask:
        ins[4] = "mask"
    m = node_model("MultiHeadAttention", ins, feeds, ["y", "present_key", "present_value"], num_heads=N,
                   unidirectional=unidirectional)
    run_both(m, feeds)


def test_mha_refusals():
    B, S, D = 1, 2, 8
    feeds = {"q": f32(B, S, D), "k": f32(B, S, D), "v": f32(B, S, D), "len": np.array([2, 0, 2, 1, 2], np.int32)}
    m = node_model("MultiHeadAttention", ["q", "k", "v", "", "len"], feeds, ["y"], num_heads=2)
    with pytest.raises(kiln.KilnError, match=r"MultiHeadAttention.*3 \* batch \+ 2"):
        kiln_engine(m, 2)
    m = node_model("MultiHeadAttention", ["q", "k", "v"], feeds, ["y", "pk", "pv", "qk"], num_heads=2)
    with pytest.raises(kiln.KilnError, match=r"MultiHeadAttention.*qk"):
        kiln_engine(m, 2)


# ---- GroupQueryAttention

def gqa_model(B, S, N, Nkv, H, P, seqlens, total, packed=False, rotary=None, window=-1, scale=None,
              max_pos=32):
    feeds = {}
    if packed:
        feeds["q"] = f32(B, S, (N + 2 * Nkv) * H)
        ins = ["q", "", ""]
    else:
        feeds.update(q=f32(B, S, N * H), k=f32(B, S, Nkv * H), v=f32(B, S, Nkv * H))
        ins = ["q", "k", "v"]
    if P is not None:
        feeds.update(pk=f32(B, Nkv, P, H), pv=f32(B, Nkv, P, H))
        ins += ["pk", "pv"]
    else:
        ins += ["", ""]
    feeds["seqlens_k"] = np.asarray(seqlens, np.int32)
    feeds["total"] = np.array(total, np.int32)
    ins += ["seqlens_k", "total"]
    attrs = {"num_heads": N, "kv_num_heads": Nkv}
    if rotary:
        angles = RNG.random((max_pos, rotary // 2)).astype(np.float32) * 6
        feeds.update(cos=np.cos(angles), sin=np.sin(angles))
        ins += ["cos", "sin"]
        attrs["do_rotary"] = 1
    if window > 0:
        attrs["local_window_size"] = window
    if scale is not None:
        attrs["scale"] = scale
    return node_model("GroupQueryAttention", ins, feeds, ["y", "present_key", "present_value"], **attrs), feeds


@pytest.mark.parametrize("B,S,N,Nkv,H,packed,rotary,window", [
    (2, 5, 4, 2, 16, False, None, -1),
    (1, 6, 4, 1, 16, True, None, -1),
    (2, 4, 2, 2, 16, False, 16, -1),
    (2, 5, 6, 3, 32, False, 16, -1),
    (1, 7, 4, 2, 16, True, 16, 3),
])
def test_gqa_prompt(B, S, N, Nkv, H, packed, rotary, window):
    """The prompt (total_sequence_length = S, no past or an empty one): causal, GQA heads, packed QKV,
    rotary over the whole head or its first half, a local window."""
    m, feeds = gqa_model(B, S, N, Nkv, H, 0 if B == 2 else None, [S - 1] * B, S, packed, rotary, window)
    run_both(m, feeds)


@pytest.mark.parametrize("B,N,Nkv,H,P,seqlens,rotary,window,interleaved", [
    (2, 4, 2, 16, 6, [6, 6], None, -1, 0),
    (2, 4, 2, 16, 6, [6, 3], 16, -1, 0),      # rows of different lengths: row 1's past is 3 of 6
    (3, 8, 2, 16, 5, [5, 2, 4], 16, -1, 1),
    (2, 4, 4, 16, 9, [9, 7], None, 4, 0),
])
def test_gqa_decode(B, N, Nkv, H, P, seqlens, rotary, window, interleaved):
    """One decode step (S = 1): row b's past is seqlens_k[b] of past_key's P positions, its new key goes
    to position seqlens_k[b] of the present [B, Nkv, P + 1, H] (zeros after it), rotary at that position."""
    m, feeds = gqa_model(B, 1, N, Nkv, H, P, seqlens, P + 1, rotary=rotary, window=window)
    if interleaved:
        m.graph.node[0].attribute.append(helper.make_attribute("rotary_interleaved", 1))
    run_both(m, feeds)


@pytest.mark.parametrize("S,P,seqlen,rotary", [(3, 4, 6, 16), (2, 7, 8, None)])
def test_gqa_chunk(S, P, seqlen, rotary):
    """A later chunk of a prompt (batch 1, 1 < S < total): the past is seqlen + 1 - S positions of
    past_key's P."""
    m, feeds = gqa_model(1, S, 4, 2, 16, P, [seqlen], seqlen + 1, rotary=rotary)
    run_both(m, feeds)


def test_gqa_prompt_in_a_longer_buffer():
    """A prompt (S = total) with a past buffer longer than it: the presents keep the buffer's length,
    zeros after the prompt."""
    m, feeds = gqa_model(2, 5, 4, 2, 16, 8, [4, 4], 5, rotary=16)
    run_both(m, feeds)


def test_gqa_padded_prompt():
    """A right-padded prompt: row 1 holds 3 tokens of 5. onnxruntime leaves its queries past the
    length undefined: only the defined rows (and the whole presents) are compared."""
    B, S, N, Nkv, H = 2, 5, 4, 2, 16
    m, feeds = gqa_model(B, S, N, Nkv, H, None, [4, 2], S, rotary=None)

    def rows(i, g, w):
        if i:
            return g, w
        return np.concatenate([g[0], g[1, :3]]), np.concatenate([w[0], w[1, :3]])

    run_both(m, feeds, rows)


def with_input(m, feeds, index, name, value):
    """m with input `index` of its node fed `value`."""
    node = m.graph.node[0]
    while len(node.input) <= index:
        node.input.append("")
    node.input[index] = name
    m.graph.input.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype),
                                                       value.shape))
    feeds[name] = value


@pytest.mark.parametrize("S,P,seqlens,softcap,smooth,bias,position_ids,window", [
    (5, None, [4, 4], 2.0, False, False, False, -1),          # prompt, softcap
    (1, 6, [6, 4], 1.5, True, False, False, -1),              # decode, softcap and smooth softmax
    (4, None, [3, 3], 0.0, True, False, False, 2),            # smooth softmax in a window
    (1, 5, [5, 5], 0.0, False, True, False, -1),              # attention_bias [B, N, 1, T]
    (4, None, [3, 3], 3.0, False, "broadcast", True, -1),     # attention_bias [1, 1, S, T], position_ids
    (1, 5, [5, 3], 0.0, False, False, True, -1),              # decode at position_ids
    ("chunk", 4, [6], 0.0, False, False, True, -1),           # a later chunk at position_ids
])
def test_gqa_softcap_smooth_bias_positions(S, P, seqlens, softcap, smooth, bias, position_ids, window):
    """softcap (cap · tanh(score / cap)), smooth_softmax (a softmax with one more logit, 0),
    attention_bias (added after softcap) and position_ids (the rotary positions: all of them in a
    decode step or a later chunk; of a prompt's, onnxruntime 1.22 reads only position_ids[0, 0] and
    counts on from it in every row)."""
    B, N, Nkv, H = 2, 4, 2, 16
    total = S if P is None else P + 1
    if S == "chunk":
        B, S, total = 1, 3, seqlens[0] + 1
    m, feeds = gqa_model(B, S, N, Nkv, H, P, seqlens, total, rotary=16 if position_ids else None, window=window)
    node = m.graph.node[0]
    if softcap:
        node.attribute.append(helper.make_attribute("softcap", softcap))
    if smooth:
        node.attribute.append(helper.make_attribute("smooth_softmax", 1))
    if position_ids:
        with_input(m, feeds, 9, "pos", RNG.integers(0, 30, (B, S)).astype(np.int64))
    if bias:
        with_input(m, feeds, 10, "ab", f32(B, N, S, total) if bias is True else f32(1, 1, S, total))
    run_both(m, feeds)


def test_gqa_refusals():
    m, feeds = gqa_model(1, 2, 2, 1, 16, None, [1], 2)
    m.graph.node[0].attribute.append(helper.make_attribute("smooth_softmax", 1))
    with_input(m, feeds, 10, "ab", f32(1, 2, 2, 2))
    with pytest.raises(kiln.KilnError, match=r"GroupQueryAttention.*smooth_softmax with attention_bias"):
        kiln_engine(m, 2)
    m, feeds = gqa_model(1, 2, 3, 2, 16, None, [1], 2)
    with pytest.raises(kiln.KilnError, match=r"GroupQueryAttention.*multiple of kv_num_heads"):
        kiln_engine(m, 2)
