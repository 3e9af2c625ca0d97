"""What a net costs on this CPU, measured in one run: the self-play network
call (BatchNorm folded, at the pipeline's precision, a batch of
``selfplay.eval_batch`` positions) and a training step (Adam, channels-last
where the trainer uses it, a batch of ``train.batch_size``), per net as
positions/s, training samples/s and FLOPs per position (counted, not timed),
and each as a ratio to the first net listed. An ablation of net size at an
equal CPU budget sets its game count from these ratios (docs/lab/notebook.md,
round 13); the families of ``net.kind`` (resnet, gpool, mlp) are compared the
same way (docs/lab/speed-log.md).

The network call is self-play's own (:class:`~zeroloop.engine.nn.inference.NetworkEvaluator`),
the step the trainer's loss (:func:`~zeroloop.pipeline.training.module.alphazero_loss`), on
the net's own self-play positions (int8 calibration's
:func:`~zeroloop.engine.nn.int8.calibration_planes`), one torch thread.

    python benchmarks/net_sizes.py [--nets 5x64,6x96,10x64,8x64,6x80] [--game connect4]
        [--batch 32] [--train-batch 512] [--seconds 4] [--precision auto|fp32|bf16|fp16|int8]
        [--device cpu|cuda[:N]|auto]

On CUDA (``benchmarks/gpu_check.sh`` runs it there) the call and the step are
timed to the device's end of each (synchronised), in the trainer's layout
there (NCHW); int8 is the CPU's alone, fp16 CUDA's.

A net is ``BLOCKSxCHANNELS`` (a resnet), ``gpool:BLOCKSxCHANNELS`` or
``mlp:LAYERSxHIDDEN``; the families of issue 51: ``--nets 5x64,gpool:3x32,mlp:3x512``.
A tower's heads other than AlphaZero's (``net.policy_channels``, ``net.value_channels``)
follow a slash: ``gpool:3x48/4x32`` (AlphaZero.jl's Connect Four heads).
"""

from __future__ import annotations

import argparse
import re
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


