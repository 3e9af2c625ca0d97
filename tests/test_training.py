import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from zeroloop.engine.games import make_game
from zeroloop.engine.nn import NetConfig, PolicyValueNet
from zeroloop.engine.nn.inference import uniform_evaluator
from zeroloop.engine.search import SearchConfig
from zeroloop.engine.selfplay import SelfplayConfig, play_selfplay_games, records_to_arrays, unpack_planes
from zeroloop.pipeline.training.config import TrainConfig
from zeroloop.pipeline.training.module import alphazero_loss, fit_network, lightning_device
from zeroloop.pipeline.training.replay import ReplayData, SymmetryAugment


def test_loss_matches_a_hand_computed_example():
    logits = torch.tensor([[0.0, math.log(3.0)], [0.0, 0.0]])  # p = (1/4, 3/4) and (1/2, 1/2)
    value = torch.tensor([0.5, 0.0])
    pi = torch.tensor([[0.5, 0.5], [1.0, 0.0]])
    z = torch.tensor([1.0, -1.0])
    params = [torch.tensor([1.0, 2.0]), torch.tensor([[3.0]])]
    out = alphazero_loss(logits, value, pi, z, params, l2=0.01)
    value_loss = ((1 - 0.5) ** 2 + (-1 - 0) ** 2) / 2  # 0.625
    policy_loss = (-(0.5 * math.log(0.25) + 0.5 * math.log(0.75)) + math.log(2)) / 2
    l2 = 0.01 * (1 + 4 + 9)
    assert out["value_loss"].item() == pytest.approx(value_loss)
    assert out["policy_loss"].item() == pytest.approx(policy_loss, rel=1e-6)
    assert out["l2"].item() == pytest.approx(l2)
    assert out["loss"].item() == pytest.approx(value_loss + policy_loss + l2, rel=1e-6)


def _midgame(game, plies, seed):
    rng = np.random.default_rng(seed)
    s = game.initial_state()
    for _ in range(plies):
        legal = np.flatnonzero(game.legal_mask(s))
        nxt = game.apply(s, int(rng.choice(legal)))
        if nxt.outcome is not None:
            break
        s = nxt
    return s


@pytest.mark.parametrize("name", ["tictactoe", "connect4", "gomoku-5x6-4", "othello-6x6"])
def test_augmentation_keeps_board_and_policy_aligned(name):
    game = make_game(name)
    aug = SymmetryAugment(game)
    syms = game.symmetries()
    assert aug.count == len(syms) >= 2
    for seed in range(3):
        s = _midgame(game, 5 + seed, seed)
        x = torch.from_numpy(game.encode([s]))
        p = torch.arange(game.num_actions, dtype=torch.float32)[None]  # every action distinguishable
        for k, sym in enumerate(syms):
            x2, p2 = aug.apply(x, p, torch.tensor([k]))
            image = game.transform(s, sym)
            assert torch.equal(x2, torch.from_numpy(game.encode([image])))
            for a in range(game.num_actions):
                assert p2[0, sym.action(a)] == p[0, a]  # the policy moved with its cells
            legal = torch.from_numpy(game.legal_mask(s).astype(np.float32))[None]
            _, moved_legal = aug.apply(x, legal, torch.tensor([k]))
            assert np.array_equal(moved_legal[0].numpy().astype(bool), game.legal_mask(image))


def test_random_augmentation_uses_its_generator():
    game = make_game("connect4")
    aug = SymmetryAugment(game)
    x = torch.from_numpy(game.encode([_midgame(game, 7, s) for s in range(16)]))
    p = torch.softmax(torch.randn(16, 7, generator=torch.Generator().manual_seed(1)), 1)
    a1 = aug.random(x, p, torch.Generator().manual_seed(5))
    a2 = aug.random(x, p, torch.Generator().manual_seed(5))
    assert torch.equal(a1[0], a2[0]) and torch.equal(a1[1], a2[1])
    assert not torch.equal(a1[0], x)  # some of 16 samples were mirrored


@pytest.fixture(scope="module")
def tictactoe_data():
    game = make_game("tictactoe")
    records = play_selfplay_games(game, uniform_evaluator(game), SearchConfig(simulations=24),
                                  SelfplayConfig(temperature=1.0, temperature_moves=9),
                                  [np.random.SeedSequence([0, k]) for k in range(40)])
    arrays = records_to_arrays(game, records)
    planes = unpack_planes(arrays["planes"], game)
    policy = arrays["policy"].astype(np.float32)
    return game, ReplayData(planes, policy / policy.sum(1, keepdims=True), arrays["z"].astype(np.float32),
                            arrays["value"].astype(np.float32))


def _mean_loss(net, data):
    net.eval()
    with torch.no_grad():
        logits, value = net(torch.from_numpy(data.planes))
        parts = alphazero_loss(logits, value, torch.from_numpy(data.policy), torch.from_numpy(data.z),
                               [], 0.0)
    return parts["loss"].item()


