"""The host-agreement logic of multi-host sharded sampling, simulated in one process: every
"host" runs the helper against a fake all-gather that replays what all hosts contributed.

(The real collectives run in tests/test_multihost.py, two processes over jax.distributed.)
"""

import numpy as np
import pytest

from tseeds_jax.rl.rollout import samples as rollout
from tseeds_jax.rl.run import hosts


class _Gathered(Exception):
    pass


def _simulate(monkeypatch, count, call):
    """Runs `call(Hosts(h, count))` for every h as if concurrently: a first pass records each
    host's allgather_objects input (the pass stops there), a second pass replays them all."""
    sent = {}

    def record(obj, h):
        sent[h.index] = obj
        raise _Gathered

    monkeypatch.setattr(hosts, "allgather_objects", record)
    for h in range(count):
        try:
            call(hosts.Hosts(h, count))
        except _Gathered:
            pass
    monkeypatch.setattr(hosts, "allgather_objects",
                        lambda obj, h: [sent[i] for i in range(count)])
    return [call(hosts.Hosts(h, count)) for h in range(count)], sent


@pytest.mark.parametrize("per_round", [
    [[0, 2], [3, 1]],  # host 1 keeps everything of round 0; round 1 fills up: items move
    [[2, 2]],  # equal shares in one round: nothing moves, no allgather
    [[1, 0], [0, 1], [1, 0]],  # never enough: the last host's block is short
    [[0, 0, 3], [3, 3, 3]],  # three hosts
])
def test_share_out_deals_the_single_process_order(monkeypatch, per_round):
    count, quota = len(per_round[0]), 2
    # Item (round, host, position): what the one-process run keeps, in its order.
    rounds = [[[(r, h, p) for p in range(n)] for h, n in enumerate(c)]
              for r, c in enumerate(per_round)]
    one_process = [x for per_host in rounds for items in per_host for x in items][: quota * count]
    counts = [np.array(c) for c in per_round]

    def call(h):
        return hosts.share_out([rnd[h.index] for rnd in rounds], counts, quota, h)

    got, sent = _simulate(monkeypatch, count, call)
    assert [x for part in got for x in part] == one_process
    assert all(len(part) <= quota for part in got)
    moved = any(h != i // quota for i, (_, h, _) in enumerate(one_process))
    assert bool(sent) == moved


def test_gathered_sample_fn_runs_the_global_list_once(monkeypatch):
    calls = []

    def sample_fn(params, requests, budgets, seed):
        calls.append((requests, budgets, seed))
        return [(req[-1:], [0.0], f"b{b}") for req, b in zip(requests, budgets)]

    monkeypatch.setattr(hosts, "spans_processes", lambda params: True)
    local = {0: ([[1, 2], [3]], [4, 5], (77, 10)),  # first global index 10
             1: ([], [], (77, 12)),  # no requests here (e.g. LUFFY traces only)
             2: ([[6, 7, 8]], [6], (77, [20]))}  # explicit indices

    def call(h):
        reqs, budgets, seed = local[h.index]
        return hosts.gathered_sample_fn(sample_fn, h)(None, reqs, budgets, seed)

    got, _ = _simulate(monkeypatch, 3, call)
    assert len(calls) == 3  # the second pass: once per host, each with the global list
    for requests, budgets, seed in calls:
        assert requests == [[1, 2], [3], [6, 7, 8]]
        assert budgets == [4, 5, 6]
        assert seed == (77, [10, 11, 20])
    assert got == [[([2], [0.0], "b4"), ([3], [0.0], "b5")], [], [([8], [0.0], "b6")]]


def test_gathered_sample_fn_carries_interruptible_flags_of_every_host(monkeypatch):
    """Partial rollouts: one host's interruptible requests and another's due ones make one
    global call, so the sampler stops every interruptible request when the last due one ends."""
    calls = []

    def sample_fn(params, requests, budgets, seed, interruptible=None):
        calls.append(interruptible)
        return [(req[-1:], [0.0], "length") for req in requests]

    monkeypatch.setattr(hosts, "spans_processes", lambda params: True)
    local = {0: ([[1], [2]], [3, 3], (5, [0, 1]), [True, False]),
             1: ([[3]], [3], (5, [2]), None),  # no flags: none interruptible
             2: ([], [], (5, []), None)}  # no requests: joins the call

    def call(h):
        reqs, budgets, seed, flags = local[h.index]
        kw = {} if flags is None else {"interruptible": flags}
        return hosts.gathered_sample_fn(sample_fn, h)(None, reqs, budgets, seed, **kw)

    got, _ = _simulate(monkeypatch, 3, call)
    assert calls == [[True, False, False]] * 3
    assert [len(g) for g in got] == [2, 1, 0]
    calls.clear()
    local[0] = ([[1]], [3], (5, [0]), [False])  # nobody interruptible: no flags passed
    _simulate(monkeypatch, 3, call)
    assert calls == [None] * 3


def test_gathered_sample_fn_rejects_hosts_on_different_streams(monkeypatch):
    monkeypatch.setattr(hosts, "spans_processes", lambda params: True)

    def call(h):
        fn = hosts.gathered_sample_fn(lambda *a: [], h)
        return fn(None, [[1]], [1], (h.index, 0))

    with pytest.raises(RuntimeError, match="different stream seeds"):
        _simulate(monkeypatch, 2, call)


def test_continue_samples_calls_a_collective_sampler_without_requests():
    seen = []

    def sample_fn(params, requests, budgets, seed):
        seen.append(len(requests))
        return []

    out = rollout.continue_samples(sample_fn, None, [], [], 4, 8, (1, 0))
    assert out == [] and seen == []  # a plain sampler is skipped
    sample_fn.collective = True
    rollout.continue_samples(sample_fn, None, [], [], 4, 8, (1, 0))
    assert seen == [0]
