import numpy as np
import pytest

from zeroloop.engine.games import make_game
from zeroloop.engine.nn.inference import uniform_evaluator
from zeroloop.engine.nn.net import NetConfig
from zeroloop.engine.search import SearchConfig
from zeroloop.engine.selfplay import (
    SelfplayConfig,
    arrays_to_records,
    play_selfplay_games,
    records_to_arrays,
    unpack_planes,
)
from zeroloop.pipeline.data.shards import SelfplayJob, finished_shards, run_selfplay, shard_path
from zeroloop.pipeline.data.storage import DamagedFileError, load_shard, read_shard_meta, save_shard


@pytest.fixture(scope="module")
def records():
    game = make_game("connect4")
    recs = play_selfplay_games(game, uniform_evaluator(game), SearchConfig(simulations=8),
                               SelfplayConfig(temperature_moves=10),
                               [np.random.SeedSequence([2, k]) for k in range(5)])
    return game, recs


def test_shard_round_trip_keeps_positions_policies_and_results(tmp_path, records):
    game, recs = records
    path = tmp_path / "s.zls"
    save_shard(path, records_to_arrays(game, recs), {"identity": {"game": game.name}, "games": 5})
    arrays, meta = load_shard(path)
    assert meta == {"identity": {"game": game.name}, "games": 5}
    back = arrays_to_records(arrays)
    assert [r.actions for r in back] == [r.actions for r in recs]
    assert [r.result for r in back] == [r.result for r in recs]
    for a, b in zip(back, recs):
        np.testing.assert_allclose(a.policies, b.policies, atol=1e-3)  # stored as float16
    # planes decode to exactly what the game encodes, and z is the result from the side to move
    planes = unpack_planes(arrays["planes"], game)
    i = 0
    for r in recs:
        s = game.initial_state()
        for a in r.actions:
            np.testing.assert_array_equal(planes[i], game.encode([s])[0])
            assert arrays["z"][i] == (r.result if s.first_to_move else -r.result)
            s = game.apply(s, a)
            i += 1
    assert i == len(planes)


@pytest.mark.parametrize("damage", ["flip", "truncate", "magic", "header"])
def test_damaged_shards_are_detected_and_named(tmp_path, records, damage):
    game, recs = records
    path = tmp_path / "s.zls"
    save_shard(path, records_to_arrays(game, recs), {"games": 5})
    raw = bytearray(path.read_bytes())
    if damage == "flip":
        raw[-20] ^= 0xFF
    elif damage == "truncate":
        raw = raw[:-100]
    elif damage == "magic":
        raw[:4] = b"XXXX"
    else:
        raw[raw.index(b'"sha256"') + 2] ^= 0x20  # break the JSON key
    path.write_bytes(bytes(raw))
    with pytest.raises(DamagedFileError, match=str(path)):
        load_shard(path)


def _job(**kw):
    """A small job; ``kw`` names job fields or :class:`SelfplayConfig` fields (games, shard_games, ...)."""
    play = {k: kw.pop(k) for k in list(kw) if k in SelfplayConfig.__dataclass_fields__}
    args = dict(game="tictactoe", model=None, search=SearchConfig(simulations=6), seed=11,
                device="cpu", net=NetConfig(blocks=1, channels=8, value_hidden=8),
                selfplay=SelfplayConfig(**{"games": 7, "shard_games": 3, "temperature_moves": 10, **play}))
    args.update(kw)
    return SelfplayJob(**args)


