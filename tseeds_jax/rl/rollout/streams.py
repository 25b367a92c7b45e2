"""Every random stream of a training run, derived from (run seed, step, stream, ...).

A stream's draws depend only on the run seed, the step and the sample's global position, never
on what ran before, the host count or the batching: a resumed run continues exactly, and one host
draws what several hosts draw together. The values are fixed by the runs recorded so far, so the
two forms below stay as they are (a SeedSequence of three words is not the one of four with a
trailing 0):

  4 words  [run seed, step, stream, call]   the generation streams of a step (`call`: the
           step's n-th call of the stream: dynamic sampling's top-up rounds, the partial pool's
           further calls); `GENERATION`
  3 words  [run seed, step, stream]         the streams the loss family and the restart methods
           added later; `METHOD`

Both take the SeedSequence's first 32-bit state word, shifted right by one (a non-negative
int31 that every sampler accepts). A request's own stream is then [that value, its global sample
index] (`request_seed`), so the sampler's draws for sample i are the same whichever call or
slot it lands in.

Streams outside this table (kept where they are drawn, with their own fixed forms): the prompt
order (rl/setup.py `PromptStream`, [seed, 0xDA7A]; data/loader.py per epoch), a file data set's
subset ([seed, 0x5B5E7]), the truncation rule's per-sample generators (seeds/refresh.py
`sample_rngs`, [seed, step, i, 0x5EED]) and LUFFY's trace choice (rl/methods/traces.py,
[seed, step, prompt, 0x1FF]).
"""

from __future__ import annotations

import numpy as np

from tseeds_jax.rl.methods import registry as method_registry

# generation streams (4 words)
ROLLOUT = 1  # a step's samples (the partial pool's first call of a step too)
BEHAVIOR = 2  # a refresh's behavior rollouts (pi_b)
TOPUP = 3  # dynamic sampling's extra rounds (call = the round)
PARTIAL = 4  # the partial pool's further calls of a step (call = the call index)
GENERATION = (ROLLOUT, BEHAVIOR, TOPUP, PARTIAL)

# method streams (3 words); a restart method declares its own in its registry entry
# (rl/methods/registry.py: PrefixRL's pool 0x7E10 and pick 0x7E11 in prefix.py, FR3E / CURE's
# branches 0x7E13 and anchors 0x7E14 in branch.py)
SIS = 0x515  # the top-K proposal's uniforms (a PRNG key per update)
FIRST_PASS = 0x7E12  # a restart method's first (or only) generation of a step
LORA_INIT = 0x10A0  # LoRA adapters' A at initialisation (step 0; rl/learn/adapters.py)
LORA_DROPOUT = 0x10A1  # LoRA adapter dropout masks' key (step 0; folded with update, micro-batch)
METHOD = (SIS, FIRST_PASS, LORA_INIT, LORA_DROPOUT)


def _int31(words: list[int]) -> int:
    return int(np.random.SeedSequence(words).generate_state(1)[0] >> 1)


def stream_seed(run_seed: int, step: int, stream: int, call: int = 0) -> int:
    """The seed of a generation stream's `call`-th call at `step` (4 words)."""
    if stream not in GENERATION:
        raise ValueError(f"stream {stream:#x} is not a generation stream {GENERATION}: use "
                         "method_seed")
    return _int31([run_seed, step, stream, call])


def method_seed(run_seed: int, step: int, stream: int) -> int:
    """The seed of a method stream at `step` (3 words): one of `METHOD` or a restart method's
    (ValueError when a restart method declared a value that is one of this module's)."""
    own = method_registry.streams()
    for name, value in own.items():
        if value in METHOD + GENERATION:
            raise ValueError(f"method stream {name}={value:#x} is one of rl/rollout/streams.py's")
    known = METHOD + tuple(own.values())
    if stream not in known:
        raise ValueError(f"stream {stream:#x} is not a method stream {known}: use stream_seed")
    return _int31([run_seed, step, stream])


def request_seed(stream_value: int, index: int) -> int:
    """The sampler seed of the request at global sample position `index` of a call whose stream
    seed is `stream_value` (a full 32-bit word: the sampler's own key)."""
    return int(np.random.SeedSequence([stream_value, index]).generate_state(1)[0])
