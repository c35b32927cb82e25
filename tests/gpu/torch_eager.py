"""PyTorch eager FP32 (TF32 off) on the GPU: ResNet-50 and BERT-base (seq 128) at batch 1 and 64.

Medians of CUDA-event times after warm-up; used by the GPU check scripts next to kiln's numbers."""

import statistics

import torch
import torchvision
import transformers

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def med(fn, n, w):
    for _ in range(w):
        fn()
    ts = []
    for _ in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    return statistics.median(ts)


with torch.inference_mode():
    r = torchvision.models.resnet50(weights=None).cuda().eval()
    bert = transformers.BertModel(transformers.BertConfig()).cuda().eval()
    for b in (1, 64):
        x = torch.randn(b, 3, 224, 224, device="cuda")
        print(f"torch eager ResNet-50 batch {b}: {med(lambda: r(x), 30, 5):.3f} ms")
        ids = torch.randint(0, 30522, (b, 128), device="cuda")
        print(f"torch eager BERT-base batch {b}: {med(lambda: bert(input_ids=ids), 20, 3):.3f} ms")
