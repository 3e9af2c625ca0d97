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
quantisation of the linear layers; int8 static quantisation of the whole
folded net through PyTorch's x86 backend (FX graph mode: fbgemm, with oneDNN
where it is faster); torch.compile (inductor) of the folded net; ONNX Runtime
fp32 on the folded net; ONNX Runtime int8, the trunk statically quantised
(``runtime.precision: int8``). Both int8 options are calibrated on positions
from the model's own games (:func:`zeroloop.engine.nn.int8.calibration_planes`),
the positions it is tested on are others.

``--search N`` also measures the searched move error (and the raw policy's)
of the precisions the pipeline runs (fp32, bf16, int8) on N Connect Four
positions per Pons group, at ``--sims`` simulations, with each error's 95%
interval and the paired difference from fp32's.

    python benchmarks/inference_options.py [--batches 1,8,32,64] [--seconds 2] [--positions 300]
        [--only NAME,...] [--search 0] [--sims 200]
"""

from __future__ import annotations

import argparse
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


def onnx_infer(net: nn.Module, example: np.ndarray) -> Infer:
    """The net in ONNX Runtime fp32, exported and run as ``runtime.precision:
    int8`` runs its quantised form (one thread, no spinning)."""
    from zeroloop.engine.nn.int8 import export_onnx, session

    run_session = session(export_onnx(net, example))

    def run(planes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logits, value = run_session(planes)
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True), value

    return run


def fx_int8(net: nn.Module, calibration: np.ndarray) -> Infer:
    """The folded net statically quantised by PyTorch (FX graph mode), with
    the x86 backend's default configuration (per-channel weights, histogram
    observers), calibrated on ``calibration``."""
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    torch.backends.quantized.engine = "x86"
    prepared = prepare_fx(net, get_default_qconfig_mapping("x86"), (torch.from_numpy(calibration[:1]),))
    with torch.inference_mode():
        for i in range(0, len(calibration), 32):
            prepared(torch.from_numpy(calibration[i:i + 32]))
    return torch_infer(convert_fx(prepared))


def compiled(net: nn.Module) -> nn.Module:
    """``torch.compile`` (inductor) of ``net`` for fixed shapes, from a clean
    cache: the two compiled options share the forward's code, and the second
    would otherwise hit dynamo's recompile limit and run eagerly."""
    torch._dynamo.reset()
    return torch.compile(net, dynamic=False)


def precision_infer(net: nn.Module, precision: str) -> Infer:
    """The net as ``runtime.precision: <precision>`` runs it in self-play."""
    from zeroloop.engine.games import make_game
    from zeroloop.engine.nn import NetworkEvaluator

    # the evaluator only needs the game to encode states; these options get planes
    return NetworkEvaluator(make_game("connect4"), net, "cpu", precision=precision).evaluate_planes


def options(net: nn.Module, example: np.ndarray, calibration: np.ndarray) -> dict[str, Callable[[], Infer]]:
    from zeroloop.engine.nn import inference_net

    folded = lambda: inference_net(net)  # noqa: E731  (BatchNorm folded, as self-play runs it)
    return {
        "eager fp32": lambda: torch_infer(net),
        "BN folded": lambda: torch_infer(folded()),
        "BN folded + channels-last": lambda: torch_infer(folded().to(memory_format=torch.channels_last),
                                                         channels_last=True),
        "BN folded + bf16 autocast": lambda: torch_infer(folded(), bf16=True),
        "BN folded + bf16 weights": lambda: precision_infer(net, "bf16"),
        "BN folded + int8 linear": lambda: torch_infer(torch.ao.quantization.quantize_dynamic(
            folded(), {nn.Linear}, dtype=torch.qint8)),
        "BN folded + int8 static x86": lambda: fx_int8(folded(), calibration),
        "BN folded + torch.compile": lambda: torch_infer(compiled(folded())),
        "BN folded + cl + compile": lambda: torch_infer(
            compiled(folded().to(memory_format=torch.channels_last)), channels_last=True),
        "BN folded + ONNX Runtime": lambda: onnx_infer(folded(), example),
        "BN folded + ORT int8 trunk": lambda: precision_infer(net, "int8"),
    }


def positions_per_s(infer: Infer, planes: np.ndarray, seconds: float) -> float:
    infer(planes)  # warm-up (and compilation for this shape)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        infer(planes)
        n += len(planes)
    return n / (time.perf_counter() - t0)


