"""The response-length distribution a step-time estimate assumes (`rollout.length_distribution`).

Forms (lengths as fractions of `rollout.max_response_len`, the cap R):
* "lognormal:median=M,sigma=S" (default "lognormal:median=0.3,sigma=1.0"): a log-normal censored
  at the cap: L = min(R, R * M * exp(S * Z)), Z standard normal, at least 1 token. The mass above
  the cap lands on it: the responses cut by the length limit (finish_reason "length").
* "full": every response runs to the cap (what the step times assumed before issue #37).

Why a censored log-normal. Published math-RL length histograms are unimodal with a long right tail
and a spike at the cap (sources read for this, 2026-12-04): DeepScaleR's R1-Distill-Qwen-1.5B run at
8k context reports mean responses falling from 5.5k to 3.5k tokens, with responses cut at the
limit common (notes at long8v.github.io/PTIR/posts/225-deepscaler-...); APRIL
(github.com/RLsys-Foundation/APRIL, "active partial rollouts") and DARTS (arXiv 2605.30859) name
the long tail of response lengths as the rollout bottleneck, a few responses at the cap stalling
each synchronous batch; a practitioner's lesson (jiahuanglin.xyz, "long-tail rollouts") models
lengths as log-normal, "median ~500, p99 ~5000", i.e. sigma ~1. Two numbers (median, spread) and
the censoring give those three features; the default puts the median at 0.3 R, 11% of responses
at the cap and the mean at 0.40 R. It is an assumption, not a measurement of this project's runs:
set the field to a run's own shape (the trainer logs response lengths) for a better estimate.
"""

from __future__ import annotations

import dataclasses
import math
from statistics import NormalDist

from tseeds_jax.rl.config.errors import ConfigValueError

DEFAULT = "lognormal:median=0.3,sigma=1.0"
FIELD = "rollout.length_distribution"


@dataclasses.dataclass(frozen=True)
class LengthDistribution:
    kind: str  # "lognormal" | "full"
    median: float = 1.0  # fraction of the cap
    sigma: float = 0.0

    def quantile(self, u: float) -> float:
        """Length at probability u, as a fraction of the cap (censored: at most 1)."""
        if self.kind == "full":
            return 1.0
        return min(1.0, self.median * math.exp(self.sigma * NormalDist().inv_cdf(u)))

    def lengths(self, n: int, cap: int) -> list[int]:
        """n representative lengths (tokens, ascending): the quantiles at (i + 1/2) / n, so a
        batch of n responses has the distribution's shape without sampling noise."""
        return [min(cap, max(1, round(cap * self.quantile((i + 0.5) / n)))) for i in range(n)]

    def cap_share(self) -> float:
        """Share of responses cut at the cap."""
        if self.kind == "full":
            return 1.0
        return 1.0 - NormalDist().cdf(math.log(1.0 / self.median) / self.sigma)

    @property
    def spec(self) -> str:
        return "full" if self.kind == "full" else \
            f"lognormal:median={self.median:g},sigma={self.sigma:g}"


def parse(spec: str, field: str = FIELD) -> LengthDistribution:
    """A LengthDistribution from its config string; ConfigValueError naming the field and value."""

    def bad(why: str):
        raise ConfigValueError(f"config.{field}={spec!r}: {why}")

    if not isinstance(spec, str):
        bad("must be a string such as 'full' or 'lognormal:median=0.3,sigma=1.0'")
    kind, _, rest = spec.strip().partition(":")
    if kind == "full":
        if rest:
            bad("'full' takes no parameters")
        return LengthDistribution("full")
    if kind != "lognormal":
        bad(f"unknown distribution {kind!r}; known: 'full', 'lognormal:median=M,sigma=S'")
    params = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = part.partition("=")
        if not eq or key.strip() not in ("median", "sigma"):
            bad(f"parameter {part!r}: expected median=M and sigma=S")
        try:
            params[key.strip()] = float(value)
        except ValueError:
            bad(f"parameter {part!r}: {value!r} is not a number")
    if set(params) != {"median", "sigma"}:
        bad("lognormal needs both median=M (fraction of max_response_len) and sigma=S")
    if not 0 < params["median"] <= 1:
        bad(f"median={params['median']:g}: must be in (0, 1] (a fraction of max_response_len)")
    if not 0 < params["sigma"] <= 5:
        bad(f"sigma={params['sigma']:g}: must be in (0, 5]")
    return LengthDistribution("lognormal", params["median"], params["sigma"])
