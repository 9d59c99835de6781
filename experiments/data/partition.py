"""Split the training set over workers: iid, non-IID (one dominant class per worker), Dirichlet.

Every function is pure: (labels, num_workers, seed, knobs) -> one int64 index array per worker,
the same on every rank, so each rank can compute the whole partition and keep its own shard
without any communication.

The shuffles' seed is `partition.seed` (default REFERENCE_SEED = 1234, the reference code's
`Random(1234)`), not the run's `seed`: as in the reference, runs of several seeds train on the
same shards (the run seed varies the model's initialisation, the data order and the
augmentation), and a seed-0 run of the suite shuffles as the reference does.

Two invariants hold for every scheme, because the synchronous and round-based algorithms issue
one collective per step (or per round) on every rank:

- every worker gets exactly q = N // num_workers samples, so every rank runs the same number of
  steps per epoch (the released reference code's Dirichlet splitter breaks this: its shards range
  from 1,194 to 6,623 samples and the ranks' collectives no longer match, algorithms.md section 9);
- shards are disjoint; the N - num_workers * q leftover samples (fewer than num_workers) are unused.

Class order is always ascending label order (`np.unique`), never first-appearance order: the
reference code's dict-ordered labels only sorted by accident under Python 3.5 (section 12,
pitfall 6).
"""

import random
from collections.abc import Mapping

import numpy as np

from experiments.data import params  # the values, torch-free (the pre-flight's)
from experiments.errors import UserError

REFERENCE_SEED = 1234
"""The reference code's partition seed (`random.Random(1234)` in its DataPartitioner)."""

PAPER_DOMINANT_FRACTION = 2000 / 3125
"""The paper's non-IID split: 2000 of each worker's 3125 CIFAR-10 samples from one class."""


def _labels(labels: np.ndarray) -> np.ndarray:
    arr = np.asarray(labels)
    if arr.ndim != 1:
        raise UserError(f"labels must be a 1-D array, got shape {arr.shape}")
    return arr.astype(np.int64, copy=False)


def _check_workers(n: int, num_workers: int) -> int:
    """Return q, the samples per worker, after checking that every worker gets at least one."""
    return params.check_workers(n, num_workers)


def iid(labels: np.ndarray, num_workers: int, seed: int) -> list[np.ndarray]:
    """Shuffle all indices and cut consecutive chunks of q.

    The shuffle uses `random.Random(seed)` on the list 0..N-1, as the reference code's
    DataPartitioner does, so seed 1234 (`partition.seed`'s default, whatever the run's seed) on
    CIFAR-10 with 16 workers reproduces its shards exactly.
    """
    n = len(_labels(labels))
    q = _check_workers(n, num_workers)
    order = list(range(n))
    random.Random(seed).shuffle(order)
    perm = np.asarray(order, dtype=np.int64)
    return [perm[k * q : (k + 1) * q].copy() for k in range(num_workers)]


def _dominant_classes(num_classes: int, num_workers: int) -> list[int]:
    """The reference code's class walk: 0..C-1, then every 2nd from 1, every 3rd from 2, ...

    For 10 classes and 16 workers: 0..9, 1, 3, 5, 7, 9, 2. The reference stops at 16 workers;
    when the step reaches C (more workers than the walk covers) the walk starts over at 0.
    """
    walk = []
    p, s = 0, 1
    for _ in range(num_workers):
        walk.append(p)
        p += s
        if p > num_classes - 1:
            p = s
            s += 1
            if p > num_classes - 1:
                p, s = 0, 1
    return walk


def noniid(
    labels: np.ndarray,
    num_workers: int,
    seed: int,
    dominant_fraction: float = PAPER_DOMINANT_FRACTION,
) -> list[np.ndarray]:
    """Give each worker d = round(q * dominant_fraction) samples of one class, the rest at random.

    The scheme of algorithms.md section 9, generalised from 16 workers x 3125: the dominant
    classes follow `_dominant_classes`; each worker takes the next d unused samples of its class in
    dataset order; the leftover samples are shuffled and dealt q - d per worker in worker order,
    without replacement; each worker then shuffles its own list. All shuffles draw in that order
    from one `random.Random(seed)`, the reference code's generator.
    """
    labels = _labels(labels)
    n = len(labels)
    q = _check_workers(n, num_workers)
    params.check_dominant_fraction(dominant_fraction)
    d = round(q * dominant_fraction)
    classes = np.unique(labels)
    walk = [int(classes[i]) for i in _dominant_classes(len(classes), num_workers)]

    pools = {int(c): np.flatnonzero(labels == c) for c in classes}
    for c in sorted(set(walk)):
        k = walk.count(c)
        if k * d > len(pools[c]):
            raise UserError(
                f"noniid partition infeasible: class {c} is dominant for {k} workers x {d} samples"
                f" = {k * d} but has only {len(pools[c])}"
            )

    used = np.zeros(n, dtype=bool)
    taken = {c: 0 for c in pools}
    shards = []
    for c in walk:
        part = pools[c][taken[c] : taken[c] + d]
        taken[c] += d
        used[part] = True
        shards.append(list(part))

    rng = random.Random(seed)
    leftover = np.flatnonzero(~used).tolist()
    rng.shuffle(leftover)
    for k, shard in enumerate(shards):
        shard.extend(leftover[k * (q - d) : (k + 1) * (q - d)])
        rng.shuffle(shard)
    return [np.asarray(shard, dtype=np.int64) for shard in shards]