def search_errors(net: nn.Module, game, per_group: int, sims: int) -> None:
    """Raw and searched move error of fp32, bf16 and int8 (as the pipeline runs
    them) on Pons' Connect Four groups, with the paired difference from fp32."""
    from zeroloop.engine.nn import NetworkEvaluator
    from zeroloop.engine.perfect import perfect_scorer
    from zeroloop.engine.positions import ILLEGAL, make_connect4_benchmark, move_errors, move_mistakes
    from zeroloop.engine.search import BatchedMCTS, SearchConfig, search_moves

    scorer = perfect_scorer(game)
    if scorer is None or game.name != "connect4":
        print("search errors: skipped (Connect Four with the solver extra only)")
        return
    ps = make_connect4_benchmark(game, per_group, np.random.default_rng(2), scorer)
    states = ps.states(game)
    legal = ps.labels != ILLEGAL
    print(f"move error on {len(states)} Pons positions ({per_group} per group, seed 2), "
          f"search {sims} simulations:")
    first: dict[str, np.ndarray] = {}
    for precision in ("fp32", "bf16", "int8"):
        try:
            ev = NetworkEvaluator(game, net, "cpu", precision=precision)
        except ValueError as exc:
            print(f"  {precision:5s} skipped: {exc}")
            continue
        t0 = time.perf_counter()
        priors, _ = ev(states)
        raw = np.where(legal, priors, -1).argmax(1)
        mcts = BatchedMCTS(game, ev, SearchConfig(simulations=sims), len(states),
                           rng=np.random.default_rng(0))
        searched = np.asarray(search_moves(mcts, states)[0])
        line = []
        for kind, moves in (("raw", raw), ("search", searched)):
            err = move_errors(ps, moves)
            lo, hi = err.interval()
            wrong = move_mistakes(ps, moves)
            first.setdefault(kind, wrong)
            d = wrong.astype(float) - first[kind]
            half = 1.96 * d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else 0.0
            line.append(f"{kind} {err.rate:.1%} [{lo:.1%}, {hi:.1%}] (minus fp32: {d.mean():+.2%} "
                        f"\u00b1{half:.2%})")
        print(f"  {precision:5s} " + "; ".join(line) + f" | {time.perf_counter() - t0:.0f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="", help="model file (default: the shipped Connect Four model)")
    ap.add_argument("--batches", default="1,8,32,64", help="batch sizes, comma-separated")
    ap.add_argument("--seconds", type=float, default=2.0, help="seconds of calls per option and batch")
    ap.add_argument("--positions", type=int, default=300, help="solver-labelled positions (0: skip)")
    ap.add_argument("--only", default="", help="comma-separated option names to run (default: all)")
    ap.add_argument("--search", type=int, default=0,
                    help="Pons positions per group for the searched move error of fp32/bf16/int8 (0: skip)")
    ap.add_argument("--sims", type=int, default=200, help="with --search: simulations per move")
    a = ap.parse_args()

    from zeroloop.engine.games import random_line
    from zeroloop.engine.nn import inference_net
    from zeroloop.engine.nn.int8 import calibration_planes
    from zeroloop.pipeline.data.catalogue import SHIPPED_DIR
    from zeroloop.pipeline.data.storage import load_model

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")  # torch's deprecation notes on quantisation and the ONNX exporter

    model = a.model or str(SHIPPED_DIR / "connect4.pt")
    net, game, _ = load_model(model)
    net.eval()
    rng = np.random.default_rng(0)
    batches = [int(b) for b in a.batches.split(",")]
    states = [random_line(game, int(rng.integers(0, game.max_moves // 2)), rng)[0]
              for _ in range(max(batches))]
    planes = game.encode(states)
    legal = np.stack([game.legal_mask(s) for s in states])
    calibration = calibration_planes(game, inference_net(net), 512)

    labelled = None
    if a.positions:
        from zeroloop.engine.perfect import perfect_scorer
        from zeroloop.engine.positions import make_position_set

        scorer = perfect_scorer(game)
        if scorer is not None:
            labelled = make_position_set(game, a.positions, np.random.default_rng(1), scorer)
    from zeroloop.engine.nn.machine import describe, summary_line

    print("machine: " + summary_line(describe("cpu", "auto"), "auto"))  # what auto picks here
    print(f"model {model} ({game.name}, {net.config.shape}), 1 torch thread, "
          f"{a.seconds:g} s per measurement")
    base_p, base_v = torch_infer(net)(planes)
    base_speed: dict[int, float] = {}
    chosen = [name.strip() for name in a.only.split(",") if name.strip()]
    for name, make in options(net, planes[:1], calibration).items():
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
            from zeroloop.engine.positions import ILLEGAL, move_errors

            lp, _ = infer(game.encode(labelled.states(game)))
            err = move_errors(labelled, np.where(labelled.labels != ILLEGAL, lp, -1).argmax(1))
            line += f" | policy error {err.rate:.1%} of {err.positions}"
        print(line, flush=True)
    if a.search:
        search_errors(net, game, a.search, a.sims)


if __name__ == "__main__":
    main()
