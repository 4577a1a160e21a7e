"""SGLang's all_reduce entry without SGLang: which groups route, the call the slot gets, the group's native."""
from __future__ import annotations

import pytest
import torch

from fk_adapters import groups, probe
from fk_adapters.engines import loading
from fk_adapters.engines.sglang import collective, targets


@pytest.fixture(autouse=True)
def _clean_probe(monkeypatch):
    for c in (probe.calls, probe.constructed, probe.not_routed, probe.stock_layers, probe.native_path):
        c.clear()
    probe.rank.clear()
    monkeypatch.setattr(groups, "_GROUPS", {})  # the groups these tests build stay theirs
    yield
    probe.rank.clear()
    probe.native_path.clear()


class FakeGroup:
    """SGLang's GroupCoordinator as the hook sees it: all_reduce in place, all_gather along a dim."""

    def __init__(self, name, world=2, rank=1, peer=None):
        self.unique_name, self.world_size, self.rank_in_group, self.device_group = name, world, rank, None
        self.peer = torch.ones(3, 4) if peer is None else peer
        self.hook = None

    def all_reduce(self, x):  # what the hooked method does: the hook first, SGLang's own in place after
        return self.hook(lambda g, t: t.add_(g.peer), self, x)

    def all_gather(self, x, dim=0):
        return torch.cat([self.peer.unsqueeze(0), x], dim=dim)


def _hooked(group, op):
    group.hook = targets.make_hook(collective.TARGETS[0], {"all_reduce": op})
    return group


@pytest.mark.parametrize("name, world, why", [("tp:0", 2, ""), ("moe_tp:3", 4, ""), ("attention_tp:1", 2, ""),
                                              ("pp:0", 2, "group 'pp': not tensor parallel"),
                                              ("world:0", 2, "group 'world': not tensor parallel"),
                                              ("tp:0", 1, None)])
def test_only_tensor_parallel_groups_of_several_ranks_route(name, world, why):
    group = FakeGroup(name, world)
    assert collective.group_built(group) == why
    assert group._fk_routed == (why == "")


def test_a_routed_group_calls_the_slot_with_its_name_and_the_native_reduces_a_copy():
    group = FakeGroup("tp:7")
    collective.group_built(group)
    seen = []

    def op(x, group_name):
        seen.append(group_name)
        return groups.all_reduce(x, group_name)  # a passthrough: the engine's own, through fk's group

    x = torch.full((3, 4), 2.0)
    out = _hooked(group, op).all_reduce(x)
    assert seen == ["tp:7"] and torch.equal(out, torch.full((3, 4), 3.0))
    assert torch.equal(x, torch.full((3, 4), 2.0))  # the slot is out of place: SGLang's in-place reduce took a copy
    assert probe.rank == {"rank": 1, "world_size": 2} and not probe.not_routed
    g = groups.get("tp:7")
    assert torch.equal(g.all_gather(x), torch.stack([group.peer, x]))


def test_stock_groups_count_their_calls_and_one_rank_groups_are_not_counted():
    op = lambda x, name: pytest.fail("a stock group reached the slot")  # noqa: E731
    pp, single = FakeGroup("pp:0"), FakeGroup("tp:0", world=1)
    for g in (pp, single):
        collective.group_built(g)
        _hooked(g, op).all_reduce(torch.zeros(3, 4))
    assert probe.not_routed == {"all_reduce (call: a group left stock)": 1}


def test_the_init_hook_counts_routed_and_stock_groups_but_not_one_rank_ones():
    t = collective.TARGETS[0]
    count = targets.make_layer_counter(t, t.slots, lambda: FakeGroup)
    for g in (FakeGroup("tp:0"), FakeGroup("pp:0"), FakeGroup("world:0", world=1)):
        count(g)
    assert probe.constructed == {"all_reduce": 1} and probe.stock_layers == {"all_reduce": 1}


def test_an_engine_own_kernel_leaves_a_routed_call_on_sglangs_own_all_reduce_counted(monkeypatch):
    monkeypatch.setitem(loading.ENGINE_OWN, "all_reduce", "passthrough:all_reduce")
    group = FakeGroup("tp:5")
    collective.group_built(group)
    x = torch.full((3, 4), 2.0)
    out = _hooked(group, lambda x, name: pytest.fail("an engine-own kernel reached the slot")).all_reduce(x)
    assert out is x and torch.equal(x, torch.full((3, 4), 3.0))  # SGLang's own, in place: no copy taken
    assert probe.native_path == {"passthrough:all_reduce": 1} and not probe.calls and not probe.not_routed
