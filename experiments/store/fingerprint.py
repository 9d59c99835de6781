"""The platform a run computed on: what decides its floating-point digits (issue 33).

One run is deterministic on one machine, but the same run on another x86 machine gives other
digits: the kernels torch, oneDNN and MKL pick depend on the CPU's instruction set (AVX-512,
AVX2, ...), and each sums in its own order. A reader who gets other numbers than a committed
result must be able to tell a platform difference from a defect, so every run records

    cpu              the CPU's model name and vendor (/proc/cpuinfo)
    aten_isa         the vector ISA of torch's own kernels (torch.backends.cpu.get_cpu_capability;
                     ATEN_CPU_CAPABILITY caps it)
    onednn           oneDNN's version, the ISA it dispatches to and the kernel a 3x3 convolution
                     gets (read from oneDNN's verbose header; ONEDNN_MAX_CPU_ISA caps it)
    mkl              MKL's version (MKL_CBWR pins its code path)
    torch            torch's version
    threads          torch's intra-op threads while the run trained
    deterministic    torch.are_deterministic_algorithms_enabled(), cuDNN's deterministic and
                     benchmark flags
    env              the environment variables that change the kernels (only those set)
    device           cpu, or the GPU's name with CUDA's and cuDNN's versions
    layout           only where the passes lay images out otherwise than torch's default:
                     `channels_last` (seeds in lock-step and batched workers in float32 on a
                     CPU, experiments/workers/batched.py)

and `key`: a 12-hex digest of all of it. Two runs with the same key computed with the same
kernels, so the same configuration gives the same bits; two keys that differ may give other
digits (analysis/reproduce/verify.py says how much other). The host name is not in it: two machines
of one kind are one platform.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import sys
import tempfile
import threading
from typing import Any

# The variables that choose or pin the kernels (each documented by its library): torch's ATen
# dispatch, oneDNN's ISA cap, MKL's conditional numerical reproducibility and instruction cap,
# the thread counts, cuBLAS's deterministic workspace.
NUMERIC_ENV = (
    "ATEN_CPU_CAPABILITY",
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
    "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "CUBLAS_WORKSPACE_CONFIG",
)

_ONEDNN: str | None = None  # oneDNN's header says its ISA once a process: kept
# One capture at a time: the runs of seeds in lock-step finish together, in threads of one
# process, and two captures would swap file descriptor 1 under each other.
_ONEDNN_LOCK = threading.Lock()


def cpu_model() -> str:
    """The CPU's model name (and vendor), from /proc/cpuinfo; `platform.processor()` elsewhere."""
    model = vendor = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not model:
                    model = value.strip()
                elif key == "vendor_id" and not vendor:
                    vendor = value.strip()
                if model and vendor:
                    break
    except OSError:
        import platform

        model = platform.processor()
    return f"{model} ({vendor})" if vendor else (model or "unknown")


def _library_versions(config: str) -> tuple[str, str]:
    """MKL's and oneDNN's versions from `torch.__config__.show()`."""
    mkl = re.search(r"Math Kernel Library Version ([\w.\-]+)", config)
    dnn = re.search(r"MKL-DNN (v[\w.]+)", config)
    return (mkl.group(1) if mkl else "none"), (dnn.group(1) if dnn else "none")


def onednn_dispatch() -> str:
    """oneDNN's ISA and the kernel a small 3x3 convolution gets, e.g. "isa Intel AVX2, conv
    jit:avx2". oneDNN tells them only in its verbose output, which its C code prints on file
    descriptor 1: that descriptor is pointed at a temporary file for one convolution (a few
    ms, once a process). "unknown" where that cannot be read."""
    with _ONEDNN_LOCK:
        return _onednn_dispatch()


def _onednn_dispatch() -> str:
    global _ONEDNN
    if _ONEDNN is not None:
        return _ONEDNN
    import torch

    if not torch.backends.mkldnn.is_available():
        _ONEDNN = "not built"
        return _ONEDNN
    text = ""
    try:
        libc = ctypes.CDLL(None)
        sys.stdout.flush()
        libc.fflush(None)
        saved = os.dup(1)
        with tempfile.TemporaryFile() as tmp:
            os.dup2(tmp.fileno(), 1)
            try:
                with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
                    x = torch.ones(2, 16, 6, 6)
                    torch.nn.functional.conv2d(x, torch.ones(16, 16, 3, 3))
            finally:
                libc.fflush(None)
                os.dup2(saved, 1)
                os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode(errors="replace")
    except Exception:  # noqa: BLE001 - a fingerprint never stops a run; it says what it lacks
        text = ""
    isa = re.search(r"info,cpu,isa:([^\n]+)", text)
    conv = re.search(r"primitive,exec,cpu,convolution,([^,]+),", text)
    if isa is None and conv is None:
        _ONEDNN = "unknown"
    else:
        _ONEDNN = (
            f"isa {isa.group(1).strip() if isa else 'unknown'}, "
            f"conv {conv.group(1) if conv else 'unknown'}"
        )
    return _ONEDNN


def platform_fingerprint(device: Any = "cpu", layout: str | None = None) -> dict[str, Any]:
    """The fingerprint of this process's platform (the module docstring), computing on
    `device` (a torch.device or its name), with its `key`; `layout`: the images' memory layout
    where the run's passes use another than torch's default (a field only then, so that every
    other run keeps the key it had)."""
    import torch

    device = torch.device(device)
    mkl, dnn = _library_versions(torch.__config__.show())
    fingerprint: dict[str, Any] = {
        "cpu": cpu_model(),
        "aten_isa": torch.backends.cpu.get_cpu_capability(),
        "onednn": f"{dnn}, {onednn_dispatch()}",
        "mkl": mkl,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "deterministic": {
            "algorithms": torch.are_deterministic_algorithms_enabled(),
            "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        },
        "env": {name: os.environ[name] for name in NUMERIC_ENV if name in os.environ},
        "device": "cpu",
    }
    if layout is not None:
        fingerprint["layout"] = layout
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        fingerprint["device"] = (
            f"{torch.cuda.get_device_name(index)}, CUDA {torch.version.cuda}, cuDNN {cudnn}"
        )
    fingerprint["key"] = fingerprint_key(fingerprint)
    return fingerprint


def fingerprint_key(fingerprint: dict[str, Any]) -> str:
    """A 12-hex digest of a fingerprint's fields (its own `key` aside)."""
    fields = {k: v for k, v in fingerprint.items() if k != "key"}
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def describe(fingerprint: dict[str, Any] | None) -> str:
    """One line for provenance.txt and verify's output."""
    if not fingerprint:
        return "not recorded"
    env = fingerprint.get("env") or {}
    det = fingerprint.get("deterministic") or {}
    parts = [
        f"{fingerprint.get('cpu')}",
        f"ATen {fingerprint.get('aten_isa')}",
        f"oneDNN {fingerprint.get('onednn')}",
        f"MKL {fingerprint.get('mkl')}",
        f"torch {fingerprint.get('torch')}",
        f"{fingerprint.get('threads')} threads",
        f"deterministic algorithms {'on' if det.get('algorithms') else 'off'}",
        f"device {fingerprint.get('device')}",
    ]
    if fingerprint.get("layout"):
        parts.append(f"layout {fingerprint['layout']}")
    if env:
        parts.append("env " + " ".join(f"{k}={v}" for k, v in sorted(env.items())))
    return f"[{fingerprint.get('key')}] " + "; ".join(parts)
