"""Is our torch ResNet-50 as fast as ResNet-50 written directly in PyTorch? (issue: foundation)

The reference is a hand-written bottleneck ResNet-50 in plain idiomatic PyTorch (the same
architecture: stride on the first 1x1 as in He et al.; torch's default SGD with momentum),
trained with the usual loop. Ours is dlbench's torch backend ``train_step`` closure. Same batch,
same threads, same weights, same process; the two are timed step by step in alternation (the order
reversed every round) so that machine noise hits both alike.
Target: ours >= 0.97x the plain loop's throughput.
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F
from _common import header, interleaved, ratio_ci
from torch import nn


class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 1, stride, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, width * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(width * 4)
        self.relu = nn.ReLU(inplace=True)
        self.down = None
        if stride != 1 or cin != width * 4:
            self.down = nn.Sequential(nn.Conv2d(cin, width * 4, 1, stride, bias=False), nn.BatchNorm2d(width * 4))

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class PlainResNet50(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for i, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512), strict=True)):
            for b in range(blocks):
                layers.append(Bottleneck(cin, width, 2 if i > 0 and b == 0 else 1))
                cin = width * 4
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(2048, classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1), 1))


def plain_step(model, x, y):
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def ours_step(batch_size: int, image: int):
    from dlbench.data import make_batch
    from dlbench.frameworks import get_backend
    from dlbench.models import get_model
    from dlbench.models.weights import init_weights
    from dlbench.scenarios.timed import make_closure

    backend = get_backend("torch")
    spec = get_model("resnet-50", image_size=image)
    model = backend.build(spec, init_weights(spec, 0))
    placed = backend.place(make_batch(spec, batch_size), model)
    return make_closure("train_step", backend, model, placed, spec), placed, spec, model.net


def copy_weights(src: nn.Module, dst: nn.Module) -> None:
    """Give the plain model dlbench's canonical weights (parameters and BN statistics in the same
    order): the two then compute the same function, and value-dependent costs are equal too."""
    with torch.no_grad():
        for a, b in zip(src.parameters(), dst.parameters(), strict=True):
            assert a.shape == b.shape, (a.shape, b.shape)
            b.copy_(a)
        for a, b in zip(src.buffers(), dst.buffers(), strict=True):
            b.copy_(a)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--rounds", type=int, default=12, help="timed steps of each, alternating")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ours, placed, spec, net = ours_step(args.batch, args.image)
    plain_model = PlainResNet50(spec.input.classes)
    plain_params = sum(p.numel() for p in plain_model.parameters())
    assert plain_params == spec.param_count, (plain_params, spec.param_count)
    copy_weights(net, plain_model)
    plain = plain_step(plain_model, placed["x"], placed["y"])
    first = [float(fn().detach()) for fn in (ours, plain)]  # same weights, same batch: the same loss
    assert abs(first[0] - first[1]) <= 1e-4 * abs(first[1]), first
    interleaved({"ours": ours, "plain": plain}, 2)  # warm-up
    t = interleaved({"ours": ours, "plain": plain}, args.rounds)
    t_ours, t_plain = t["ours"], t["plain"]
    mo, mp = statistics.median(t_ours), statistics.median(t_plain)
    lo, hi = ratio_ci(t_plain, t_ours)
    print(header("torch fidelity: dlbench resnet-50 train_step vs plain PyTorch"))
    print(f"- batch {args.batch}, input {args.image}x{args.image}, {args.threads} thread(s), "
          f"{len(t_ours)} steps each, alternating step by step; both {plain_params:,} parameters, the same "
          f"weights, first losses {first[0]:.6f} / {first[1]:.6f}")
    print(f"- plain PyTorch: median {mp * 1e3:.1f} ms/step ({args.batch / mp:.2f} samples/s)")
    print(f"- dlbench torch: median {mo * 1e3:.1f} ms/step ({args.batch / mo:.2f} samples/s)")
    print(f"- throughput ratio dlbench / plain: **{mp / mo:.3f}** (bootstrap 95% CI [{lo:.3f}, {hi:.3f}]; "
          "target >= 0.97)")


if __name__ == "__main__":
    main()
