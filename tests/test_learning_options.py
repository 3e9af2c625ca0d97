"""Each learning option against the effect it must have, through the code that
runs it (the real Lightning trainer, self-play). The formulas on their own are
tested in test_training.py (value target, AdamW's parameter groups, dedup) and
test_search.py (Gumbel's improved policy, FPU reduction, the playout cap's
counts)."""

import copy

import numpy as np
import pytest
import torch

from zeroloop.engine.games import make_game
from zeroloop.engine.nn import NetConfig, PolicyValueNet
from zeroloop.engine.search import BatchedMCTS, SearchConfig
from zeroloop.pipeline.training.config import TrainConfig
from zeroloop.pipeline.training.module import fit_network
from zeroloop.pipeline.training.replay import ReplayData


def _positions(n: int, seed: int):
    """Tic-tac-toe: ``n`` positions of random games, uniform policies over the
    legal moves, results z in {-1, 0, 1} and search values q in [-1, 1]."""
    game = make_game("tictactoe")
    rng = np.random.default_rng(seed)
    states = []
    while len(states) < n:
        s = game.initial_state()
        while s.outcome is None and len(states) < n:
            states.append(s)
            s = game.apply(s, int(rng.choice(np.flatnonzero(game.legal_mask(s)))))
    masks = np.stack([game.legal_mask(s) for s in states]).astype(np.float32)
    z = rng.choice([-1.0, 0.0, 1.0], size=n).astype(np.float32)
    q = rng.uniform(-1.0, 1.0, size=n).astype(np.float32)
    return game, ReplayData(game.encode(states), masks / masks.sum(1, keepdims=True), z, q)


def _net(game, seed: int = 0) -> PolicyValueNet:
    torch.manual_seed(seed)
    return PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=8, value_hidden=8))


def _one_step(game, data, net, **train) -> dict[str, float]:
    """One optimiser step of the real trainer on the whole of ``data`` (one
    batch, no augmentation, nothing held out)."""
    cfg = TrainConfig(epochs=1, batch_size=len(data), val_fraction=0.0, augment=False, lr_schedule="constant",
                      **train)
    return fit_network(net, game, data, cfg, seed=0, device="cpu", progress=False)


def test_training_fits_the_value_head_to_the_mixed_value_target():
    # train.value_q_weight w: the trainer's value loss is against (1 - w) z + w q, not z
    game, data = _positions(24, seed=1)
    w = 0.25
    net = _net(game)
    probe = copy.deepcopy(net).train()  # the batch is the whole set: BatchNorm sees the same statistics
    with torch.no_grad():
        v = probe(torch.from_numpy(data.planes))[1].numpy().astype(np.float64)
    z, q = data.z.astype(np.float64), data.q.astype(np.float64)
    mixed = np.mean((v - ((1 - w) * z + w * q)) ** 2)
    losses = _one_step(game, data, net, value_q_weight=w, l2=0.0)
    assert losses["train/value_loss_epoch"] == pytest.approx(mixed, rel=1e-4)
    # the targets it must not have used are far from it
    for other in (np.mean((v - z) ** 2), np.mean((v - q) ** 2), np.mean((v - (w * z + (1 - w) * q)) ** 2)):
        assert abs(other - mixed) > 0.05


@pytest.mark.parametrize("norm_and_bias", [False, True], ids=["weights-only", "every-parameter"])
@pytest.mark.parametrize("optimizer, decay, shrink", [
    # AdamW's decoupled decay: theta -= lr * wd * theta, whatever the gradient
    ("adamw", {"weight_decay": 0.5}, 0.1 * 0.5),
    # the loss's l2 term c ||theta||^2 under SGD: theta -= lr * 2c * theta on top of the gradient (a first
    # step, so momentum has nothing to add yet)
    ("sgd", {"l2": 0.25}, 0.1 * 2 * 0.25),
], ids=["adamw-weight_decay", "sgd-l2"])
def test_one_training_step_shrinks_exactly_the_decayed_parameters(optimizer, decay, shrink, norm_and_bias):
    """Two runs from the same network and batch, with and without the decay:
    they differ by exactly ``shrink`` * theta (lr 0.1) on the decayed
    parameters, and not at all on BatchNorm's scales and shifts and the biases
    unless ``decay_norm_and_bias``."""
    game, data = _positions(32, seed=2)
    start = _net(game, seed=3)
    runs = {}
    for name, extra in (("plain", {"l2": 0.0}), ("decayed", {"l2": 0.0, **decay})):
        net = copy.deepcopy(start)
        _one_step(game, data, net, optimizer=optimizer, lr=0.1, decay_norm_and_bias=norm_and_bias, **extra)
        runs[name] = dict(net.named_parameters())
    flat = 0
    for name, p0 in start.named_parameters():
        diff = (runs["decayed"][name] - runs["plain"][name]).detach()
        if p0.ndim > 1 or norm_and_bias:
            torch.testing.assert_close(diff, -shrink * p0.detach(), rtol=0, atol=2e-6)
        else:
            assert torch.equal(diff, torch.zeros_like(diff)), name  # not decayed: the same step in both runs
            flat += 1
    norm_and_bias_count = sum(p.ndim == 1 for p in start.parameters())
    assert norm_and_bias_count > 0  # the net has BatchNorm parameters to leave alone
    assert flat == (0 if norm_and_bias else norm_and_bias_count)
    # the step itself moved the weights far more than the tolerance: the comparison is not vacuous
    moved = max((runs["plain"][n] - p).abs().max().item() for n, p in start.named_parameters())
    assert moved > 1e-3


def test_playout_cap_searches_fast_moves_without_root_noise(monkeypatch):
    """A full search mixes Dirichlet noise into its root priors; a fast one
    (the playout cap's cheap moves) searches the evaluator's priors as they are."""
    from zeroloop.engine import selfplay

    game = make_game("connect4")
    base = np.exp(np.linspace(0, 2, game.num_actions)).astype(np.float32)

    def oracle(states):
        return np.tile(base, (len(states), 1)), np.zeros(len(states), np.float32)

    searched = []  # (slot, noise asked, root priors searched) per searched slot, in order

    class Recorded(BatchedMCTS):
        def search(self, slots, *, add_noise=False, simulations=None):
            res = super().search(slots, add_noise=add_noise, simulations=simulations)
            searched.extend((int(g), add_noise, res.priors[j].copy()) for j, g in enumerate(slots))
            return res

    monkeypatch.setattr(selfplay, "BatchedMCTS", Recorded)
    seeds = [np.random.SeedSequence([6, k]) for k in range(2)]
    sp = selfplay.SelfplayConfig(temperature_moves=10, full_search_probability=0.5, fast_simulations=4)
    records = selfplay.play_selfplay_games(game, oracle, SearchConfig(simulations=16), sp, seeds, in_flight=2)
    kinds = set()
    for slot, rec in enumerate(records):  # two games, two slots: game k plays in slot k
        mine = [s for s in searched if s[0] == slot]
        assert len(mine) == len(rec.actions) == len(rec.full)
        state = game.initial_state()
        for t, (_, noise, priors) in enumerate(mine):
            legal = game.legal_mask(state)
            clean = np.where(legal, base, 0) / base[legal].sum()
            assert noise == rec.full[t]
            if rec.full[t]:
                assert np.abs(priors - clean).max() > 1e-3  # noised
            else:
                np.testing.assert_allclose(priors, clean, rtol=1e-5)
            kinds.add(bool(rec.full[t]))
            state = game.apply(state, rec.actions[t])
    assert kinds == {True, False}