def test_real_lightning_fit_lowers_the_loss(tictactoe_data):
    game, data = tictactoe_data
    torch.manual_seed(0)
    net = PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=16, value_hidden=16))
    before = _mean_loss(net, data)
    losses = fit_network(net, game, data, TrainConfig(epochs=8, lr=3e-3, augment=True, batch_size=32),
                         seed=0, device="cpu", progress=False)
    after = _mean_loss(net, data)
    assert after < before - 0.1, (before, after)
    assert {"train/loss_epoch", "train/value_loss_epoch", "train/policy_loss_epoch"} <= set(losses)
    assert not net.training and next(net.parameters()).device.type == "cpu"


def test_seeded_fits_are_identical(tictactoe_data):
    game, data = tictactoe_data
    nets = []
    for _ in range(2):
        torch.manual_seed(0)
        net = PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=8, value_hidden=8))
        fit_network(net, game, data, TrainConfig(epochs=1, batch_size=32), seed=4, device="cpu",
                    progress=False)
        nets.append(net)
    for a, b in zip(nets[0].state_dict().values(), nets[1].state_dict().values()):
        assert torch.equal(a, b)


def test_lightning_device_mapping():
    assert lightning_device("cpu") == ("cpu", 1)
    assert lightning_device("cuda:1") == ("gpu", [1])
    expected = ("gpu", 1) if torch.cuda.is_available() else ("cpu", 1)
    assert lightning_device("auto") == expected
    with pytest.raises(ValueError, match="tpu"):
        lightning_device("tpu")


def test_value_target_mixes_the_result_with_the_search_value(tictactoe_data):
    from zeroloop.pipeline.training.module import ReplayDataModule

    _, data = tictactoe_data
    assert not np.array_equal(data.z, data.q)  # shards carry the root values
    np.testing.assert_array_equal(data.value_target(0.0), data.z)
    np.testing.assert_allclose(data.value_target(1.0), data.q)
    np.testing.assert_allclose(data.value_target(0.25), 0.75 * data.z + 0.25 * data.q, rtol=1e-6)
    dm = ReplayDataModule(data, batch_size=8, val_fraction=0.0, seed=0, q_weight=0.5)
    planes, _, target = dm._dataset(np.arange(5))[:]
    np.testing.assert_allclose(target.numpy(), 0.5 * (data.z[:5] + data.q[:5]), rtol=1e-6)


def test_adamw_decays_only_conv_and_linear_weights_when_asked():
    from zeroloop.pipeline.training.module import AlphaZeroModule, decayed_parameters

    game = make_game("tictactoe")
    torch.manual_seed(0)
    net = PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=8, value_hidden=8))
    assert len(decayed_parameters(net, True)) == len(list(net.parameters()))
    only = decayed_parameters(net, False)
    assert only and all(p.ndim > 1 for p in only)
    before = {n: p.detach().clone() for n, p in net.named_parameters()}
    cfg = TrainConfig(optimizer="adamw", weight_decay=0.1, lr=0.01, lr_schedule="constant",
                      decay_norm_and_bias=False)
    opt = AlphaZeroModule(net, game, cfg).configure_optimizers()
    for p in net.parameters():
        p.grad = torch.zeros_like(p)  # no gradient: only the decoupled decay moves a parameter
    opt.step()
    for name, p in net.named_parameters():
        if p.ndim > 1:
            assert torch.allclose(p, before[name] * (1 - 0.01 * 0.1)), name
        else:
            assert torch.equal(p, before[name]), name  # BatchNorm scales and shifts, biases


def test_the_cosine_schedule_sets_the_rate_once_an_epoch(tictactoe_data, monkeypatch):
    """``cosine`` sets the rate once an epoch: with two epochs, lr and then
    52.5% of it (epoch k of E at lr x (0.05 + 0.95 (1 + cos(pi k / E)) / 2))."""
    from zeroloop.pipeline.training.module import AlphaZeroModule

    game, data = tictactoe_data
    seen = []
    monkeypatch.setattr(AlphaZeroModule, "on_train_batch_start",
                        lambda self, batch, i: seen.append(self.optimizers().param_groups[0]["lr"]),
                        raising=False)
    cfg = TrainConfig(epochs=2, batch_size=64, lr=0.01, lr_schedule="cosine", val_fraction=0.0)
    torch.manual_seed(0)
    fit_network(PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=8, value_hidden=8)), game, data,
                cfg, device="cpu", progress=False)
    per_epoch = len(data) // 64
    assert per_epoch >= 3 and seen == pytest.approx([0.01] * per_epoch + [0.01 * 0.525] * per_epoch, rel=1e-6)