def parse_nets(text: str) -> list[dict]:
    """``[KIND:]AxB[/PxV],...`` -> the ``net`` keys of each (A x B: blocks x channels, an MLP's
    layers x hidden; P x V: a tower's policy and value head channels)."""
    nets = []
    for item in text.split(","):
        kind, colon, shape = item.strip().rpartition(":")
        kind = kind if colon else "resnet"
        m = re.fullmatch(r"([1-9]\d*)x([1-9]\d*)(?:/([1-9]\d*)x([1-9]\d*))?", shape)
        if not (kind in ("resnet", "gpool", "mlp") and m and (kind != "mlp" or m[3] is None)):
            raise argparse.ArgumentTypeError(f"--nets {item!r}: write BLOCKSxCHANNELS (e.g. 5x64), "
                                             "gpool:BLOCKSxCHANNELS or mlp:LAYERSxHIDDEN, a tower's heads "
                                             "after a slash (gpool:3x48/4x32: policy 4, value 32 channels)")
        keys = ("layers", "hidden") if kind == "mlp" else ("blocks", "channels")
        net = {"kind": kind, keys[0]: int(m[1]), keys[1]: int(m[2])}
        if m[3] is not None:
            net.update(policy_channels=int(m[3]), value_channels=int(m[4]))
        nets.append(net)
    return nets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nets", type=parse_nets, default=parse_nets("5x64,6x96,10x64,8x64,6x80"),
                    help="[KIND:]AxB,... (the first is the baseline of the ratios; default "
                         "5x64,6x96,10x64,8x64,6x80; the families: 5x64,gpool:3x32,mlp:3x512)")
    ap.add_argument("--game", default="connect4")
    ap.add_argument("--value-hidden", type=int, default=64, help="net.value_hidden (default 64)")
    ap.add_argument("--batch", type=int, default=32, help="positions a network call (selfplay.eval_batch)")
    ap.add_argument("--train-batch", type=int, default=512,
                    help="positions a training step (train.batch_size)")
    ap.add_argument("--seconds", type=float, default=4.0, help="measuring time per net and kind")
    ap.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16", "fp16", "int8"],
                    help="the network call's number format (auto: what runtime.precision: auto picks here)")
    ap.add_argument("--device", default="cpu", help="cpu (default), cuda[:N] or auto (CUDA when present)")
    a = ap.parse_args()
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", a.device):  # before the seconds of imports below
        ap.error(f"device {a.device!r}: expected auto, cpu or cuda[:N]")

    import numpy as np
    import torch

    torch.set_num_threads(1)
    from zeroloop.engine.games import make_game
    from zeroloop.engine.nn.inference import NetworkEvaluator, inference_net, resolve_device
    from zeroloop.engine.nn.int8 import calibration_planes
    from zeroloop.engine.nn.machine import describe, summary_line
    from zeroloop.engine.nn.net import NetConfig, PolicyValueNet, flops_per_position
    from zeroloop.pipeline.training.config import TrainConfig
    from zeroloop.pipeline.training.module import alphazero_loss, channels_last_on

    game = make_game(a.game)
    try:
        device = resolve_device(a.device)
    except ValueError as exc:
        ap.error(str(exc))
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    print(f"machine: {summary_line(describe(device, a.precision), a.precision)}; 1 torch thread; "
          f"network call: batch {a.batch}; training step: fp32, channels-last where the trainer uses it "
          f"(convolutions), batch {a.train_batch}")
    rows = []
    for keys in a.nets:
        torch.manual_seed(0)
        config = NetConfig(**keys, value_hidden=a.value_hidden)
        net = PolicyValueNet.for_game(game, config)
        flops = flops_per_position(net)
        # self-play's own network call (BatchNorm folded, at the precision asked, softmax priors)
        evaluator = NetworkEvaluator(game, net, str(device), precision=a.precision)
        planes = calibration_planes(game, inference_net(net), a.batch)
        infer = _timed(lambda e=evaluator, x=planes: e.evaluate_planes(x), a.seconds)

        # a training step as the trainer takes it: its layout, the AlphaZero loss with L2, Adam
        nhwc = channels_last_on(TrainConfig(), device.type, net)
        layout = torch.channels_last if nhwc else torch.contiguous_format
        net = net.train().to(device, memory_format=layout)
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        reps = -(-a.train_batch // len(planes))
        x = torch.from_numpy(np.repeat(planes, reps, axis=0)[:a.train_batch]).to(device).contiguous(
            memory_format=layout)
        with torch.no_grad():
            pi, z = (t.float() for t in evaluator.net(x.to(evaluator.dtype)))
        pi, z = torch.softmax(pi, dim=1), z.clamp(-1, 1)
        params = list(net.parameters())

        def step(n=net, o=opt, xb=x, pi=pi, z=z, ps=params):
            o.zero_grad()
            logits, value = n(xb)
            alphazero_loss(logits, value, pi, z, ps, 1e-4)["loss"].backward()
            o.step()
            sync()
        train = _timed(step, a.seconds)
        size = sum(p.numel() for p in params)
        rows.append((config.shape, size, flops, infer, train))
        print(f"{config.shape}: {size / 1e6:.2f} M parameters, {flops / 1e6:.2f} MFLOP a position, "
              f"network call {infer * 1e3:.2f} ms ({a.batch / infer:,.0f} positions/s), "
              f"training step {train * 1e3:.0f} ms ({a.train_batch / train:,.0f} samples/s)", flush=True)
    base = rows[0]
    print(f"\nratio to {base[0]} (this run):")
    print("| net | parameters | FLOPs a position | network call | training step |")
    print("|---|---|---|---|---|")
    for name, params, flops, infer, train in rows:
        print(f"| {name} | {params / base[1]:.2f}x | {flops / base[2]:.3f}x | {infer / base[3]:.2f}x "
              f"| {train / base[4]:.2f}x |")


if __name__ == "__main__":
    main()
