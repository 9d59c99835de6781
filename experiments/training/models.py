"""The networks the suite trains: the papers' CIFAR ResNet-18 and a tiny CNN for tests.

`ResNet18` is the CIFAR variant of kuangliu/pytorch-cifar that the Overlap-Local-SGD reference
code uses (algorithms.md section 9): a 3x3 stride-1 stem and no max-pool, so 32x32 inputs keep
their resolution into the first stage. At width 64 it has 11,173,962 parameters and 9,600 BN
running-stat values; the communication closed forms (bytes per round, PowerSGD's compression
ratios) are stated for exactly this network, so the tests pin both numbers.

One deviation from kuangliu: the head pools with `AdaptiveAvgPool2d(1)` instead of
`avg_pool2d(4)`. On 32x32 inputs the last stage is 4x4, so the two are the same operation; the
adaptive pool also accepts 8x8 digits (a 1x1 last stage), which the fixed 4x4 window would reject.
"""

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from experiments.data.params import check_model


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers with an identity (or 1x1 conv+BN) shortcut, as in He et al. 2016."""

    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        # Projection only where the shape changes (option B of the ResNet paper), so the
        # parameter count matches the reference network exactly.
        self.shortcut: nn.Module = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    """CIFAR ResNet-18: stem, four stages of two BasicBlocks (width, 2w, 4w, 8w), pool, linear."""

    # Between its Conv2d, BatchNorm2d and Linear layers the forward acts on each channel alone
    # (ReLU, sums, pooling, flatten), so m replicas can run as one model with m times the
    # channels, grouped by replica (the batched in-process workers: experiments/workers/
    # batched.py). A forward that mixes channels otherwise must not say so.
    replicas_groupable = True

    def __init__(self, num_classes: int = 10, in_channels: int = 3, width: int = 64) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        stages = []
        in_planes = width
        for i, stride in enumerate((1, 2, 2, 2)):
            planes = width * 2**i
            stages.append(
                nn.Sequential(BasicBlock(in_planes, planes, stride), BasicBlock(planes, planes, 1))
            )
            in_planes = planes
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.linear = nn.Linear(in_planes, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        return self.linear(torch.flatten(self.pool(out), 1))


class TinyCNN(nn.Module):
    """Two conv-BN-ReLU layers (the second halves the resolution), global pool, linear.

    Small enough that multi-process tests run in seconds on a CPU, yet it has BatchNorm, so the
    tests exercise the same BN-buffer handling (never averaged in training, averaged for the
    consensus evaluation) as the ResNet.
    """

    replicas_groupable = True  # as ResNet18's

    def __init__(self, in_channels: int, num_classes: int, width: int = 8) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.linear = nn.Linear(2 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(torch.flatten(self.features(x), 1))


def build_model(cfg: Mapping, in_channels: int, num_classes: int) -> nn.Module:
    """Build the network named by the Hydra `model` node (`name`, `width`) for a dataset's shape."""
    name, width = cfg["name"], check_model(cfg)  # torch-free (the pre-flight's)
    if name == "resnet18":
        return ResNet18(num_classes=num_classes, in_channels=in_channels, width=width)
    return TinyCNN(in_channels, num_classes, width=width)
