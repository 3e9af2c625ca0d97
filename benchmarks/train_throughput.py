"""Training throughput of the Lightning trainer against the raw PyTorch loop, in one run.

Both train the default Connect Four net on the same random positions with the
same batch size for the same number of steps; the ratios show what the
channels-last layout (``train.channels_last``, the default) gains over NCHW
in the raw loop, and what Lightning (and the symmetry augmentation) costs on
top of forward + backward + step.
Run it with the machine otherwise idle; threads = cores (the train stage
runs alone).

    python benchmarks/train_throughput.py [--samples 8192] [--batch 128] [--threads 2] [--device cpu|cuda]
        [--kind gpool] [--blocks 3] [--channels 48] [--value-hidden 64]

The net and batch default to the default run's (params.yaml).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=8192, help="random positions each loop trains on once")
    from zeroloop.pipeline.params import Params

    d = Params()
    ap.add_argument("--batch", type=int, default=d.train.batch_size,
                    help=f"positions a step (train.batch_size: {d.train.batch_size})")
    ap.add_argument("--threads", type=int, default=2,
                    help="torch threads (the train stage uses every core it may run on)")
    ap.add_argument("--kind", default=d.net.kind, choices=["resnet", "gpool"],
                    help=f"net.kind ({d.net.kind})")
    ap.add_argument("--blocks", type=int, default=d.net.blocks, help=f"net.blocks ({d.net.blocks})")
    ap.add_argument("--channels", type=int, default=d.net.channels, help=f"net.channels ({d.net.channels})")
    ap.add_argument("--value-hidden", type=int, default=d.net.value_hidden,
                    help=f"net.value_hidden ({d.net.value_hidden})")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (both loops run there)")
    a = ap.parse_args()

    from zeroloop.engine.games import make_game
    from zeroloop.engine.nn import NetConfig, PolicyValueNet
    from zeroloop.pipeline.runtime.process import quiet_libraries
    from zeroloop.pipeline.training.config import TrainConfig
    from zeroloop.pipeline.training.module import (
        alphazero_loss,
        channels_last_on,
        fit_network,
        lightning_device,
    )
    from zeroloop.pipeline.training.replay import ReplayData

    quiet_libraries()
    torch.set_num_threads(a.threads)
    game = make_game("connect4")
    rng = np.random.default_rng(0)
    planes = (rng.random((a.samples, 4, game.rows, game.cols)) < 0.3).astype(np.float32)
    policy = rng.dirichlet(np.ones(game.num_actions), a.samples).astype(np.float32)
    z = rng.choice([-1.0, 0.0, 1.0], a.samples).astype(np.float32)
    cfg = NetConfig(kind=a.kind, blocks=a.blocks, channels=a.channels, value_hidden=a.value_hidden)

    x, p, t = (torch.from_numpy(v).to(a.device) for v in (planes, policy, z))

    def raw_loop(channels_last: bool) -> float:
        """Samples/s of forward + loss + backward + Adam step, in one memory layout."""
        torch.manual_seed(0)
        net = PolicyValueNet.for_game(game, cfg).train().to(a.device)
        xs = x
        if channels_last:
            net = net.to(memory_format=torch.channels_last)
            xs = x.contiguous(memory_format=torch.channels_last)
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        t0 = time.perf_counter()
        for i in range(0, a.samples - a.batch + 1, a.batch):
            logits, value = net(xs[i:i + a.batch])
            loss = alphazero_loss(logits, value, p[i:i + a.batch], t[i:i + a.batch], list(net.parameters()),
                                  1e-4)["loss"]
            opt.zero_grad()
            loss.backward()
            opt.step()
        if a.device.startswith("cuda"):
            torch.cuda.synchronize()
        return (a.samples // a.batch) * a.batch / (time.perf_counter() - t0)

    raw_loop(False)  # warm-up: oneDNN builds its kernels for these shapes
    raw = raw_loop(False)
    raw_cl = raw_loop(True)

    torch.manual_seed(0)
    net = PolicyValueNet.for_game(game, cfg)
    t0 = time.perf_counter()
    once = TrainConfig(epochs=1, batch_size=a.batch, val_fraction=0.0)  # channels_last, as the default
    layout_cl = channels_last_on(once, lightning_device(a.device)[0])  # the CPU only
    layout, raw_same = ("channels-last", raw_cl) if layout_cl else ("NCHW", raw)
    fit_network(net, game, ReplayData(planes, policy, z, z.copy()), once,
                device=a.device, progress=False)
    lit = (a.samples // a.batch) * a.batch / (time.perf_counter() - t0)
    cuda = a.device.startswith("cuda")
    where = torch.cuda.get_device_name(a.device) if cuda else f"{a.threads} torch threads"
    from zeroloop.engine.nn.machine import describe, summary_line

    print("machine: " + summary_line(describe(a.device, "auto"), "auto"))  # what auto picks here
    print(f"net {a.kind} {a.blocks}x{a.channels}, batch {a.batch}, {where}, {a.samples} samples")
    print(f"raw PyTorch loop, NCHW:          {raw:8.0f} samples/s")
    print(f"raw PyTorch loop, channels-last: {raw_cl:8.0f} samples/s")
    print(f"Lightning fit ({layout}):{' ' * (18 - len(layout))}{lit:8.0f} samples/s "
          "(augmentation on, trainer start-up included; the train stage's layout here)")
    print(f"ratio channels-last / NCHW (raw): {raw_cl / raw:.3f}")
    print(f"ratio Lightning / raw {layout}: {lit / raw_same:.3f}")


if __name__ == "__main__":
    main()