def test_selfplay_resumes_after_a_kill_and_never_mixes_settings(tmp_path):
    job = _job()
    assert job.shard_sizes() == [3, 3, 1]
    out = tmp_path / "shards"
    results, stats = run_selfplay(job, workers=1, progress=False, out_dir=out)
    assert [r.games for r in results] == [3, 3, 1] and stats.simulations > 0
    first = {i: shard_path(out, i).read_bytes() for i in range(3)}

    # a kill after shard 0 was written: shard 1 is missing and shard 2 is half-written
    shard_path(out, 1).unlink()
    shard_path(out, 2).write_bytes(first[2][: len(first[2]) // 2])
    assert finished_shards(job, out) == {0}
    assert not shard_path(out, 2).exists()  # the damaged one was removed
    results, stats = run_selfplay(job, workers=1, progress=False, out_dir=out)
    assert stats.simulations > 0
    assert {i: shard_path(out, i).read_bytes() for i in range(3)} == first  # same seeds, same games

    # other settings: nothing from the old job is kept (a playout cap is a setting too)
    assert finished_shards(_job(full_search_probability=0.5), out) == set()
    assert not any(out.glob("shard_*"))
    run_selfplay(job, workers=1, progress=False, out_dir=out)
    other = _job(search=SearchConfig(simulations=7))
    assert finished_shards(other, out) == set()
    assert not any(out.glob("shard_*"))


def test_games_do_not_depend_on_the_number_of_workers(tmp_path):
    job = _job(games=4, shard_games=2)
    run_selfplay(job, workers=1, progress=False, out_dir=tmp_path / "one")
    run_selfplay(job, workers=2, progress=False, out_dir=tmp_path / "two")
    for i in range(2):
        a, _ = load_shard(shard_path(tmp_path / "one", i))
        b, _ = load_shard(shard_path(tmp_path / "two", i))
        assert np.array_equal(a["actions"], b["actions"]) and np.array_equal(a["policy"], b["policy"])
    assert read_shard_meta(shard_path(tmp_path / "two", 0))["identity"] == job.identity()


def test_selfplay_job_validates_its_inputs(tmp_path):
    with pytest.raises(ValueError, match="games=0"):
        _job(games=0)
    with pytest.raises(FileNotFoundError, match="nope.pt"):
        _job(model=str(tmp_path / "nope.pt"))


def test_written_files_get_the_usual_mode_not_mkstemps_0600(tmp_path):
    from zeroloop.pipeline.data.storage import _umask, atomic_write_bytes

    atomic_write_bytes(tmp_path / "x.json", b"{}")
    assert (tmp_path / "x.json").stat().st_mode & 0o777 == 0o666 & ~_umask()


def test_games_depend_on_neither_workers_nor_games_in_flight_nor_the_cache(tmp_path):
    """Continuous batching mixes games of several shards in one search, so this
    holds only because every game has its own generator and the network always
    sees batches of exactly eval_batch positions."""
    from zeroloop.pipeline.data.catalogue import SHIPPED_DIR

    # a real network: a small random one can be too coarse to show batch-size effects
    base = dict(game="connect4", model=str(SHIPPED_DIR / "connect4.pt"), net=None, games=4, shard_games=2,
                search=SearchConfig(simulations=8), eval_batch=8)
    runs = {"1 worker, 1 in flight, no cache": dict(workers=1, in_flight=1, eval_cache=0),
            "1 worker, 3 in flight": dict(workers=1, in_flight=3, eval_cache=0),
            "2 workers, 16 in flight, cache": dict(workers=2, in_flight=16, eval_cache=10_000),
            "1 worker, 64 in flight, cache": dict(workers=1, in_flight=64, eval_cache=10_000)}
    played = {}
    for name, r in runs.items():
        job = _job(**base, in_flight=r["in_flight"], eval_cache=r["eval_cache"])
        results, stats = run_selfplay(job, workers=r["workers"], progress=False)  # records in memory
        assert stats.network_rows % 8 == 0  # whole batches only
        if r["eval_cache"]:
            assert stats.cache_hits > 0
        # root values in float32: a change of batch size shows in the last bits
        played[name] = [(g.actions, g.policies.tobytes(), g.values.tobytes(), g.result)
                        for res in results for g in res.records]
    first = next(iter(played.values()))
    assert len(first) == 4
    for name, got in played.items():
        assert got == first, f"{name}: other games"


def test_fixed_batch_evaluator_sends_whole_batches_and_answers_as_the_network():
    import torch

    from zeroloop.engine.games import random_line
    from zeroloop.engine.nn import FixedBatchEvaluator, NetworkEvaluator, PolicyValueNet

    game = make_game("connect4")
    torch.manual_seed(0)
    net = NetworkEvaluator(game, PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=8)), "cpu")
    sizes = []

    def spy(states):
        sizes.append(len(states))
        return net(states)

    fixed = FixedBatchEvaluator(spy, batch=8, cache=100)
    rng = np.random.default_rng(3)
    states = [random_line(game, int(rng.integers(0, 12)), rng)[0] for _ in range(19)]
    p, v = fixed(states + states[:3])  # repeats inside one request are computed once
    assert set(sizes) == {8} and fixed.computed == 24 and fixed.hits == 0
    ref = [net(states[i:i + 8] + [states[i]] * (8 - len(states[i:i + 8]))) for i in range(0, 19, 8)]
    ref_p = np.concatenate([r[0][:len(states[i * 8:(i + 1) * 8])] for i, r in enumerate(ref)])
    np.testing.assert_array_equal(p[:19], ref_p)
    np.testing.assert_array_equal(p[19:], p[:3])
    p2, v2 = fixed(states[:5])  # from the cache: the same answers, no network call
    assert fixed.hits == 5 and len(sizes) == 3
    np.testing.assert_array_equal(p2, p[:5])
    np.testing.assert_array_equal(v2, v[:5])


def test_left_over_shards_are_split_so_every_worker_plays_as_many_games():
    from zeroloop.pipeline.data.shards import _assign, _Shard

    todo = [_Shard(i, 100, f"s{i}", {}) for i in range(15)]
    for workers in (2, 4, 16):
        shares = _assign(todo, workers)
        games = [sum(s.games for s in share) for share in shares]
        assert len(shares) == workers and max(games) - min(games) <= 1 and sum(games) == 1500
        played = sorted((s.index, s.first + g) for share in shares for s in share for g in range(s.games))
        assert played == [(i, g) for i in range(15) for g in range(100)]  # each game once
        for s in (s for share in shares for s in share):
            assert (s.out is None) == (s.games < 100)  # a piece goes back as records
    assert _assign(todo[:4], 2) == [[todo[0], todo[2]], [todo[1], todo[3]]]  # nothing to split


def test_a_shard_split_between_workers_is_written_as_one_worker_writes_it(tmp_path):
    job = _job(games=6, shard_games=2)  # 3 shards on 2 workers: the last one's 2 games split
    run_selfplay(job, workers=1, progress=False, out_dir=tmp_path / "one")
    results, _ = run_selfplay(job, workers=2, progress=False, out_dir=tmp_path / "two")
    assert [(r.index, r.games) for r in results] == [(0, 2), (1, 2), (2, 2)]
    for i in range(3):
        assert shard_path(tmp_path / "one", i).read_bytes() == shard_path(tmp_path / "two", i).read_bytes()
