#!/usr/bin/env python3
"""A small trained CNN with real accuracy to measure: scikit-learn's handwritten digits.

The zoo's models have random weights, which say nothing about accuracy (their reduced-precision
error is whatever the random network amplifies: a random-weight ResNet-50 is 3e-2 from its float32
output in PyTorch's own model.half() as in kiln's FP16 engine). This script trains a ResNet-style
CNN (3x3 convolutions with BatchNorm and ReLU, residual blocks, strided stages, global average pool,
a linear head) on scikit-learn's 8x8 digits, upsampled to 32x32, and exports it to ONNX with a
dynamic batch axis, next to its held-out test set:

    OUT/digits_cnn.onnx          the trained model (opset 17, input "x" [N,1,32,32], output "logits")
    OUT/digits_test_x.npy        the test images, float32 [360,1,32,32]
    OUT/digits_test_y.npy        their labels, int64 [360]
    OUT/digits_calib_x.npy       256 training images (never test images), for INT8 calibration
    OUT/digits_cnn.json          training record: seed, epochs, float32 test accuracy in PyTorch

With --arch mlp it trains a multilayer perceptron instead (Flatten, Linear 1024→256, ReLU, Linear
256→128, ReLU, Linear 128→10), written as OUT/digits_mlp.onnx: a model made of matrix products, for
the engines that quantize only those (FP8, `--precision fp8`).

Needs PyTorch and scikit-learn (in .venv-zoo: `.venv-zoo/bin/python -m pip install scikit-learn`).
Usage: bench/zoo/digits_cnn.py [--out build/digits] [--epochs 30] [--arch cnn|mlp]
Then bench/digits_accuracy.py measures kiln's engines of it (each precision) on the test set.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np


def data(seed: int, digits_npz: str | None = None):
    if digits_npz:  # the same dataset saved with np.savez(images=..., target=...), for machines without scikit-learn
        d = np.load(digits_npz)
        images, target = d["images"], d["target"]
    else:
        from sklearn.datasets import load_digits  # noqa: PLC0415

        d = load_digits()
        images, target = d.images, d.target
    x = (images.astype(np.float32) / 16.0)[:, None]  # [1797, 1, 8, 8] in [0, 1]
    x = np.repeat(np.repeat(x, 4, axis=2), 4, axis=3)  # nearest upsampling to 32x32
    x = (x - 0.5) / 0.5
    y = target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    test, train = order[:360], order[360:]
    return x[train], y[train], x[test], y[test]


def build_model():
    import torch.nn as nn  # noqa: PLC0415

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.short = None
            if stride != 1 or cin != cout:
                self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            self.relu = nn.ReLU()

        def forward(self, x):
            y = self.relu(self.b1(self.c1(x)))
            y = self.b2(self.c2(y))
            return self.relu(y + (x if self.short is None else self.short(x)))

    return nn.Sequential(
        nn.Conv2d(1, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        Block(32, 32, 1), Block(32, 32, 1),
        Block(32, 64, 2), Block(64, 64, 1),
        Block(64, 128, 2), Block(128, 128, 1),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))


def build_mlp():
    import torch.nn as nn  # noqa: PLC0415

    return nn.Sequential(nn.Flatten(), nn.Linear(1024, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="build/digits")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--digits-npz", help="read the digits from this .npz (images, target) instead of scikit-learn")
    ap.add_argument("--arch", choices=["cnn", "mlp"], default="cnn")
    a = ap.parse_args()

    import torch  # noqa: PLC0415

    torch.manual_seed(a.seed)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    xtr, ytr, xte, yte = data(a.seed, a.digits_npz)
    net = build_model() if a.arch == "cnn" else build_mlp()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=a.epochs * ((len(ytr) + 63) // 64))
    gen = np.random.default_rng(a.seed)
    xt, yt = torch.from_numpy(xtr), torch.from_numpy(ytr)
    for epoch in range(a.epochs):
        net.train()
        order = torch.from_numpy(gen.permutation(len(ytr)))
        total = 0.0
        for i in range(0, len(ytr), 64):
            idx = order[i:i + 64]
            xb = xt[idx]
            # Light augmentation: shifts by up to 2 pixels.
            dx, dy = (int(v) for v in gen.integers(-2, 3, size=2))
            xb = torch.roll(xb, shifts=(dy, dx), dims=(2, 3))
            loss = torch.nn.functional.cross_entropy(net(xb), yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += float(loss) * len(idx)
        if epoch % 5 == 4 or epoch == a.epochs - 1:
            print(f"epoch {epoch + 1}: train loss {total / len(ytr):.4f}", flush=True)
    net.eval()
    with torch.no_grad():
        logits = net(torch.from_numpy(xte))
    acc = float((logits.argmax(1).numpy() == yte).mean())
    print(f"float32 test accuracy (PyTorch): {acc:.4f} on {len(yte)} images", flush=True)

    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"digits_{a.arch}.onnx")
    torch.onnx.export(net, torch.from_numpy(xte[:1]), path, input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}}, opset_version=17, do_constant_folding=True)
    np.save(os.path.join(a.out, "digits_test_x.npy"), xte)
    np.save(os.path.join(a.out, "digits_test_y.npy"), yte)
    np.save(os.path.join(a.out, "digits_calib_x.npy"), xtr[:256])
    np.save(os.path.join(a.out, f"digits_test_logits_torch{'' if a.arch == 'cnn' else '_mlp'}.npy"), logits.numpy())
    with open(os.path.join(a.out, f"digits_{a.arch}.json"), "w") as f:
        json.dump({"seed": a.seed, "epochs": a.epochs, "train": int(len(ytr)), "test": int(len(yte)),
                   "torch": torch.__version__, "float32_test_accuracy_torch": acc}, f, indent=1)
    print(f"wrote {path}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
