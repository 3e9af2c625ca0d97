"""init: the randomly initialised network of generation 0 and an empty replay window."""

from __future__ import annotations

import torch

from zeroloop.config import Params
from zeroloop.nn.net import NetConfig, PolicyValueNet
from zeroloop.stages.common import derive_seed, model_path, replay_manifest, say, write_json
from zeroloop.storage import save_model


def run(p: Params) -> None:
    game = p.make_game()
    torch.manual_seed(derive_seed(p.seed, "init"))
    net = PolicyValueNet.for_game(game, NetConfig(**p.net.model_dump()))
    save_model(model_path(0), net, game, meta={"generation": 0, "origin": 0})
    write_json(replay_manifest(0), {"generation": 0, "window": []})
    n = sum(t.numel() for t in net.parameters())
    say("init", f"{game.name}: random {p.net.blocks}x{p.net.channels} network ({n:,} weights) "
                f"-> {model_path(0)}")
