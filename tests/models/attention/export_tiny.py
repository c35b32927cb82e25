"""Exports the tiny attention models under tests/models/attention/ — each network built the way its
library builds it by default (transformers' default attention implementation, torchvision's and timm's
own modules), random weights (seeded), exported with torch.onnx.export's TorchScript exporter at
opset 17 with a dynamic batch (and sequence) axis, as users export. Run where torch, transformers and
timm are installed:  python export_tiny.py OUT_DIR
The committed files were made with torch 2.11, transformers and timm on the GPU machine (versions in
versions.json)."""
import inspect
import json
import sys

import torch

out = sys.argv[1]
torch.manual_seed(0)
extra = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
versions = {"torch": torch.__version__}


def export(name, net, args, names, dynamic):
    net.eval()
    with torch.no_grad():
        torch.onnx.export(net, args, f"{out}/{name}.onnx", opset_version=17, input_names=names,
                          output_names=["y"], dynamic_axes=dynamic, **extra)
    print("exported", name)


def text_models():
    import transformers as tf
    versions["transformers"] = tf.__version__
    small = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                 vocab_size=128, max_position_embeddings=64)
    ids = torch.randint(0, 128, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.int64)
    mask[1, 11:] = 0
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}}

    class Hidden(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask)[0]

    bert = tf.BertModel(tf.BertConfig(**small))
    print("bert attention:", bert.config._attn_implementation)
    export("bert_default", Hidden(bert), (ids, mask), ["input_ids", "attention_mask"], dyn)
    gpt2 = tf.GPT2LMHeadModel(tf.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=128, n_positions=64,
                                            use_cache=False))
    print("gpt2 attention:", gpt2.config._attn_implementation)
    export("gpt2_default", Hidden(gpt2), (ids, mask), ["input_ids", "attention_mask"], dyn)
    llama = tf.LlamaForCausalLM(tf.LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                               num_key_value_heads=2, intermediate_size=128, vocab_size=128,
                                               max_position_embeddings=64, use_cache=False))
    print("llama attention:", llama.config._attn_implementation)
    export("llama_gqa_default", Hidden(llama), (ids, mask), ["input_ids", "attention_mask"], dyn)


def vision_models():
    x = torch.randn(2, 3, 32, 32)
    dyn = {"x": {0: "batch"}, "y": {0: "batch"}}
    import torchvision
    versions["torchvision"] = torchvision.__version__
    from torchvision.models.vision_transformer import VisionTransformer
    # In eval mode nn.MultiheadAttention takes its fused fast path, which the TorchScript exporter
    # cannot export (aten::_native_multi_head_attention); users turn it off to export.
    torch.backends.mha.set_fastpath_enabled(False)
    vit = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128,
                            num_classes=10)
    export("vit_torchvision", vit, (x,), ["x"], dyn)
    import timm
    versions["timm"] = timm.__version__
    from timm.models.swin_transformer import SwinTransformer
    swin = SwinTransformer(img_size=64, patch_size=4, window_size=4, embed_dim=32, depths=(2, 2), num_heads=(2, 4),
                           num_classes=10)
    export("swin_timm", swin, (torch.randn(2, 3, 64, 64),), ["x"], dyn)
    timm_vit = timm.models.vision_transformer.VisionTransformer(img_size=32, patch_size=8, embed_dim=64, depth=2,
                                                                 num_heads=4, num_classes=10)
    export("vit_timm", timm_vit, (x,), ["x"], dyn)


if "--vision-only" not in sys.argv:
    text_models()
vision_models()
json.dump(versions, open(f"{out}/versions.json", "w"), indent=1)
