"""Running as an older CPU on a newer one, for measuring: the whole pipeline
on a Zen 4 as on an AVX2 CPU (``run_as.py``), a benchmark with ``--isa avx2``
(``inference_options.py``, ``selfplay_throughput.py``). Never used by a
normal run; the scripts here import it.

Most CPU libraries take an environment variable that caps the instructions
they use, read as they load (:data:`ISA_CAPS`: oneDNN, PyTorch's own
kernels, fbgemm, MKL, numba's code generation, numpy's dispatch; numpy's
BLAS, OpenBLAS, in no hot path here, is left as it is). A process's machine
line names the caps it runs under
(:func:`zeroloop.engine.nn.machine.isa_caps`).

ONNX Runtime has none, so for ``avx2`` it runs as a patched copy of the
installed package. Its kernel library (MLAS)
picks its kernels once, as it loads, from CPUID and from the extended control
register XCR0 that ``xgetbv`` reads: the AVX-512 kernels (and with them the
VNNI ones) only where XCR0 says the operating system saves the AVX-512
registers (bits 5-7), the AVX2/FMA kernels where it says so for AVX (bits
1-2). The copy made here has each ``xgetbv`` instruction of its native
library replaced by ``push 7; pop rax`` (the same three bytes' length): XCR0
then reads x87 + SSE + AVX and nothing more, so MLAS takes exactly the path
an AVX2 CPU takes (``vpmaddubsw`` + ``vpmaddwd`` for int8 instead of one
``vpdpbusd``; 8-float NCHWc blocks instead of 16). The instructions are found
by disassembling (binutils' ``objdump``), not by searching bytes: the same
three bytes occur elsewhere in the library as data or inside other
instructions. :func:`nchwc_block` tells which path a loaded ONNX Runtime took.

What it cannot emulate: the CPU itself (an AVX2 path on a Zen 4 runs at the
Zen 4's clock, caches and memory), and CPUID checks that do not consult XCR0
(none in MLAS's kernel choice).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: Environment variables that make the CPU libraries run as an older CPU would
#: (set before they load). Every name here is one of
#: :data:`zeroloop.engine.nn.machine.CAP_VARIABLES`, which the machine line reports.
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

#: ``xgetbv`` (0f 01 d0) and what replaces it: ``push 7; pop rax`` (XCR0 = x87 | SSE | AVX)
XGETBV = b"\x0f\x01\xd0"
XCR0_AVX = b"\x6a\x07\x58"


def installed_package() -> Path:
    """The installed ``onnxruntime`` package's folder (not a patched copy on
    ``PYTHONPATH``: the one that site-packages holds)."""
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("onnxruntime is not installed (make setup installs it)")
    return Path(next(iter(spec.submodule_search_locations)))


def native_library(package: Path) -> Path:
    """The shared object that holds ONNX Runtime's kernels in ``package``."""
    found = sorted((package / "capi").glob("onnxruntime_pybind11_state*.so"))
    if not found:
        raise ValueError(f"{package}/capi has no onnxruntime_pybind11_state*.so to patch")
    return found[0]


#: sha256 of a library's bytes -> its xgetbv offsets: disassembling ONNX Runtime takes 10 s and more
_FOUND: dict[str, list[int]] = {}


def xgetbv_offsets(library: Path) -> list[int]:
    """File offsets of every ``xgetbv`` instruction in ``library``, found by
    disassembling it (addresses mapped to offsets through its section table);
    the same bytes are disassembled once per process, and not at all where
    :func:`capped_copy` found a copy whose maker recorded them."""
    key = hashlib.sha256(library.read_bytes()).hexdigest()
    if key not in _FOUND:
        _FOUND[key] = _disassembled_xgetbv_offsets(library)
    return list(_FOUND[key])


def _disassembled_xgetbv_offsets(library: Path) -> list[int]:
    objdump = shutil.which("objdump")
    if objdump is None:
        raise ValueError("emulating AVX2 for ONNX Runtime needs objdump (Debian: apt-get install binutils)")

    def run(*args: str) -> str:
        out = subprocess.run([objdump, *args, str(library)], capture_output=True, text=True, check=True)
        return out.stdout

    # objdump -h: "idx name size vma lma file-offset align"
    sections = [(int(m.group(2), 16), int(m.group(1), 16), int(m.group(3), 16))
                for m in re.finditer(r"^\s*\d+\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)",
                                     run("-h"), re.M)]
    offsets = []
    for addr in _xgetbv_addresses([objdump, "-d", "--no-show-raw-insn", str(library)]):
        offsets += [off + addr - vma for vma, size, off in sections if vma <= addr < vma + size]
    return offsets


_XGETBV_LINE = re.compile(rb"^\s*([0-9a-f]+):\s+xgetbv\s*$", re.M)


def _xgetbv_addresses(command: list[str]) -> list[int]:
    """The addresses of the ``xgetbv`` lines in the disassembly ``command``
    prints, read as bytes a megabyte at a time and searched only where the
    word occurs (ONNX Runtime's is 6.4 million lines, 260 MB: decoded and
    searched whole, 5.6 CPU-s of the 16 on a Zen 3)."""
    found: list[int] = []
    with subprocess.Popen(command, stdout=subprocess.PIPE) as proc:
        tail = b""
        while chunk := proc.stdout.read(1 << 20):
            data = tail + chunk
            cut = data.rfind(b"\n") + 1
            data, tail = data[:cut], data[cut:]
            if b"xgetbv" in data:
                found += [int(m.group(1), 16) for m in _XGETBV_LINE.finditer(data)]
        found += [int(m.group(1), 16) for m in _XGETBV_LINE.finditer(tail)]
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, command)
    return found


