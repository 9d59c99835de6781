"""The four datasets, as map-style datasets of (float32 [C, H, W] tensor, int label).

- `cifar10`: the papers' workload (algorithms.md section 9), read with torchvision in its own
  python-pickle format, with the reference augmentation and normalisation.
- `digits`: scikit-learn's 1,797 bundled 8x8 handwritten digits. It ships with scikit-learn, so it
  is the offline default: `make demo` and the tests need neither network nor a data folder.
- `fashion_mnist`: Zalando's 60,000 + 10,000 28x28 clothing images, from its idx files
  (experiments/data/fashion_mnist.py; Debian's `dataset-fashion-mnist` package ships them), in
  memory like digits, optionally downsampled and subsampled: real images offline, at a size
  between digits' and CIFAR-10's.
- `synthetic`: class prototypes plus Gaussian noise, any size, bit-identical for a config; for
  tests and for scaling experiments that need N samples without files.

Two entry points, because data must be fetched once but read many times: `prepare_dataset` runs in
the parent process before any worker starts (it may download, and turns every problem into a
one-line `UserError`); `load_dataset` runs in each worker and never downloads, so 16 ranks never
race to write the same archive. (Fashion-MNIST's loading may decompress a local copy into its
root, atomically, when the runner's pre-flight has not already done it: no download.)

Random numbers: a worker's data order and its augmentation (CIFAR-10's crop and flip) come from
one explicit generator, its sampler's (`ResumableRandomSampler`): the sampler draws the epoch's
permutation, then each sample's augmentation parameters (`Augmented.keys`), and hands the
loader keys (index, parameters). Nothing draws from torch's global generator, so the workers of
`cluster=sim` (threads of one process, which share that generator) draw exactly the numbers of
worker processes, whether the loader uses worker processes or not, and a run resumed mid-epoch
restores the whole stream from the generator's state at the epoch's start.
"""

import dataclasses
import itertools
from collections.abc import Mapping

import numpy as np
import torch
from torch.utils.data import Dataset, RandomSampler

from experiments.data.bundle import CropFlip, DataBundle, TensorImageDataset, one_line
from experiments.data.params import (  # torch-free: what the pre-flight checks
    _int,  # noqa: F401 - fashion_mnist.py's
    digits_params,
)
from experiments.data.params import synthetic_params as _synthetic_params
from experiments.data.params import unknown_dataset as _unknown
from experiments.data.params import validation_fraction as _validation_fraction
from experiments.errors import UserError


def prepare_dataset(cfg: Mapping) -> None:
    """Make sure the data is there (downloading CIFAR-10 if allowed, decompressing Debian's
    Fashion-MNIST into dataset.root when missing there) and the config is valid."""
    _validation_fraction(cfg)
    name = cfg.get("name")
    if name == "cifar10":
        from experiments.data import cifar10  # torchvision costs seconds to import: only when used

        cifar10.prepare(cfg)
    elif name == "fashion_mnist":
        from experiments.data import fashion_mnist

        fashion_mnist.prepare(cfg)
    elif name == "digits":
        _load_digits(cfg)  # cheap; surfaces an impossible split before workers start
    elif name == "synthetic":
        _synthetic_params(cfg)
    else:
        _unknown(name)


def load_dataset(cfg: Mapping) -> DataBundle:
    """Load the dataset named by the Hydra `dataset` node; never downloads. With
    `validation_fraction` > 0, its `test` is the validation split held out of `train`."""
    name = cfg.get("name")
    if name == "cifar10":
        from experiments.data import cifar10

        bundle = cifar10.load(cfg)
    elif name == "fashion_mnist":
        from experiments.data import fashion_mnist

        bundle = fashion_mnist.load(cfg)
    elif name == "digits":
        bundle = _load_digits(cfg)
    elif name == "synthetic":
        bundle = _load_synthetic(cfg)
    else:
        _unknown(name)
    fraction = _validation_fraction(cfg)
    return hold_out_validation(bundle, fraction) if fraction > 0 else bundle


VALIDATION_SEED = 0  # the validation split's seed: one split for every method, seed and run


