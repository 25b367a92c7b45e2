"""ExampleLoader: seeded shuffling, exact host partition, epochs, batching, resume from a saved
position; prompt-length filtering (skip/report or error)."""

import json

import numpy as np
import pytest

from tseeds_jax.data import ExampleLoader, OverlongPromptError, filter_prompt_lengths


def _source(n):
    return [{"id": f"e{i}", "prompt": "x" * (i + 1), "reference": str(i), "source": "toy",
             "reward_name": "math", "meta": {}} for i in range(n)]


def _ids(batches):
    return [[ex["id"] for ex in b] for b in batches]


def _take(loader, k):
    return _ids(next(loader) for _ in range(k))


def test_same_seed_same_order_other_seed_differs():
    src = _source(20)
    a = _take(ExampleLoader(src, batch_size=4, seed=1), 10)
    b = _take(ExampleLoader(src, batch_size=4, seed=1), 10)
    c = _take(ExampleLoader(src, batch_size=4, seed=2), 10)
    assert a == b and a != c


def test_epochs_are_permutations_reshuffled_each_epoch():
    src = _source(12)
    flat = sum(_take(ExampleLoader(src, batch_size=4, seed=0), 9), [])  # 3 epochs
    epochs = [flat[0:12], flat[12:24], flat[24:36]]
    for e in epochs:
        assert sorted(e) == sorted(f"e{i}" for i in range(12))
    assert epochs[0] != epochs[1] != epochs[2]
    no_shuffle = _take(ExampleLoader(src, batch_size=5, shuffle=False), 3)
    assert no_shuffle[0] == ["e0", "e1", "e2", "e3", "e4"]
    assert no_shuffle[2] == ["e10", "e11", "e0", "e1", "e2"]  # batches straddle epochs


def test_num_epochs_and_remainder():
    src = _source(10)
    kept = _ids(ExampleLoader(src, batch_size=4, num_epochs=1, drop_remainder=False))
    assert [len(b) for b in kept] == [4, 4, 2]
    dropped = _ids(ExampleLoader(src, batch_size=4, num_epochs=2, drop_remainder=True))
    assert [len(b) for b in dropped] == [4] * 5  # 20 examples, no short batch
    loader = ExampleLoader(src, batch_size=4, num_epochs=1)
    list(loader)
    with pytest.raises(StopIteration):
        next(loader)


@pytest.mark.parametrize("n,drop", [(10, False), (11, False), (11, True), (12, True)])
def test_two_hosts_partition_each_epoch_exactly(n, drop):
    src = _source(n)
    hosts = [ExampleLoader(src, batch_size=1, seed=5, num_epochs=2, process_index=p,
                           process_count=2, drop_remainder=drop) for p in range(2)]
    per_host = [sum(_ids(h), []) for h in hosts]
    for epoch in range(2):
        parts = []
        for p, ids in enumerate(per_host):
            size = hosts[p].epoch_order(epoch).size
            start = sum(hosts[p].epoch_order(e).size for e in range(epoch))
            parts.append(set(ids[start:start + size]))
            assert len(parts[-1]) == size
        assert not parts[0] & parts[1]
        union = parts[0] | parts[1]
        if drop:
            assert len(parts[0]) == len(parts[1]) == n // 2 and len(union) == n - n % 2
        else:
            assert union == {f"e{i}" for i in range(n)}


def test_resume_from_saved_state_matches_uninterrupted():
    src = _source(10)
    kw = dict(batch_size=3, seed=7, process_index=1, process_count=2, drop_remainder=False)
    uninterrupted = _take(ExampleLoader(src, **kw), 12)
    first = ExampleLoader(src, **kw)
    head = _take(first, 5)  # crosses an epoch boundary (5 examples per host per epoch)
    state = json.loads(json.dumps(first.get_state()))  # plain JSON round trip
    assert state["epoch"] == 3 and state["position"] == 0
    resumed = ExampleLoader(src, **kw)
    resumed.set_state(state)
    assert head + _take(resumed, 7) == uninterrupted
    # Mid-epoch position as well.
    mid = ExampleLoader(src, **kw)
    _take(mid, 1)
    other = ExampleLoader(src, **kw)
    other.set_state(mid.get_state())
    assert _take(other, 4) == uninterrupted[1:5]


def test_set_state_rejects_another_stream():
    src = _source(10)
    state = ExampleLoader(src, batch_size=2, seed=1).get_state()
    with pytest.raises(ValueError, match="seed"):
        ExampleLoader(src, batch_size=2, seed=2).set_state(state)
    with pytest.raises(ValueError, match="num_records"):
        ExampleLoader(_source(11), batch_size=2, seed=1).set_state(state)
    with pytest.raises(ValueError, match="bad epoch/position"):
        ExampleLoader(src, batch_size=2, seed=1).set_state({**state, "position": 99})
    ExampleLoader(src, batch_size=5, seed=1).set_state(state)  # batch size may change


def test_bad_arguments():
    src = _source(3)
    with pytest.raises(ValueError, match="batch_size"):
        ExampleLoader(src, batch_size=0)
    with pytest.raises(ValueError, match="process_index"):
        ExampleLoader(src, batch_size=1, process_index=2, process_count=2)
    with pytest.raises(ValueError, match="cannot feed"):
        ExampleLoader(src, batch_size=1, process_index=3, process_count=4)
    with pytest.raises(ValueError, match="indices"):
        ExampleLoader(src, batch_size=1, indices=[0, 5])


def test_overlong_prompts_skipped_and_reported():
    src = _source(6)  # prompt lengths 1..6 characters
    indices, report = filter_prompt_lengths(src, len, 4)
    assert indices.tolist() == [0, 1, 2, 3]
    assert (report["total"], report["kept"], report["overlong"], report["longest_kept"]) == (
        6, 4, 2, 4)
    assert report["overlong_examples"] == [{"id": "e4", "source": "toy", "tokens": 5},
                                           {"id": "e5", "source": "toy", "tokens": 6}]
    got = sum(_ids(ExampleLoader(src, batch_size=2, num_epochs=1, indices=indices)), [])
    assert sorted(got) == ["e0", "e1", "e2", "e3"]


def test_overlong_prompt_error_names_example():
    with pytest.raises(OverlongPromptError, match="'e4'.*5-token prompt > max_prompt_tokens=4"):
        filter_prompt_lengths(_source(6), len, 4, on_overlong="error")
    with pytest.raises(ValueError, match="on_overlong"):
        filter_prompt_lengths(_source(6), len, 4, on_overlong="truncate")


def test_overlong_with_a_real_tokenizer_and_template():
    from tseeds_jax.data.fixtures import TOKENIZER_CORPUS
    from tseeds_jax.data.templates import encode_prompt, prompt_token_counter
    from tseeds_jax.data.tokenizer_train import train_sentencepiece

    tok = train_sentencepiece(TOKENIZER_CORPUS, vocab_size=80, model_type="char")
    count = prompt_token_counter(tok, "plain")
    src = _source(6)
    limit = len(encode_prompt(tok, "plain", "xxx"))  # BOS + "Question: xxx\nAnswer:"
    indices, report = filter_prompt_lengths(src, count, limit)
    assert indices.tolist() == [0, 1, 2] and report["overlong"] == 3
    assert np.all(np.diff(indices) > 0)
