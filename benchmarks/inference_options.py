"""Network inference options on this CPU, measured in one run: speed and what
each does to the network's answers.

For one model (default: the Connect Four model shipped with zeroloop) and one
torch thread, every option evaluates the same real positions at several batch
sizes. Printed per option: positions/s per batch size and its ratio to plain
eager fp32 at that batch, the largest change of a prior and of a value against
fp32, how often the most likely legal move changes, and the raw policy's move
error on solver-labelled positions (with the solver extra; the same positions
for every option). An option that is faster but moves the error beyond noise
is no option.

Options: eager fp32; BatchNorm folded into the convolutions; channels-last;
bf16 autocast (native on CPUs with avx512_bf16 / AMX); the folded net's
weights and activations in bf16 (``runtime.precision: bf16``); int8 dynamic
quantisation of the linear layers; torch.compile (inductor) of the folded net;
ONNX Runtime on the folded net (when onnx and onnxruntime are installed).

    python benchmarks/inference_options.py [--batches 1,8,32,64] [--seconds 2] [--positions 300]
"""

from __future__ import annotations

import argparse
import io
import time
import warnings
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

Infer = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


def torch_infer(net: nn.Module, *, channels_last: bool = False, bf16: bool = False) -> Infer:
    def run(planes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with torch.inference_mode():
            x = torch.from_numpy(planes)
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits, value = net(x)
            return torch.softmax(logits.float(), 1).numpy(), value.float().numpy()

    return run


def bf16_weights(net: nn.Module) -> Infer:
    """The inference net stored and run in bf16, as ``runtime.precision: bf16`` runs it."""
    from zeroloop.engine.games import make_game
    from zeroloop.engine.nn import NetworkEvaluator

    # the evaluator only needs the game to encode states; these options get planes
    return NetworkEvaluator(make_game("connect4"), net, "cpu", precision="bf16").evaluate_planes


def onnx_infer(net: nn.Module, example: np.ndarray) -> Infer:
    import onnxruntime as ort

    buf = io.BytesIO()
    torch.onnx.export(net, (torch.from_numpy(example),), buf, input_names=["x"],
                      output_names=["logits", "value"], dynamo=False,
                      dynamic_axes={"x": {0: "b"}, "logits": {0: "b"}, "value": {0: "b"}})
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(buf.getvalue(), opts, providers=["CPUExecutionProvider"])

    def run(planes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logits, value = sess.run(None, {"x": planes})
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True), value

    return run


def options(net: nn.Module, example: np.ndarray) -> dict[str, Callable[[], Infer]]:
    from zeroloop.engine.nn import inference_net

    folded = lambda: inference_net(net)  # noqa: E731  (BatchNorm folded, as self-play runs it)
    return {
        "eager fp32": lambda: torch_infer(net),
        "BN folded": lambda: torch_infer(folded()),
        "BN folded + channels-last": lambda: torch_infer(folded().to(memory_format=torch.channels_last),
                                                         channels_last=True),
        "BN folded + bf16 autocast": lambda: torch_infer(folded(), bf16=True),
        "BN folded + bf16 weights": lambda: bf16_weights(net),
        "BN folded + int8 linear": lambda: torch_infer(torch.ao.quantization.quantize_dynamic(
            folded(), {nn.Linear}, dtype=torch.qint8)),
        "BN folded + torch.compile": lambda: torch_infer(torch.compile(folded(), dynamic=False)),
        "BN folded + ONNX Runtime": lambda: onnx_infer(folded(), example),
    }


def positions_per_s(infer: Infer, planes: np.ndarray, seconds: float) -> float:
    infer(planes)  # warm-up (and compilation for this shape)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        infer(planes)
        n += len(planes)
    return n / (time.perf_counter() - t0)


def main() -> None:
    from zeroloop.engine.games import random_line
    from zeroloop.pipeline.data.catalogue import SHIPPED_DIR
    from zeroloop.pipeline.data.storage import load_model

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(SHIPPED_DIR / "connect4.pt"), help="model file (default: shipped)")
    ap.add_argument("--batches", default="1,8,32,64", help="batch sizes, comma-separated")
    ap.add_argument("--seconds", type=float, default=2.0, help="seconds of calls per option and batch")
    ap.add_argument("--positions", type=int, default=300, help="solver-labelled positions (0: skip)")
    ap.add_argument("--only", default="", help="comma-separated option names to run (default: all)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")  # torch's deprecation notes on quantisation and the ONNX exporter

    net, game, _ = load_model(a.model)
    net.eval()
    rng = np.random.default_rng(0)
    batches = [int(b) for b in a.batches.split(",")]
    states = [random_line(game, int(rng.integers(0, game.max_moves // 2)), rng)[0]
              for _ in range(max(batches))]
    planes = game.encode(states)
    legal = np.stack([game.legal_mask(s) for s in states])

    labelled = None
    if a.positions:
        from zeroloop.engine.perfect import perfect_scorer
        from zeroloop.engine.positions import make_position_set

        scorer = perfect_scorer(game)
        if scorer is not None:
            labelled = make_position_set(game, a.positions, np.random.default_rng(1), scorer)
    from zeroloop.engine.nn.machine import describe, summary_line

    print("machine: " + summary_line(describe("cpu", "auto"), "auto"))  # what auto picks here
    print(f"model {a.model} ({game.name}, {net.config.blocks}x{net.config.channels}), 1 torch thread, "
          f"{a.seconds:g} s per measurement")
    base_p, base_v = torch_infer(net)(planes)
    base_speed: dict[int, float] = {}
    chosen = [name.strip() for name in a.only.split(",") if name.strip()]
    for name, make in options(net, planes[:1]).items():
        if chosen and name not in chosen and name != "eager fp32":
            continue
        try:
            t0 = time.perf_counter()
            infer = make()
            p, v = infer(planes)
            setup = time.perf_counter() - t0
        except Exception as exc:  # noqa: BLE001 - an option this machine cannot run is reported, not fatal
            print(f"{name:28s} skipped: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}")
            continue
        speeds = []
        for b in batches:
            s = positions_per_s(infer, planes[:b], a.seconds)
            base_speed.setdefault(b, s)
            speeds.append(f"b{b} {s:7.0f}/s x{s / base_speed[b]:.2f}")
        moved = np.mean(np.where(legal, p, -1).argmax(1) != np.where(legal, base_p, -1).argmax(1))
        line = (f"{name:28s} {'  '.join(speeds)} | max dprior {np.abs(p - base_p).max():.1e} "
                f"max dvalue {np.abs(v - base_v).max():.1e} best move changed {moved:.1%} "
                f"| setup {setup:.1f}s")
        if labelled is not None:
            from zeroloop.engine.positions import move_errors

            lp, _ = infer(game.encode(labelled.states(game)))
            from zeroloop.engine.positions import ILLEGAL

            err = move_errors(labelled, np.where(labelled.labels != ILLEGAL, lp, -1).argmax(1))
            line += f" | policy error {err.rate:.1%} of {err.positions}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