def hold_out_validation(bundle: DataBundle, fraction: float) -> DataBundle:
    """`bundle` with a stratified share `fraction` of its training split held out as its
    evaluation set (`test`), the rest as `train`: the split experiment=tune chooses learning
    rates on, so that the test set never takes part in a choice (docs/tuning.md). The
    held-out items are the dataset's own, un-augmented (augmentation is applied by the sampler's
    keys, `Augmented`, to the training items only)."""
    from sklearn.model_selection import train_test_split
    from torch.utils.data import Subset

    indices = np.arange(len(bundle.train_labels))
    try:
        train_idx, val_idx = train_test_split(
            indices,
            test_size=fraction,
            stratify=bundle.train_labels,
            random_state=VALIDATION_SEED,
        )
    except ValueError as e:
        raise UserError(
            f"{bundle.name}: cannot hold out validation_fraction={fraction:g} of"
            f" {len(indices)} training samples: {one_line(e)}"
        ) from None
    train_idx, val_idx = np.sort(train_idx), np.sort(val_idx)
    return dataclasses.replace(
        bundle,
        train=Subset(bundle.train, train_idx.tolist()),
        test=Subset(bundle.train, val_idx.tolist()),
        train_labels=bundle.train_labels[train_idx],
    )


EVAL_SUBSET_SEED = 0  # budget=time's evaluation subset: one subset for every method and seed


def labels_of(dataset) -> np.ndarray:
    """The labels of `dataset`'s items, in order (an in-memory dataset's own tensor, a
    `Subset`'s through its indices, else item by item)."""
    from torch.utils.data import Subset

    if isinstance(dataset, Subset):
        return labels_of(dataset.dataset)[np.asarray(dataset.indices)]
    labels = getattr(dataset, "labels", None)
    if labels is None:
        labels = getattr(dataset, "targets", None)
    if labels is not None:
        return np.asarray(labels)
    return np.asarray([int(dataset[i][1]) for i in range(len(dataset))])


def eval_subset(dataset, size: int | None):
    """A fixed subset of `size` items of the evaluation set `dataset`, drawn stratified by class
    (each class keeps its share; the same for every method, seed and run), in dataset order; the
    whole set when `size` is null or not smaller. budget=time scores its points before T on it
    (experiments/training/budget.py)."""
    from sklearn.model_selection import train_test_split
    from torch.utils.data import Subset

    n = len(dataset)
    if size is None or size >= n:
        return dataset
    try:
        chosen, _ = train_test_split(
            np.arange(n),
            train_size=size,
            stratify=labels_of(dataset),
            random_state=EVAL_SUBSET_SEED,
        )
    except ValueError as e:
        raise UserError(
            f"budget.eval_images={size}: cannot draw it from the {n} test images stratified by"
            f" class: {one_line(e)}"
        ) from None
    return Subset(dataset, np.sort(chosen).tolist())


# scikit-learn digits