def test_weight_decay_needs_adamw():
    with pytest.raises(ValueError, match="weight_decay=0.1 is AdamW's decoupled decay"):
        TrainConfig(optimizer="adam", weight_decay=0.1)


def test_dedup_averages_the_targets_of_a_repeated_position_by_hand():
    from zeroloop.pipeline.training.replay import ReplayData

    a, b = np.zeros((1, 2, 2), np.float32), np.ones((1, 2, 2), np.float32)
    planes = np.stack([a, b, a, a])  # position a three times, b once
    policy = np.array([[1, 0], [0.5, 0.5], [0, 1], [0, 1]], np.float32)
    z = np.array([1, -1, -1, 0], np.float32)
    q = np.array([0.3, 0.1, 0.0, 0.6], np.float32)
    d = ReplayData(planes, policy, z, q).deduplicated()
    assert len(d) == 2
    np.testing.assert_array_equal(d.planes, np.stack([a, b]))  # in order of first occurrence
    np.testing.assert_allclose(d.policy, [[1 / 3, 2 / 3], [0.5, 0.5]], rtol=1e-6)
    np.testing.assert_allclose(d.z, [0.0, -1.0], atol=1e-7)
    np.testing.assert_allclose(d.q, [0.3, 0.1], rtol=1e-6)
    np.testing.assert_allclose(d.policy.sum(axis=1), 1.0, rtol=1e-6)


def test_dedup_keeps_every_distinct_self_play_position(tictactoe_data):
    _, data = tictactoe_data
    d = data.deduplicated()
    distinct = {row.tobytes() for row in data.planes}
    assert len(d) == len(distinct) < len(data)  # tic-tac-toe games repeat their openings
    assert {row.tobytes() for row in d.planes} == distinct


def test_weight_average_by_hand():
    from zeroloop.pipeline.training.module import WeightAverage

    net = torch.nn.Sequential(torch.nn.Linear(1, 1, bias=False), torch.nn.BatchNorm1d(1))
    with torch.no_grad():
        net[0].weight.fill_(0.0)
    avg = WeightAverage(net, 0.5)
    with torch.no_grad():
        net[0].weight.fill_(1.0)
    net[1].num_batches_tracked.fill_(7)
    avg.update(net)  # step 1: d = min(0.5, 2/11)
    assert avg.state["0.weight"].item() == pytest.approx(9 / 11)
    assert avg.state["1.num_batches_tracked"].item() == 7  # counters are copied, not averaged
    avg.update(net)  # step 2: d = min(0.5, 3/12)
    assert avg.state["0.weight"].item() == pytest.approx(0.25 * 9 / 11 + 0.75)
    for _ in range(30):
        avg.update(net)
    assert avg.rate() == 0.5  # the warm-up has reached the decay
    target = torch.nn.Sequential(torch.nn.Linear(1, 1, bias=False), torch.nn.BatchNorm1d(1))
    avg.copy_to(target)
    assert target[0].weight.item() == pytest.approx(avg.state["0.weight"].item())
    with pytest.raises(ValueError, match="ema_decay"):
        WeightAverage(net, 1.0)


def test_ema_candidate_is_the_average_of_the_steps(tictactoe_data, monkeypatch):
    """With train.ema_decay the fitted net is the moving average of the weights
    after every optimiser step, recomputed here from those weights."""
    from zeroloop.pipeline.training import module

    game, data = tictactoe_data
    seen: list[dict[str, torch.Tensor]] = []
    original = module.WeightAverage.update

    def recording(self, net):
        seen.append({k: v.detach().clone() for k, v in net.state_dict().items()})
        original(self, net)

    monkeypatch.setattr(module.WeightAverage, "update", recording)
    nets = []
    for decay in (0.0, 0.9):
        torch.manual_seed(0)
        net = PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=8, value_hidden=8))
        start = {k: v.detach().clone() for k, v in net.state_dict().items()}
        fit_network(net, game, data, TrainConfig(epochs=2, batch_size=32, ema_decay=decay), seed=4,
                    device="cpu", progress=False)
        nets.append(net)
    train_n = len(data) - int(round(len(data) * 0.05))
    assert len(seen) == 2 * (train_n // 32)  # one update per optimiser step (drop_last), none without ema
    # the last step's weights are what the plain fit returns: the averaging does not touch training
    for k, v in nets[0].state_dict().items():
        assert torch.equal(seen[-1][k], v), k
    expected = {k: v.clone() for k, v in start.items()}
    for t, state in enumerate(seen, start=1):
        d = min(0.9, (1 + t) / (10 + t))
        for k, v in state.items():
            expected[k] = d * expected[k] + (1 - d) * v if v.dtype.is_floating_point else v.clone()
    for k, v in nets[1].state_dict().items():
        assert torch.allclose(v, expected[k], atol=1e-6), k
    assert any(not torch.equal(a, b) for a, b in zip(nets[0].parameters(), nets[1].parameters()))


def test_ema_decay_must_be_below_one():
    with pytest.raises(ValueError, match="ema_decay"):
        TrainConfig(ema_decay=1.0)


def test_channels_last_training_is_stored_in_the_default_layout_and_matches_nchw(tictactoe_data):
    """train.channels_last trains in NHWC; the network comes back in NCHW (what
    save_model, the ONNX export and search expect), with the weights NCHW
    training gives up to floating-point rounding."""
    game, data = tictactoe_data
    nets = {}
    for layout in (False, True):
        torch.manual_seed(0)
        net = PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=16, value_hidden=16))
        fit_network(net, game, data, TrainConfig(epochs=1, batch_size=32, channels_last=layout), seed=3,
                    device="cpu", progress=False)
        nets[layout] = net
    assert all(t.is_contiguous() for t in nets[True].state_dict().values())
    for (name, a), b in zip(nets[False].state_dict().items(), nets[True].state_dict().values()):
        if a.dtype.is_floating_point:
            assert torch.allclose(a, b, rtol=1e-3, atol=1e-4), name
    x = torch.from_numpy(data.planes[:64])
    with torch.no_grad():
        (la, va), (lb, vb) = nets[False](x), nets[True](x)
    assert torch.allclose(la, lb, atol=1e-3) and torch.allclose(va, vb, atol=1e-3)