def dirichlet(
    labels: np.ndarray, num_workers: int, seed: int, concentration: float = 0.5
) -> list[np.ndarray]:
    """Label-skewed shards of equal size q, with class proportions drawn from Dir(concentration).

    Unlike the reference code's splitter (Dirichlet weights per class over workers, so unequal
    shard sizes), each worker in turn draws p ~ Dir(concentration * 1_C) and then
    Multinomial(q, p) counts, restricted to the classes with samples left: p is renormalised over
    those classes and the shortfall redrawn until the worker has q. Small concentration -> one or
    two classes per worker; large -> close to iid. Randomness: `np.random.default_rng(seed)`.
    """
    labels = _labels(labels)
    n = len(labels)
    q = _check_workers(n, num_workers)
    params.check_concentration(concentration)
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    pools = [rng.permutation(np.flatnonzero(labels == c)) for c in classes]
    left = np.array([len(p) for p in pools], dtype=np.int64)

    shards = []
    for _ in range(num_workers):
        p = rng.dirichlet(np.full(len(classes), concentration))
        counts = np.zeros(len(classes), dtype=np.int64)
        need = q
        # Each pass either fills the shard or empties at least one class, so at most C+1 passes.
        while need > 0:
            avail = left - counts
            weights = np.where(avail > 0, p, 0.0)
            if weights.sum() <= 0:
                # p put (numerically) all its mass on exhausted classes: fall back to what is left.
                weights = avail.astype(np.float64)
            draw = np.minimum(rng.multinomial(need, weights / weights.sum()), avail)
            counts += draw
            need -= int(draw.sum())
        shard = []
        for j, c in enumerate(counts):
            start = len(pools[j]) - left[j]
            shard.append(pools[j][start : start + c])
            left[j] -= c
        shards.append(rng.permutation(np.concatenate(shard)).astype(np.int64))
    return shards


_number = params.number  # a knob: a number, else a one-line UserError


def make_partition(
    cfg: Mapping, labels: np.ndarray, num_workers: int, seed: int | None = None
) -> list[np.ndarray]:
    """Dispatch on the Hydra `partition` node: `name` (iid, noniid, dirichlet) plus its knobs.
    The shuffles' seed is `seed` when given, else the node's `seed` (default REFERENCE_SEED)."""
    labels = _labels(labels)
    _check_workers(len(labels), num_workers)
    if seed is None:
        seed = params.partition_seed(cfg)
    name = cfg.get("name")
    if name == "iid":
        return iid(labels, num_workers, seed)
    if name == "noniid":
        fraction = _number(cfg, "dominant_fraction", PAPER_DOMINANT_FRACTION)
        return noniid(labels, num_workers, seed, dominant_fraction=fraction)
    if name == "dirichlet":
        concentration = _number(cfg, "concentration", 0.5)
        return dirichlet(labels, num_workers, seed, concentration=concentration)
    raise UserError(f"unknown partition.name {name!r}: expected one of iid, noniid, dirichlet")


def data_card(labels: np.ndarray, shards: list[np.ndarray], num_classes: int) -> dict:
    """Per-worker label histograms for summary.json, so a reader sees how skewed the data was."""
    labels = _labels(labels)
    n = len(labels)
    workers = []
    for rank, shard in enumerate(shards):
        hist = np.bincount(labels[shard], minlength=num_classes)
        dominant = int(np.argmax(hist)) if len(shard) else 0
        workers.append(
            {
                "rank": rank,
                "num_samples": len(shard),
                "label_hist": [int(h) for h in hist],
                "dominant_class": dominant,
                "dominant_share": float(hist[dominant] / len(shard)) if len(shard) else 0.0,
            }
        )
    used = sum(len(s) for s in shards)
    return {
        "num_workers": len(shards),
        "samples_per_worker": len(shards[0]) if shards else 0,
        "unused_samples": n - used,
        "workers": workers,
    }
