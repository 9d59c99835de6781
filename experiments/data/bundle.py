"""What every dataset loader builds and what they share: the `DataBundle` a loader returns, the
in-memory image dataset, CIFAR-10's crop-and-flip augmentation and the one-line error text.
Apart from experiments/data/datasets.py, which picks the loader, because the loaders
(experiments/data/cifar10.py, experiments/data/fashion_mnist.py) build these and datasets.py
imports the loaders: kept there, the two would import each other."""

import re
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Dataset


@dataclass
class DataBundle:
    """A loaded dataset and the facts the partitioner and model builder need about it."""

    name: str
    train: Dataset  # items (x: float32 [C, H, W], y: int); augmented if the dataset has it
    test: Dataset  # same, never augmented
    train_labels: np.ndarray  # int64, len(train), in dataset order (the partitioner's input)
    num_classes: int
    in_channels: int
    image_size: int
    augment: "CropFlip | None" = None  # random training augmentation (`Augmented`), if any


class TensorImageDataset(Dataset):
    """Images and labels already in memory as tensors; items are (x, int y) like torchvision's."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        assert len(images) == len(labels)
        self.images = images
        self.labels = labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.images[index], int(self.labels[index])

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, int]]:
        """A batch's items in one indexing (what the DataLoader asks a Subset of it for): the
        same items as `__getitem__`'s, without a Python call per sample (the in-process
        workers of seeds in lock-step fetch S x m batches a step)."""
        index = torch.as_tensor(indices, dtype=torch.long)
        return list(zip(self.images[index].unbind(0), self.labels[index].tolist(), strict=True))


def one_line(text: object, limit: int = 160) -> str:
    """Squash an exception message onto one short line: the UserError contract is one line."""
    line = re.sub(r"\s+", " ", str(text)).strip()
    return line if len(line) <= limit else line[: limit - 3] + "..."


@dataclass(frozen=True)
class CropFlip:
    """torchvision's `RandomCrop(size, padding)` + `RandomHorizontalFlip()` (the papers'
    CIFAR-10 augmentation), with the random numbers drawn by the caller from a generator of
    its own (`draw`) and applied to the normalised image (`apply`): the padding takes `fill`,
    the value a black pixel normalises to, so the result is what cropping and flipping the
    image before normalisation gives, bit for bit. torchvision's transforms draw from torch's
    global generator, which the worker threads of `cluster=sim` share."""

    padding: int
    fill: tuple[float, ...]  # per channel: (0 - mean) / std, as the normalisation computes it

    def draw(self, n: int, generator: torch.Generator) -> list[tuple[int, int, bool]]:
        """Parameters of `n` samples: crop offsets (top, left) in [0, 2 * padding] and a flip."""
        offsets = torch.randint(0, 2 * self.padding + 1, (n, 2), generator=generator)
        flips = torch.rand(n, generator=generator) < 0.5
        return [(i, j, f) for (i, j), f in zip(offsets.tolist(), flips.tolist(), strict=True)]

    def apply(self, x: torch.Tensor, params: tuple[int, int, bool]) -> torch.Tensor:
        """The crop (of the image padded by `padding` on every side) and flip of `x` [C, H, W]."""
        top, left, flip = params
        c, h, w = x.shape
        p = self.padding
        padded = (
            torch.tensor(self.fill, dtype=x.dtype).view(c, 1, 1).repeat(1, h + 2 * p, w + 2 * p)
        )
        padded[:, p : p + h, p : p + w] = x
        out = padded[:, top : top + h, left : left + w]
        return (out.flip(-1) if flip else out).contiguous()