def patch_library(library: Path) -> int:
    """Replace every ``xgetbv`` of ``library`` (in place) by ``push 7; pop
    rax``; returns how many. Refuses a library with none, or whose bytes at a
    found offset are not ``xgetbv``."""
    offsets = xgetbv_offsets(library)
    if not offsets:
        raise ValueError(f"{library}: no xgetbv instruction found, so nothing would be capped")
    data = bytearray(library.read_bytes())
    for at in offsets:
        if data[at:at + 3] != XGETBV:
            raise ValueError(f"{library}: the bytes at offset {at:#x} are not xgetbv")
        data[at:at + 3] = XCR0_AVX
    library.write_bytes(bytes(data))
    return len(offsets)


def capped_copy(cache: Path | None = None) -> Path:
    """A folder holding a copy of the installed ``onnxruntime`` package whose
    kernels are chosen as on an AVX2 CPU: put it first on ``PYTHONPATH``.
    Made once per installed library (keyed by its sha256) under ``cache``
    (default ``~/.cache/zeroloop/onnxruntime-avx2``), atomically; a process
    that asks while another makes it waits for that one (the disassembly is
    17-21 CPU-s on a Zen 3), then takes its copy."""
    package = installed_package()
    library = native_library(package)
    sha = hashlib.sha256(library.read_bytes()).hexdigest()
    digest = sha[:16]
    root = Path(cache or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                / "zeroloop" / "onnxruntime-avx2")
    target = root / digest
    if not (target / "onnxruntime").is_dir():
        root.mkdir(parents=True, exist_ok=True)
        with open(root / f"{digest}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when its process dies
            if not (target / "onnxruntime").is_dir():  # not made while this one waited
                _make_capped_copy(package, root, target, sha)
    # the installed library's xgetbv offsets, as found when the copy was made: not disassembled again
    record = target / "xgetbv.json"
    if record.is_file():
        found = json.loads(record.read_text())
        if found.get("sha256") == sha:
            _FOUND.setdefault(sha, found["offsets"])
    return target


def _make_capped_copy(package: Path, root: Path, target: Path, sha: str) -> None:
    """The copy of ``package`` (whose library's sha256 is ``sha``) made and patched, then renamed to
    ``target``, with the offsets it patched."""
    work = Path(tempfile.mkdtemp(prefix=f"{sha[:16]}-", dir=root))
    try:
        shutil.copytree(package, work / "onnxruntime", ignore=shutil.ignore_patterns("__pycache__"))
        patch_library(native_library(work / "onnxruntime"))  # finds the offsets under the same sha
        (work / "xgetbv.json").write_text(json.dumps({"sha256": sha, "offsets": _FOUND[sha]}))
        try:
            work.rename(target)
        except OSError:  # another process made it first
            if not (target / "onnxruntime").is_dir():
                raise
            shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def nchwc_block() -> int:
    """The NCHWc block (floats) the loaded ONNX Runtime lays convolutions out
    in: 16 where MLAS took its AVX-512 kernels, 8 on its AVX2/AVX path (read
    from the layout it gives a 20-channel convolution: padded to a multiple of
    the block)."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((20, 20, 3, 3), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 20, 6, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 20, 6, 7])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with tempfile.TemporaryDirectory(prefix="zeroloop-nchwc-") as tmp:
        opts = ort.SessionOptions()
        opts.log_severity_level = 3  # the warning that the optimised file is machine-specific
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.optimized_model_filepath = str(Path(tmp, "optimised.onnx"))
        ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        optimised = onnx.load(opts.optimized_model_filepath)
    padded = max((init.dims[0] for init in optimised.graph.initializer if len(init.dims) == 4), default=20)
    return {24: 8, 32: 16}.get(padded, 0)


def isa_environ(isa: str) -> dict[str, str]:
    """The environment variables that make a new process run as a CPU with at
    most ``isa`` (a key of :data:`ISA_CAPS`) would, ONNX Runtime included
    where it can be (``avx2``: a patched copy first on ``PYTHONPATH``)."""
    env = dict(ISA_CAPS[isa])
    if isa == "avx2":
        copy = str(capped_copy())
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != copy]
        env["PYTHONPATH"] = os.pathsep.join([copy, *paths])
        env[ORT_CAP] = "AVX2"
    return env


def run_as(isa: str) -> None:
    """Make this process run as a CPU with at most ``isa`` (a key of
    :data:`ISA_CAPS`, or ``native``) would: when the caps are not yet set,
    start the same command again with them (the libraries read them as they
    load), so call it before anything uses torch or ONNX Runtime."""
    if isa == "native" or all(os.environ.get(k) == v for k, v in ISA_CAPS[isa].items()):
        return
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **isa_environ(isa)})


def emulation_line(isa: str) -> str:
    """One line on what runs capped in this process (run by :func:`run_as`),
    with the kernel path ONNX Runtime took, read from the library itself."""
    caps = "oneDNN, PyTorch's kernels, fbgemm, MKL, numba and numpy"
    try:
        block = nchwc_block()
        ort = {16: "its AVX-512 kernels", 8: "its AVX2 kernels"}.get(block, "an unknown path")
        ort = f"ONNX Runtime ran {ort} (NCHWc block {block})"
    except ImportError:
        ort = "ONNX Runtime is not installed"
    patched = " as a patched copy" if os.environ.get(ORT_CAP) else ", not capped"
    return f"emulated: --isa {isa} caps {caps}; {ort}{patched}"
