"""The inference net in int8 on the CPU: ONNX Runtime static quantisation
(``runtime.precision: int8``).

The network's trunk (its ``stem`` and ``trunk`` modules, whatever the kind:
the resnet's stem and residual blocks, global-pooling blocks included, or the
MLP's hidden layers; all but a few per cent of its arithmetic) runs in 8-bit
integers; the policy and value heads stay in float32. Static means the
activations' scales are fixed in advance, from positions the model reaches in
its own games (:func:`calibration_planes`), so a position's answer does not
depend on the rest of its batch. Weights are quantised per output channel to
7 bits (``reduce_range``): then no sum of two 8-bit products can overflow the
16-bit step that CPUs without VNNI (AVX2, AVX-512 before VNNI) take, and the
integer part gives the same numbers on every x86 CPU.

Why ONNX Runtime rather than PyTorch's own int8 (fbgemm / oneDNN): on the same
CPU (a Zen 4), at the self-play batch, it ran 3.5x eager fp32 against 2.2x,
with less drift (docs/lab/speed-log.md; ``benchmarks/inference_options.py`` measured it until issue 92).
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import tempfile
import warnings
from collections import OrderedDict
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np
import torch

from zeroloop.engine.games.base import Game
from zeroloop.engine.nn.net import PolicyValueNet

#: parts of the exported graph quantised (node names start with the module's path: every kind of
#: net names its layers before the heads ``stem`` and ``trunk``, see :mod:`zeroloop.engine.nn.net`)
TRUNK = ("/stem", "/trunk")


@cache
def available() -> bool:
    """Whether ONNX Runtime and onnx (the exporter's and the quantiser's
    format) are installed."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def calibration_planes(game: Game, net: PolicyValueNet, positions: int = 512, *, seed: int = 0,
                       lanes: int = 32) -> np.ndarray:
    """``positions`` encoded positions from games ``net`` plays against itself,
    each move drawn from its raw policy (temperature 1), ``lanes`` games at a
    time: the positions self-play reaches, without search. A function of the
    net's weights and ``seed`` alone."""
    rng = np.random.default_rng(seed)
    net = net.eval()
    out: list = []
    games = [game.initial_state() for _ in range(lanes)]
    while len(out) < positions:
        planes = game.encode(games)
        with torch.inference_mode():
            logits, _ = net(torch.from_numpy(planes))
        priors = torch.softmax(logits.float(), 1).numpy().astype(np.float64)
        out.extend(games[:positions - len(out)])
        for i, state in enumerate(games):
            legal = game.legal_mask(state)
            p = priors[i] * legal
            p = p / p.sum() if p.sum() > 0 else legal / legal.sum()
            nxt = game.apply(state, int(rng.choice(len(p), p=p)))
            games[i] = nxt if game.legal_mask(nxt).any() else game.initial_state()
    return game.encode(out)


def export_onnx(net: torch.nn.Module, example: np.ndarray) -> bytes:
    """``net`` (an inference net: BatchNorm folded) as an ONNX model with a
    free batch size; inputs ``x``, outputs ``logits`` and ``value``."""
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation note
        torch.onnx.export(net, (torch.from_numpy(example[:1]),), buf, input_names=["x"],
                          output_names=["logits", "value"], dynamo=False,
                          dynamic_axes={"x": {0: "b"}, "logits": {0: "b"}, "value": {0: "b"}})
    return buf.getvalue()