def test_channels_last_applies_on_the_cpu_only():
    """cuDNN trained the 5x64 net at 0.64x in channels-last on an H100 (docs/lab/gpu-loans.md): a GPU
    trains NCHW whatever ``train.channels_last`` says; the CPU follows it."""
    from zeroloop.pipeline.training.module import channels_last_on, lightning_device

    assert channels_last_on(TrainConfig(), lightning_device("cpu")[0])
    assert not channels_last_on(TrainConfig(channels_last=False), "cpu")
    assert not channels_last_on(TrainConfig(), lightning_device("cuda")[0])
    assert not channels_last_on(TrainConfig(), lightning_device("cuda:1")[0])
    game = make_game("tictactoe")
    mlp = PolicyValueNet.for_game(game, NetConfig(kind="mlp", hidden=16, layers=2))
    gpool = PolicyValueNet.for_game(game, NetConfig(kind="gpool", blocks=1, channels=8))
    assert not channels_last_on(TrainConfig(), "cpu", mlp)  # it flattens the planes: no convolutions
    assert channels_last_on(TrainConfig(), "cpu", gpool)


@pytest.mark.parametrize("config", [NetConfig(kind="gpool", blocks=2, channels=16, value_hidden=16),
                                    NetConfig(kind="mlp", hidden=64, layers=3, value_hidden=16)],
                         ids=lambda c: c.kind)
def test_each_kind_of_net_learns_through_the_real_lightning_fit(tictactoe_data, config):
    """The trainer assumes nothing of the layers: the loss falls, with L2 and
    AdamW's decay on the weight matrices only, and the net comes back in eval
    mode on the CPU, in the default layout."""
    game, data = tictactoe_data
    torch.manual_seed(0)
    net = PolicyValueNet.for_game(game, config)
    before = _mean_loss(net, data)
    losses = fit_network(net, game, data, TrainConfig(epochs=6, lr=3e-3, batch_size=32, optimizer="adamw",
                                                      weight_decay=1e-4, decay_norm_and_bias=False),
                         seed=0, device="cpu", progress=False)
    after = _mean_loss(net, data)
    assert after < before - 0.1, (before, after)
    assert math.isfinite(losses["train/loss_epoch"])
    assert not net.training and all(t.is_contiguous() for t in net.state_dict().values())


_FLUSH_PROBE = """
import sys, torch
from zeroloop.pipeline.stages.train import flush_denormals
torch.set_num_threads(2)
if sys.argv[1] == "late":
    (torch.ones(1 << 20) * 1.0).sum()  # the thread pool starts here, before the call
ok = flush_denormals()
x = torch.ones(1 << 20, dtype=torch.int32).view(torch.float32)  # the smallest denormal, from its bits
print(ok, int(((x * 1.0) != 0).sum()))
"""


@pytest.mark.parametrize("when", ["early", "late"])
@pytest.mark.slow
def test_the_train_stage_flushes_denormals_in_every_thread(when):
    """Denormal weights made round 34's training steps ~10x slower on a CPU: the train stage
    computes them as zero, called before its thread pool starts, and then every thread does.
    Called after the pool started, the other thread keeps denormals, and the check says so."""
    out = subprocess.run([sys.executable, "-c", _FLUSH_PROBE, when], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    ok, kept = out.stdout.split()
    if when == "early":
        assert (ok, kept) == ("True", "0")
    else:
        assert ok == "False" and int(kept) > 0
