"""The demo's design: which (method, base, training seed) runs it makes, in which order, and
where each base and run lives in the output folder.

A *base* is one warm start of the base policy: base b initialises the model with seed b, draws
its demonstrations with seed `warm.seed + b` from the training source of seed 99 + b, so base 0
is the single warm start the demo made before it had bases. Every method trains from every base
with the same training seeds; the comparison of two methods is paired within a base.

Folders (base 0 keeps the layout of a one-base demo):
  DIR/base/ and DIR/runs/<method>/seed<k>/                  base 0
  DIR/base<b>/ and DIR/runs/<method>/base<b>/seed<k>/       base b > 0
"""

from __future__ import annotations

import os

from tseeds_jax.eval.rundata import base_folder

# Methods that are compared first, in pairs: an early stop still compares the ratio rule with
# DAPO on every base before anything else runs.
_GROUPS = (("dapo", "ts_ratio"), ("ts_mixture", "ts_mixture_spread"))


def base_dir(out: str, base: int) -> str:
    return base_folder(out, base)


def run_dir(out: str, method: str, base: int, seed: int) -> str:
    parts = [out, "runs", method] + ([] if base == 0 else [f"base{base}"]) + [f"seed{seed}"]
    return os.path.join(*parts)


def base_seeds(base: int, warm_seed: int = 0) -> dict[str, int]:
    """The seeds that make base `base`: model init, demonstration draws, training source."""
    if not isinstance(base, int) or isinstance(base, bool) or base < 0:
        raise ValueError(f"base = {base!r}: expected an integer >= 0")
    return {"init": base, "warm": warm_seed + base, "source": 99 + base}


def seeds_of(method: str, seeds: tuple[int, ...], method_seeds: dict[str, int],
             minibatch_seeds: int) -> tuple[int, ...]:
    """The training seeds of `method`: the first `method_seeds[method]` of 0, 1, ... where given,
    else `seeds` (the mini-batched baseline: its first `minibatch_seeds`)."""
    if method in method_seeds:
        return tuple(range(method_seeds[method]))
    return seeds[:minibatch_seeds] if method == "dapo_minibatch" else seeds


def _group(method: str) -> int:
    return next((i for i, g in enumerate(_GROUPS) if method in g), len(_GROUPS))


def order(methods: list[str], bases: tuple[int, ...], seeds: tuple[int, ...],
          method_seeds: dict[str, int] | None = None,
          minibatch_seeds: int = 3) -> list[tuple[str, int, int]]:
    """[(method, base, seed)] in run order: training seed first, then the method's group (DAPO
    and the ratio rule, then the two mixture rules, then the rest), then the base, then the
    method's place in `methods`. So a demo stopped early has compared DAPO with the ratio rule
    on every base, and every finished group has every base."""
    if not methods:
        raise ValueError("methods: empty list")
    if not bases or len(set(bases)) != len(bases):
        raise ValueError(f"bases = {bases!r}: expected distinct base numbers")
    for m, n in (method_seeds or {}).items():
        if m not in methods or not isinstance(n, int) or n < 1:
            raise ValueError(f"method_seeds[{m!r}] = {n!r}: expected a method of {methods} "
                             "and a count >= 1")
    plan = [(m, b, s) for m in methods for b in bases
            for s in seeds_of(m, seeds, method_seeds or {}, minibatch_seeds)]
    return sorted(plan, key=lambda r: (r[2], _group(r[0]), r[1], methods.index(r[0])))
