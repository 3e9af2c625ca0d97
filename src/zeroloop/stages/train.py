"""train@g: a candidate network trained from the previous best on the replay window.

The window is the last ``train.replay_generations`` generations of self-play.
It is chained through small manifests (data/replay/gen_g.json lists the
shards of the window and their checksums), so a generation depends on its
predecessor's manifest rather than on a variable number of directories.
"""

from __future__ import annotations

import time

from zeroloop.config import Params
from zeroloop.nn.data import load_replay
from zeroloop.nn.module import OptimConfig, fit_network
from zeroloop.stages.common import (
    data_dir,
    derive_seed,
    model_path,
    read_json,
    replay_manifest,
    report_path,
    say,
    write_json,
)
from zeroloop.storage import DamagedFileError, file_sha256, load_model, save_model
from zeroloop.tracking import Tracker


def window(p: Params, gen: int, prev: int) -> list[dict]:
    """This generation's shards plus the previous window, cut to K generations."""
    newest = {"generation": gen, "dir": str(data_dir(gen)),
              "shards": read_json(data_dir(gen) / "manifest.json")["shards"]}
    older = read_json(replay_manifest(prev))["window"]
    return [newest] + older[:p.train.replay_generations - 1]


def checked_shards(entries: list[dict]) -> list[str]:
    paths = []
    for e in entries:
        for name, digest in sorted(e["shards"].items()):
            path = f"{e['dir']}/{name}"
            try:
                ok = file_sha256(path) == digest
            except FileNotFoundError:
                raise FileNotFoundError(f"{path}: shard of the replay window is missing") from None
            if not ok:
                raise DamagedFileError(f"{path}: does not match the checksum recorded in its manifest")
            paths.append(path)
    return paths


def run(p: Params, gen: int, prev: int) -> None:
    import torch

    from zeroloop.workers import default_workers

    torch.set_num_threads(default_workers())  # the only busy process now
    game = p.make_game()
    entries = window(p, gen, prev)
    data = load_replay(game, checked_shards(entries))
    net, _, meta = load_model(model_path(prev), game)
    t = p.train
    optim = OptimConfig(optimizer=t.optimizer, lr=t.lr, momentum=t.momentum, lr_schedule=t.lr_schedule,
                        lr_step_epochs=t.lr_step_epochs, lr_step_gamma=t.lr_step_gamma, l2=t.l2,
                        epochs=t.epochs, augment=t.augment)
    t0 = time.perf_counter()
    with Tracker.open(p) as tr:
        logger = tr.lightning_logger(gen)
        losses = fit_network(net, game, data, optim, batch_size=t.batch_size, val_fraction=t.val_fraction,
                             seed=derive_seed(p.seed, "train", gen), device=p.runtime.device, logger=logger)
        wall = time.perf_counter() - t0
        save_model(model_path(gen, "candidate"), net, game,
                   meta={"generation": gen, "origin": gen, "trained_from": meta.get("origin", prev)})
        summary = {"generation": gen, "samples": len(data),
                   "window": [e["generation"] for e in entries], "wall_s": round(wall, 1)}
        summary.update({k.replace("_epoch", "").replace("/", "_"): round(v, 5) for k, v in losses.items()})
        write_json(report_path(gen, "train"), summary)
        write_json(replay_manifest(gen), {"generation": gen, "window": entries})
        tr.log_generation(gen, {"train/samples": len(data), "train/wall_s": wall})
    say(f"train@{gen}", f"{len(data)} positions from generations {summary['window']}, "
                        f"loss {summary.get('train_loss', float('nan')):.3f}, {wall:.0f}s")