def _load_digits(cfg: Mapping) -> DataBundle:
    """A fixed stratified split; pixels /16, then standardised with the train split's statistics.

    Scalar mean and std (not per pixel): the border pixels are almost always 0, and per-pixel
    scaling would blow their rare non-zero values up.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    params = digits_params(cfg)
    test_fraction, split_seed = params["test_fraction"], params["split_seed"]
    digits = load_digits()
    x = digits.images.astype(np.float64) / 16.0
    y = digits.target.astype(np.int64)
    try:
        x_train, x_test, y_train, y_test = train_test_split(
            x, y, test_size=test_fraction, stratify=y, random_state=split_seed
        )
    except ValueError as e:
        raise UserError(
            f"digits: cannot split {len(y)} samples with test_fraction={test_fraction}:"
            f" {one_line(e)}"
        ) from None
    mean, std = x_train.mean(), x_train.std()

    def tensors(images: np.ndarray, labels: np.ndarray) -> TensorImageDataset:
        scaled = ((images - mean) / std).astype(np.float32)[:, None]  # [N, 1, 8, 8]
        return TensorImageDataset(torch.from_numpy(scaled), torch.from_numpy(labels))

    return DataBundle(
        name="digits",
        train=tensors(x_train, y_train),
        test=tensors(x_test, y_test),
        train_labels=y_train,
        num_classes=10,
        in_channels=1,
        image_size=8,
    )


# ---------------------------------------------------------------------------------------------
# synthetic


def _generator(seed: int, stream: int) -> torch.Generator:
    """An independent torch stream per (seed, stream): SeedSequence mixes the pair into a seed."""
    state = np.random.SeedSequence([seed, stream]).generate_state(1, np.uint64)[0]
    return torch.Generator().manual_seed(int(state >> np.uint64(1)))


def _load_synthetic(cfg: Mapping) -> DataBundle:
    """x = prototype[y] + noise * N(0, I), labels balanced then permuted.

    The prototypes come from a generator seeded with `seed` itself; train and test samples come
    from two further independent streams, so the test set never repeats a training sample and
    changing num_train leaves the prototypes (and so the task) unchanged.
    """
    p = _synthetic_params(cfg)
    c, shape = p["num_classes"], (p["channels"], p["image_size"], p["image_size"])
    prototypes = torch.randn((c, *shape), generator=torch.Generator().manual_seed(p["seed"]))

    def draw(n: int, stream: int) -> TensorImageDataset:
        g = _generator(p["seed"], stream)
        labels = (torch.arange(n) % c)[torch.randperm(n, generator=g)]
        images = prototypes[labels] + p["noise"] * torch.randn((n, *shape), generator=g)
        return TensorImageDataset(images, labels)

    train, test = draw(p["num_train"], 1), draw(p["num_test"], 2)
    return DataBundle(
        name="synthetic",
        train=train,
        test=test,
        train_labels=train.labels.numpy().astype(np.int64),
        num_classes=c,
        in_channels=p["channels"],
        image_size=p["image_size"],
    )


class Augmented(Dataset):
    """A worker's training shard with random augmentation whose parameters come with the key:
    item (index, parameters) is the augmented sample, item index the plain one. `keys` pairs
    indices with parameters drawn from the caller's generator (the sampler's)."""

    def __init__(self, base: Dataset, augment: CropFlip) -> None:
        self.base, self.augment = base, augment

    def __len__(self) -> int:
        return len(self.base)

    def keys(self, indices: list[int], generator: torch.Generator) -> list[tuple]:
        return list(zip(indices, self.augment.draw(len(indices), generator), strict=True))

    def __getitem__(self, key):
        if isinstance(key, tuple):
            index, params = key
            x, y = self.base[index]
            return self.augment.apply(x, params), y
        return self.base[key]


class ResumableRandomSampler(RandomSampler):
    """torch's RandomSampler (the same order from the same generator state: what
    `DataLoader(shuffle=True, generator=g)` uses) whose next pass can skip its first `skip`
    indices: a run resumed mid-epoch restores the generator to the epoch's start and skips the
    batches it had already taken (experiments/training/loop.py). torch's samplers have no such
    position (torchdata's StatefulDataLoader has one, but is another dependency for one integer).

    On an `Augmented` dataset it yields keys (index, augmentation parameters), the parameters
    drawn from the same generator right after the epoch's permutation (module doc)."""

    skip: int = 0

    def __iter__(self):
        skip, self.skip = self.skip, 0
        keys = getattr(self.data_source, "keys", None)
        if keys is None:
            return itertools.islice(super().__iter__(), skip, None)
        if self.generator is None:
            raise ValueError("an augmented dataset needs a sampler with its own generator")
        return iter(keys(list(super().__iter__()), self.generator)[skip:])


def eval_batches(dataset, batch_size: int, device=None, dtype=None) -> list:
    """The evaluation passes' batches of `dataset` (never shuffled, never augmented: the same at
    every evaluation), made once for the run: the (x, y) pairs a `DataLoader(dataset,
    batch_size)` gives, with x on `device` in `dtype`. An in-memory dataset (or a `Subset` of
    one) is gathered in one indexing and cut into slices of it; any other dataset is read through
    its DataLoader once. Why: a DataLoader builds every batch again at each evaluation, item by
    item in Python, and in lock-step the S x m worker threads each read the whole test set
    (issue 48: 15% of an 8-seed fmnist run's samples were in the DataLoader)."""
    from torch.utils.data import DataLoader, Subset

    index, base = None, dataset
    while isinstance(base, Subset):  # a Subset's indices into its dataset, down to the images
        inner = torch.as_tensor(np.asarray(base.indices, dtype=np.int64))
        index = inner if index is None else inner[index]
        base = base.dataset
    if isinstance(base, TensorImageDataset):
        images = base.images if index is None else base.images[index]
        labels = base.labels if index is None else base.labels[index]
        x = images.to(device, dtype=dtype)
        y = labels.to(device, dtype=torch.long)
        return [
            (x[a : a + batch_size], y[a : a + batch_size]) for a in range(0, len(y), batch_size)
        ]
    return [(x.to(device, dtype=dtype), y.to(device)) for x, y in DataLoader(dataset, batch_size)]


def worker_eval_sets(
    test, rank: int, m: int, batch_size: int, device, dtype, time_budget=None
) -> tuple[list, list, list | None]:
    """Worker `rank`'s (of `m`) evaluation batches (`eval_batches`): the whole test set (its own
    model's accuracy), its shard of it (every m-th image from `rank`: the consensus's, counts
    summed over the workers) and, on a time budget (`time_budget`: the `budget` node, None
    without one), its shard of the stratified subset of `budget.eval_images` images the points
    before T are scored on (`eval_subset`); None without a time budget."""
    from torch.utils.data import Subset

    def shard(dataset) -> list:
        return eval_batches(
            Subset(dataset, range(rank, len(dataset), m)), batch_size, device, dtype
        )

    full = eval_batches(test, batch_size, device, dtype)
    subset = None
    if time_budget is not None:
        subset = shard(eval_subset(test, time_budget.eval_images))
    return full, shard(test), subset
