"""Small CIFAR-10 files written in CIFAR-10's own format (the "python version"), for tests."""

import io
import pickle
import struct

import numpy as np


class Py2Pickler(pickle._Pickler):
    """Writes bytes as Python 2 `str` opcodes, as the real CIFAR-10 pickles (made by Python 2) do.

    Loaded with encoding="latin1" (torchvision) they become str keys; with encoding="bytes" they
    are the b"data" / b"labels" keys the CIFAR-10 page documents.
    """

    dispatch = pickle._Pickler.dispatch.copy()

    def save_py2_str(self, obj: bytes) -> None:
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_py2_str


LABEL_NAMES = [b"airplane", b"automobile", b"bird", b"cat", b"deer"]
LABEL_NAMES += [b"dog", b"frog", b"horse", b"ship", b"truck"]


def dump_py2(obj: object, path) -> None:
    buf = io.BytesIO()
    Py2Pickler(buf, protocol=2).dump(obj)
    path.write_bytes(buf.getvalue())


def write_cifar10(root, per_batch: int = 3) -> dict[str, tuple[np.ndarray, list[int]]]:
    """Write data_batch_1..5, test_batch and batches.meta under root/cifar-10-batches-py."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    batches = {}
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for b, name in enumerate(names):
        images = rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8)
        labels = [(b + i) % 10 for i in range(per_batch)]
        label = f"training batch {b + 1} of 5" if b < 5 else "testing batch 1 of 1"
        entry = {
            b"batch_label": label.encode(),
            b"labels": labels,
            b"data": images,
            b"filenames": [f"img_{b}_{i}.png".encode() for i in range(per_batch)],
        }
        dump_py2(entry, folder / name)
        batches[name] = (images, labels)
    meta = {b"num_cases_per_batch": per_batch, b"label_names": LABEL_NAMES, b"num_vis": 3072}
    dump_py2(meta, folder / "batches.meta")
    return batches
