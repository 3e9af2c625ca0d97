"""The machine a network runs on, in a few words: the CPU model, its cores, the
instruction-set extensions that decide inference speed, the GPU, and what
``precision: auto`` resolves to there. Stages log it and benchmarks print it,
so every timing and every run names its machine (two runs with ``auto`` on
different CPUs can play different games)."""

from __future__ import annotations

import os
import platform
from functools import cache

import torch

from zeroloop.engine.nn.inference import precision_name, resolve_device

#: The CPU flags that decide which inference paths are fast, oldest first.
SPEED_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


@cache
def cpu_model() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo; elsewhere what Python knows)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return " ".join(line.partition(":")[2].split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


@cache
def cpu_flags() -> tuple[str, ...]:
    """Which of :data:`SPEED_FLAGS` this CPU has (empty where it cannot be read)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.partition(":")[2].split())
                    return tuple(flag for flag in SPEED_FLAGS if flag in have)
    except OSError:
        pass
    return ()


#: Environment variables that make the CPU libraries run as an older CPU would
#: (set before they load): oneDNN, PyTorch's own kernels, fbgemm, MKL, numba's
#: code generation and numpy's dispatch honour them. ONNX Runtime has no such
#: variable: for ``avx2``, :func:`isa_environ` puts a patched copy of it first on
#: ``PYTHONPATH`` (:mod:`zeroloop.engine.nn.ort_isa`). numpy's BLAS (OpenBLAS,
#: in no hot path here) is left as it is.
ISA_CAPS = {
    "avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
             "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
             "NUMBA_CPU_NAME": "haswell", "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR"},
    "avx512": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "ATEN_CPU_CAPABILITY": "avx512",
               "FBGEMM_ENABLE_INSTRUCTIONS": "AVX512", "MKL_ENABLE_INSTRUCTIONS": "AVX512",
               "NUMBA_CPU_NAME": "skylake-avx512", "NPY_DISABLE_CPU_FEATURES": "AVX512_ICL AVX512_SPR"},
}

#: set by :func:`isa_environ` where ONNX Runtime runs as a patched copy
ORT_CAP = "ZEROLOOP_ONNXRUNTIME_ISA"


def isa_caps() -> str:
    """The :data:`ISA_CAPS` variables set in this process (and :data:`ORT_CAP`),
    as ``NAME=value`` words ('' when none is)."""
    names = sorted({name for caps in ISA_CAPS.values() for name in caps} | {ORT_CAP})
    return " ".join(f"{n}={os.environ[n]}" for n in names if os.environ.get(n))


def isa_environ(isa: str) -> dict[str, str]:
    """The environment variables that make a new process run as a CPU with at
    most ``isa`` (a key of :data:`ISA_CAPS`) would, ONNX Runtime included
    where it can be (``avx2``: a patched copy first on ``PYTHONPATH``)."""
    env = dict(ISA_CAPS[isa])
    if isa == "avx2":
        from zeroloop.engine.nn import ort_isa

        copy = str(ort_isa.capped_copy())
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != copy]
        env["PYTHONPATH"] = os.pathsep.join([copy, *paths])
        env[ORT_CAP] = "AVX2"
    return env


def run_as(isa: str) -> None:
    """Make this process run as a CPU with at most ``isa`` (a key of
    :data:`ISA_CAPS`, or ``native``) would: when the caps are not yet set,
    start the same command again with them (the libraries read them as they
    load), so call it before anything uses torch or ONNX Runtime."""
    import sys

    if isa == "native" or all(os.environ.get(k) == v for k, v in ISA_CAPS[isa].items()):
        return
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **isa_environ(isa)})


def emulation_line(isa: str) -> str:
    """One line on what runs capped in this process (run by :func:`run_as`),
    with the kernel path ONNX Runtime took, read from the library itself."""
    caps = "oneDNN, PyTorch's kernels, fbgemm, MKL, numba and numpy"
    try:
        from zeroloop.engine.nn.ort_isa import nchwc_block

        block = nchwc_block()
        ort = {16: "its AVX-512 kernels", 8: "its AVX2 kernels"}.get(block, "an unknown path")
        ort = f"ONNX Runtime ran {ort} (NCHWc block {block})"
    except ImportError:
        ort = "ONNX Runtime is not installed"
    patched = " as a patched copy" if os.environ.get(ORT_CAP) else ", not capped"
    return f"emulated: --isa {isa} caps {caps}; {ort}{patched}"


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def describe(device: str | torch.device = "cpu", precision: str = "auto") -> dict[str, str]:
    """The machine as strings: ``cpu``, ``cores``, ``isa``, ``device`` (with
    the GPU's name on CUDA) and ``precision`` (``precision`` resolved there)."""
    dev = resolve_device(device) if isinstance(device, str) else device
    where = dev.type if dev.type != "cuda" else f"{dev} ({torch.cuda.get_device_name(dev)})"
    isa = " ".join(cpu_flags()) or "unknown"
    if caps := isa_caps():
        isa += f" (capped: {caps})"
    return {"cpu": cpu_model(), "cores": str(cores()), "isa": isa,
            "device": where, "precision": precision_name(precision, dev)}


def summary_line(m: dict[str, str], asked: str) -> str:
    """:func:`describe`'s dict in one line, ``asked`` the precision as set:
    ``network bf16 (precision auto) on cpu: AMD EPYC ..., 2 cores, avx2 ...``."""
    return (f"network {m['precision']} (precision {asked}) on {m['device']}: {m['cpu']}, "
            f"{m['cores']} cores, {m['isa']}")
