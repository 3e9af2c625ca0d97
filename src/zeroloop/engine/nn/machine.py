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
from zeroloop.engine.nn.int8 import CAP_VARIABLES

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


def isa_caps() -> str:
    """The :data:`CAP_VARIABLES` set in this process, as ``NAME=value`` words
    in the order of their names ('' when none is)."""
    return " ".join(f"{n}={os.environ[n]}" for n in sorted(CAP_VARIABLES) if os.environ.get(n))


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