def quantize(model: bytes, planes: np.ndarray, *, batch: int = 32) -> bytes:
    """The trunk of an exported inference net quantised to int8 (QDQ form,
    uint8 activations, int8 weights per channel in 7 bits, MinMax scales over
    ``planes``)."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.chunks = iter([{"x": planes[i:i + batch]} for i in range(0, len(planes), batch)])

        def get_next(self):
            return next(self.chunks, None)

    proto = _unshared(onnx.load_from_string(model))
    trunk = [n.name for n in proto.graph.node if n.name.startswith(TRUNK)]
    if not trunk:
        raise ValueError("no stem or trunk node in the exported network: nothing to quantise")
    root = logging.getLogger()
    quiet = _Quiet()  # the quantiser's warnings go to the root logger (advice to run shape inference first)
    root.addFilter(quiet)
    with tempfile.TemporaryDirectory(prefix="zeroloop-int8-") as tmp:
        src, dst = Path(tmp, "fp32.onnx"), Path(tmp, "int8.onnx")
        onnx.save(proto, str(src))
        try:
            quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True,
                            reduce_range=True, calibrate_method=CalibrationMethod.MinMax,
                            nodes_to_quantize=trunk)
        finally:
            root.removeFilter(quiet)
        return dst.read_bytes()


def _unshared(proto):
    """``proto`` with every weight its own initializer. The exporter keeps one
    copy of equal tensors (an untrained net's folded biases are all zero) and
    hands it on through Identity nodes; the quantiser then leaves those
    convolutions' biases in float, and ONNX Runtime ran such a net 3.5x slower
    than fp32 (measured on a Zen 4)."""
    from onnx import numpy_helper

    graph = proto.graph
    inits = {i.name: i for i in graph.initializer}
    keep = []
    for node in graph.node:
        if node.op_type == "Identity" and node.input[0] in inits:
            copy_ = numpy_helper.from_array(numpy_helper.to_array(inits[node.input[0]]), node.output[0])
            graph.initializer.append(copy_)
        else:
            keep.append(node)
    del graph.node[:]
    graph.node.extend(keep)
    return proto


class _Quiet(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


def session(model: bytes, threads: int = 1) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """An ONNX Runtime CPU session for ``model``: ``threads`` intra-op threads
    (one per worker process, as torch runs), no spinning between calls. Returns
    ``planes -> (logits [B, A], value [B])`` in float32."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(1, threads)
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.log_severity_level = 3  # errors only
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])

    def run(planes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logits, value = sess.run(None, {"x": np.ascontiguousarray(planes, dtype=np.float32)})
        return logits, value

    return run


def int8_runner(game: Game, folded: torch.nn.Module, *, positions: int = 512,
                seed: int = 0) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """:func:`session` over ``folded`` (an inference net: BatchNorm folded)
    with its trunk in int8, calibrated on :func:`calibration_planes` of it."""
    if not available():
        raise ValueError("precision 'int8' needs onnxruntime and onnx: pip install onnx onnxruntime "
                         "(make setup installs them)")
    key = _weights_key(folded, game.name, positions, seed)
    model = _QUANTISED.get(key)
    if model is None:
        model = _read_cached(key)
    if model is None:
        planes = calibration_planes(game, folded, positions, seed=seed)
        model = quantize(export_onnx(folded, planes), planes)
        _write_cached(key, model)
    _QUANTISED[key] = model
    while len(_QUANTISED) > 8:
        _QUANTISED.popitem(last=False)
    return session(model, torch.get_num_threads())


#: quantised models this process made or read, by :func:`_weights_key` (an
#: arena's players and a stage's later evaluators of the same net reuse them)
_QUANTISED: OrderedDict[str, bytes] = OrderedDict()

#: quantised models kept on disk (the least recently used go first)
CACHE_FILES = 64


def cache_dir() -> Path | None:
    """Where quantised models are kept between processes: ``ZEROLOOP_CACHE``
    (``off`` keeps them in memory only), else ``$XDG_CACHE_HOME/zeroloop``
    or ``~/.cache/zeroloop``; its ``int8/`` folder.

    Quantising is the same arithmetic in every process (a function of the
    weights alone), yet it cost each stage process and each of its workers
    about a second (exporting through ``torch.onnx`` is most of it) before
    its first game; a file made once serves the rest of the run."""
    root = os.environ.get("ZEROLOOP_CACHE")
    if root == "off":
        return None
    if not root:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "zeroloop"
    return Path(root) / "int8"


def _cache_path(key: str) -> Path | None:
    folder = cache_dir()
    if folder is None:
        return None
    # what else decides the bytes: this module's code, the exporter's and quantiser's versions, and
    # the machine (the calibration runs fp32 kernels, which differ by instruction set)
    from importlib.metadata import version

    h = hashlib.sha256(key.encode())
    h.update(Path(__file__).read_bytes())
    h.update(f"{torch.__version__} {version('onnx')} {version('onnxruntime')}".encode())
    h.update(_platform_key().encode())
    return folder / f"{h.hexdigest()[:40]}.onnx"


#: Environment variables that cap the instructions the CPU libraries use (oneDNN, PyTorch's own
#: kernels, fbgemm, MKL, numba, numpy): a run under caps says so in its machine line, and keeps
#: its own calibrated files.
CAP_VARIABLES = ("ATEN_CPU_CAPABILITY", "FBGEMM_ENABLE_INSTRUCTIONS", "MKL_ENABLE_INSTRUCTIONS",
                 "NPY_DISABLE_CPU_FEATURES", "NUMBA_CPU_NAME", "ONEDNN_MAX_CPU_ISA")


def _platform_key() -> str:
    """The CPU's flags, the instruction-set caps in the environment and where
    ONNX Runtime loads from: a quantised model is calibrated by running the
    fp32 net, whose kernels differ by instruction set, so a cache shared by
    machines (a home folder on a network share) or by a run under instruction-set
    caps and a native one keeps a file for each."""
    import importlib.util
    import platform

    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        flags = platform.processor()
    spec = importlib.util.find_spec("onnxruntime")
    caps = [os.environ.get(name, "") for name in CAP_VARIABLES]
    return repr((platform.machine(), flags, caps, spec.origin if spec else None))


def _read_cached(key: str) -> bytes | None:
    """The quantised model kept for ``key``, or None (none kept, or a file
    whose checksum fails: it is made again and replaced)."""
    path = _cache_path(key)
    try:
        data = path.read_bytes() if path is not None else b""
    except OSError:
        return None
    digest, model = data[:64], data[64:]
    if not model or hashlib.sha256(model).hexdigest().encode() != digest:
        return None
    try:
        os.utime(path)  # recently used: kept longest
    except OSError:
        pass
    return model


def _write_cached(key: str, model: bytes) -> None:
    """Keeps ``model`` for other processes (atomically: a reader sees a whole
    file or none); a cache that cannot be written only costs the next process
    the quantising."""
    path = _cache_path(key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(hashlib.sha256(model).hexdigest().encode() + model)
        os.replace(tmp, path)
        kept = sorted(path.parent.glob("*.onnx"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in kept[CACHE_FILES:]:
            old.unlink(missing_ok=True)
    except OSError:
        pass


def _weights_key(net: torch.nn.Module, *parts) -> str:
    h = hashlib.sha256(repr(parts).encode())
    for name, tensor in net.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()
