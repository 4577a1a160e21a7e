"""fk check on the all_reduce slot: a captured call names its group and world size; fk check rebuilds the world in
one process (a thread per rank, meeting in the group's collectives), judges rank 0's result and times nothing."""
import pytest
import torch

from fk_adapters import groups
from fk_adapters.call_signature import describe
from fk_adapters.check import driver, guards, runner, signature, timing
from fk_adapters.tasks import SLOTS

ALL_REDUCE = SLOTS["all_reduce"]
CFG = {"rounds": 2, "warmup": 1, "repeats": 4}


def _captured(world=4):
    return describe((torch.randn(5, 64), groups.loopback([torch.randn(5, 64) for _ in range(world - 1)])))


def drops_the_last_rank(x, group_name):
    """fk-wrong's bug: only the last rank misbehaves (it sends zeros), yet every rank's sum is wrong."""
    g = groups.get(group_name)
    return g.native(torch.zeros_like(x) if g.rank == g.world_size - 1 else x.clone())


def test_a_captured_group_is_recorded_with_its_world_size_and_rebuilt_as_a_world_of_ranks():
    sig = _captured(world=4)
    assert sig[1]["world_size"] == 4 and sig[1]["value"].startswith("fk-loopback:")
    x, name = signature.make_inputs(ALL_REDUCE, sig, "cpu", seed=1)
    g = groups.get(name)
    assert g.world_size == 4 and g.rank == 0 and [r for r, _ in g.peer_calls] == [1, 2, 3]
    peers = [a[0] for _, a in g.peer_calls]
    assert all(p.shape == x.shape and not torch.equal(p, x) for p in peers)  # each rank its own partial sum
    gathered = groups.run_as_every_rank(lambda t, n: groups.get(n).all_gather(t), (x, name))
    assert torch.equal(gathered, torch.stack([x, *peers]))
    torch.testing.assert_close(ALL_REDUCE.run_reference((x, name))[0], gathered.sum(0))
    assert describe((x, "tp:0"))[1] == {"value": "tp:0"}  # a name fk never registered stays a plain value


def test_check_passes_the_engines_collective_fails_a_rank_that_drops_out_and_times_neither():
    clock = timing.Clock("cpu", guards.TimingIntegrity().saved)
    sig = _captured()
    good = driver.check_signature(ALL_REDUCE, sig, groups.all_reduce, groups.all_reduce, "cpu", clock, CFG, seed=0)
    assert good["problems"] == [] and good["untimed"] == ALL_REDUCE.untimed and "speedup" not in good
    bad = driver.check_signature(ALL_REDUCE, sig, drops_the_last_rank, groups.all_reduce, "cpu", clock, CFG, seed=0)
    assert bad["problems"]  # rank 0's own call is right: only playing the last rank shows it
    summary = runner.summarise({"status": "ok", "shapes": [dict(good, calls=3)]})
    assert summary["status"] == "PASSED" and summary["geomean_speedup"] is None and summary["untimed"]


def test_a_rank_that_never_meets_the_others_is_an_error_not_a_hang():
    xs = [torch.ones(2, 2) for _ in range(2)]
    name = groups.world(xs, timeout_s=0.5)

    def only_rank_0_communicates(x, group_name):
        g = groups.get(group_name)
        if g.rank == 0:
            return g.native(x)
        raise RuntimeError("rank 1 fails before its collective")

    with pytest.raises(RuntimeError, match="rank 1 fails"):
        groups.run_as_every_rank(only_rank_0_communicates, (xs[0], name))
