"""The number formats of accounted averages on the wire (`comm.compression`): `Codec`.

An accounted average may travel in a
narrower wire format than the payload's dtype: fp16 or bf16 (a cast), or int8 with one float32
absmax scale per block of INT8_BLOCK values of each tensor. The ledger's bytes and the clock's
modeled duration are those of the wire format. On gloo this is a simulation of the wire: the
values are quantised and dequantised in place (what the receiver would decode), then summed in
the payload's dtype, and the average is quantised and dequantised once more, because a ring
all-reduce's second phase (all-gather) carries the reduced values in the wire format too (the
scheme of torchft's `allreduce_quantized`: quantise, reduce-scatter, dequantise and sum,
quantise, all-gather, dequantise). No error feedback: the rounding error is dropped, as DiLoCo
drops it for its fp16 pseudo-gradients. Bookkeeping collectives (`account=False`) are never
compressed.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from algorithms.base_config import COMPRESSIONS

__all__ = ["COMPRESSIONS", "INT8_BLOCK", "Codec", "int8_roundtrip_"]


# int8: values per absmax scale. Blocks never straddle two tensors, so a bias or a control
# value (OSP's flag) gets scales of its own. 1024: 4 bytes of scale per 1024 values (0.4%).
INT8_BLOCK = 1024
_CASTS = {"fp16": torch.float16, "bf16": torch.bfloat16}


class Codec:
    """The wire format of accounted averages: `none`, `fp16`, `bf16` or `int8` (module doc).

    `wire_bytes()` is what the ledger and the clock see; `roundtrip_()` replaces values by what
    the other end decodes. Written by hand: torch offers the casts and DDP's fp16/bf16 comm
    hooks, but no block-scaled int8 all-reduce, and the hooks bypass the suite's ledger.
    """

    def __init__(self, name: str = "none"):
        if name not in COMPRESSIONS:
            raise ValueError(
                f"comm.compression must be one of {', '.join(COMPRESSIONS)}, got {name!r}"
            )
        self.name = name

    @property
    def active(self) -> bool:
        return self.name != "none"

    def wire_bytes(self, sizes: Sequence[int], itemsize: int) -> int:
        """Bytes on the wire for tensors of `sizes` values of `itemsize` bytes."""
        n = sum(sizes)
        if self.name == "none":
            return n * itemsize
        if self.name in _CASTS:
            return 2 * n
        return n + 4 * sum(-(-s // INT8_BLOCK) for s in sizes)  # int8 values + fp32 scales

    @torch.no_grad()
    def roundtrip_(self, flat: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
        """In place: every value of `flat` (tensors of `sizes`, concatenated) replaced by its
        decoded wire value. Returns `flat`."""
        if self.name in _CASTS:
            flat.copy_(flat.to(_CASTS[self.name]))
        elif self.name == "int8":
            for segment in torch.split(flat, list(sizes)):
                int8_roundtrip_(segment)
        return flat


@torch.no_grad()
def int8_roundtrip_(x: torch.Tensor, block: int = INT8_BLOCK) -> torch.Tensor:
    """In place, on a 1-D tensor: symmetric int8 quantisation with one absmax scale per block of
    `block` values (scale = absmax / 127, stored as float32; q = round(x / scale) in
    [-127, 127]), then dequantisation x = q * scale. Error per value <= scale / 2 (plus the
    float32 rounding of the scale); an all-zero block stays zero. Returns `x`."""
    n = x.numel()
    if n == 0:
        return x
    blocks = -(-n // block)
    padded = torch.nn.functional.pad(x, (0, blocks * block - n)).view(blocks, block)
    scale = (padded.abs().amax(dim=1, keepdim=True) / 127).float().to(x.dtype)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(padded / scale).clamp_(-127, 127)
    x.copy_((q * scale).view(-1)[:n])
    return x
