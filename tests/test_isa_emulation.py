"""Running as an AVX2 CPU on a newer one (``--isa avx2``,
benchmarks/isa_emulation.py): the machine line names every cap, the patched
copy of ONNX Runtime changes nothing but its ``xgetbv`` instructions, the
installed library stays as it was, ONNX Runtime then really takes its AVX2
kernels, and int8 answers as on the native path (7-bit weights: the integer
part cannot saturate without VNNI)."""

import hashlib
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from zeroloop.engine.nn.machine import CAP_VARIABLES, cpu_flags

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _benchmark_module(name):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


emulation = _benchmark_module("isa_emulation")

needs_avx2 = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64") or shutil.which("objdump") is None
    or "avx2" not in cpu_flags(), reason="needs an x86-64 CPU with AVX2 and binutils' objdump")


def test_the_machine_line_names_every_variable_the_emulation_sets():
    """A run under the caps says so in its stages' machine lines (machine.isa_caps)."""
    assert {name for caps in emulation.ISA_CAPS.values() for name in caps} | {emulation.ORT_CAP} \
        == set(CAP_VARIABLES)


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _python(code, *, pythonpath=None, **env):
    run_env = {**os.environ, **env}
    if pythonpath:
        run_env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), os.environ.get("PYTHONPATH", "")])
    # `python -c` imports from its working directory: isa_emulation from benchmarks/
    out = subprocess.run([sys.executable, "-c", code], env=run_env, capture_output=True, text=True,
                         timeout=300, cwd=BENCHMARKS)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip()


@pytest.fixture(scope="session")  # kept while pytest-xdist runs other modules' tests in between
def capped():
    installed = emulation.native_library(emulation.installed_package())
    before = _sha(installed)
    # made in this run (a folder no earlier run wrote), shared with the benchmarks' smoke run of it
    root = emulation.capped_copy(Path(os.environ["ZEROLOOP_TEST_SHARED_CACHE"]) / "zeroloop"
                                 / "onnxruntime-avx2")
    assert _sha(installed) == before  # the installed library is never touched
    return root, installed


@needs_avx2
def test_the_copy_differs_from_the_installed_library_only_at_its_xgetbv_instructions(capped, tmp_path):
    root, installed = capped
    copy = emulation.native_library(root / "onnxruntime")
    offsets = emulation.xgetbv_offsets(installed)
    assert offsets, "the installed library has no xgetbv: MLAS could not have checked XCR0"
    original, patched = installed.read_bytes(), copy.read_bytes()
    assert len(original) == len(patched)
    diff = np.flatnonzero(np.frombuffer(original, np.uint8) != np.frombuffer(patched, np.uint8))
    assert [o for o in offsets if any(0 <= at - o < 3 for at in diff)] == offsets  # each one changed ...
    assert all(any(0 <= at - o < 3 for o in offsets) for at in diff)  # ... and nothing else
    for at in offsets:
        assert original[at:at + 3] == emulation.XGETBV and patched[at:at + 3] == emulation.XCR0_AVX
    # the disassembler would find none left: the replacement is whole instructions, as long as xgetbv, so
    # the copy's instructions are the original's but at those offsets (cheaper than disassembling the copy)
    patch = tmp_path / "replacement.bin"
    patch.write_bytes(emulation.XCR0_AVX)
    listing = subprocess.run(["objdump", "-D", "-b", "binary", "-m", "i386:x86-64", str(patch)],
                             capture_output=True, text=True, check=True).stdout
    decoded = re.findall(r"^\s*([0-9a-f]+):\s+((?:[0-9a-f]{2} )+)\s*(\S+)", listing, re.M)
    assert [(int(at, 16), len(raw.split()), op) for at, raw, op in decoded] == [(0, 2, "push"), (2, 1, "pop")]
    # the same installed library gives the same copy, from the cache
    assert emulation.capped_copy(root.parent) == root


@needs_avx2
def test_onnx_runtime_takes_its_avx2_kernels_in_the_copy_and_its_best_ones_natively(capped):
    root, _ = capped
    probe = "from isa_emulation import nchwc_block; print(nchwc_block())"
    assert _python(probe, pythonpath=root) == "8"
    assert _python(probe) == ("16" if "avx512f" in cpu_flags() else "8")


@needs_avx2
def test_a_library_without_xgetbv_is_refused(tmp_path):
    fake = tmp_path / "libfake.so"
    shutil.copy(sys.executable, fake)  # Python itself reads no XCR0
    if emulation.xgetbv_offsets(fake):
        pytest.skip("this Python executable happens to contain xgetbv")
    with pytest.raises(ValueError, match="no xgetbv instruction found"):
        emulation.patch_library(fake)


@needs_avx2
def test_int8_answers_on_the_avx2_path_as_on_the_native_one(capped, tmp_path):
    from zeroloop.engine.games import make_game, random_line
    from zeroloop.engine.nn import inference_net
    from zeroloop.engine.nn.int8 import calibration_planes, export_onnx, quantize, session
    from zeroloop.pipeline.data.catalogue import SHIPPED_DIR
    from zeroloop.pipeline.data.storage import load_model

    root, _ = capped
    game = make_game("connect4")
    net = inference_net(load_model(SHIPPED_DIR / "connect4.pt", game)[0])
    model = quantize(export_onnx(net, calibration_planes(game, net, 64)), calibration_planes(game, net, 64))
    rng = np.random.default_rng(3)
    planes = game.encode([random_line(game, int(rng.integers(0, 30)), rng)[0] for _ in range(64)])
    (tmp_path / "int8.onnx").write_bytes(model)
    np.save(tmp_path / "planes.npy", planes)
    _python("import numpy as np; from zeroloop.engine.nn.int8 import session; "
            f"d = {str(tmp_path)!r}; run = session(open(d + '/int8.onnx', 'rb').read()); "
            "p, v = run(np.load(d + '/planes.npy')); np.savez(d + '/avx2.npz', p=p, v=v)", pythonpath=root)
    avx2 = np.load(tmp_path / "avx2.npz")
    logits, value = session(model)(planes)
    np.testing.assert_allclose(avx2["p"], logits, atol=1e-4)
    np.testing.assert_allclose(avx2["v"], value, atol=1e-4)
    assert np.array_equal(avx2["p"].argmax(1), logits.argmax(1))
