"""What a bigger residual net costs on this CPU, measured in one run: the
self-play network call (BatchNorm folded, at the pipeline's precision, a batch
of ``selfplay.eval_batch`` positions) and a training step (Adam, channels-last
as the trainer runs it, a batch of ``train.batch_size``), each as a ratio to
the first net listed. An ablation of net size at an equal CPU budget sets its
game count from these ratios (docs/strength.md, round 13).

The network call is self-play's own (:class:`~zeroloop.engine.nn.inference.NetworkEvaluator`),
the step the trainer's loss (:func:`~zeroloop.pipeline.training.module.alphazero_loss`), on
the net's own self-play positions (int8 calibration's
:func:`~zeroloop.engine.nn.int8.calibration_planes`), one torch thread.

    python benchmarks/net_sizes.py [--nets 5x64,6x96,10x64,8x64,6x80] [--game connect4]
        [--batch 32] [--train-batch 512] [--seconds 4] [--precision auto|fp32|bf16|int8]
"""

from __future__ import annotations

import argparse
import time


def _timed(fn, seconds: float) -> float:
    """Seconds per call of ``fn``, after two warm-up calls, over about ``seconds``."""
    fn()
    fn()
    start, calls = time.perf_counter(), 0
    while True:
        fn()
        calls += 1
        took = time.perf_counter() - start
        if took >= seconds:
            return took / calls


def parse_nets(text: str) -> list[tuple[int, int]]:
    nets = []
    for item in text.split(","):
        blocks, sep, channels = item.strip().partition("x")
        if not (sep and blocks.isdigit() and channels.isdigit() and int(blocks) > 0 and int(channels) > 0):
            raise argparse.ArgumentTypeError(f"--nets {item!r}: write BLOCKSxCHANNELS, e.g. 5x64")
        nets.append((int(blocks), int(channels)))
    return nets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nets", type=parse_nets, default=parse_nets("5x64,6x96,10x64,8x64,6x80"),
                    help="BLOCKSxCHANNELS,... (the first is the baseline of the ratios; default "
                         "5x64,6x96,10x64,8x64,6x80)")
    ap.add_argument("--game", default="connect4")
    ap.add_argument("--value-hidden", type=int, default=64, help="net.value_hidden (default 64)")
    ap.add_argument("--batch", type=int, default=32, help="positions a network call (selfplay.eval_batch)")
    ap.add_argument("--train-batch", type=int, default=512,
                    help="positions a training step (train.batch_size)")
    ap.add_argument("--seconds", type=float, default=4.0, help="measuring time per net and kind")
    ap.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16", "int8"],
                    help="the network call's number format (auto: what runtime.precision: auto picks here)")
    a = ap.parse_args()

    import numpy as np
    import torch

    torch.set_num_threads(1)
    from zeroloop.engine.games import make_game
    from zeroloop.engine.nn.inference import NetworkEvaluator, inference_net
    from zeroloop.engine.nn.int8 import calibration_planes
    from zeroloop.engine.nn.machine import describe, summary_line
    from zeroloop.engine.nn.net import NetConfig, PolicyValueNet
    from zeroloop.pipeline.training.module import alphazero_loss

    game = make_game(a.game)
    print(f"machine: {summary_line(describe('cpu', a.precision), a.precision)}; 1 torch thread; "
          f"network call: batch {a.batch}; training step: fp32 channels-last, batch {a.train_batch}")
    rows = []
    for blocks, channels in a.nets:
        torch.manual_seed(0)
        net = PolicyValueNet.for_game(game, NetConfig(blocks=blocks, channels=channels,
                                                      value_hidden=a.value_hidden))
        # self-play's own network call (BatchNorm folded, at the precision asked, softmax priors)
        evaluator = NetworkEvaluator(game, net, "cpu", precision=a.precision)
        planes = calibration_planes(game, inference_net(net), a.batch)
        infer = _timed(lambda e=evaluator, x=planes: e.evaluate_planes(x), a.seconds)

        # a training step as the trainer takes it: channels-last, the AlphaZero loss with L2, Adam
        net = net.train().to(memory_format=torch.channels_last)
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        reps = -(-a.train_batch // len(planes))
        x = torch.from_numpy(np.repeat(planes, reps, axis=0)[:a.train_batch]).contiguous(
            memory_format=torch.channels_last)
        with torch.no_grad():
            pi, z = (t.float() for t in evaluator.net(x.to(evaluator.dtype)))
        pi, z = torch.softmax(pi, dim=1), z.clamp(-1, 1)
        params = list(net.parameters())

        def step(n=net, o=opt, xb=x, pi=pi, z=z, ps=params):
            o.zero_grad()
            logits, value = n(xb)
            alphazero_loss(logits, value, pi, z, ps, 1e-4)["loss"].backward()
            o.step()
        train = _timed(step, a.seconds)
        size = sum(p.numel() for p in params)
        rows.append((f"{blocks}x{channels}", size, infer, train))
        print(f"{blocks}x{channels}: {size / 1e6:.2f} M parameters, network call {infer * 1e3:.2f} ms, "
              f"training step {train * 1e3:.0f} ms", flush=True)
    base = rows[0]
    print(f"\nratio to {base[0]} (this run):")
    print("| net | parameters | network call | training step |")
    print("|---|---|---|---|")
    for name, params, infer, train in rows:
        print(f"| {name} | {params / base[1]:.2f}x | {infer / base[2]:.2f}x | {train / base[3]:.2f}x |")


if __name__ == "__main__":
    main()
