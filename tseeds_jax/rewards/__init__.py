"""Rewards: text in, number out.

`score(name, response, reference) -> float in [0, 1]` for one response; `score_result` gives the
RewardResult (score, reason, details); `score_batch(name, responses, references, *, max_workers)`
grades in parallel and returns results in order; `summarize(results)` gives batch metrics (mean and
a count per reason). Built-in rewards: "math", "reasoning_gym", "code" (sandboxed; assert tests
split so that expected values never enter the sandbox and are compared outside; docs/sandbox.md).
Add rewards with `@register(name)`; `get(name)` returns the spec. Heavy dependencies (math-verify,
reasoning-gym) are imported only when a reward first runs. A sandbox that cannot run is never
silent: `health` (one warning per process, `check_rewards` for trainers) and `tseeds doctor`.
"""

from tseeds_jax.rewards import code_reward as _code  # noqa: E402,F401 - registers "code"
from tseeds_jax.rewards import gym_reward as _gym  # noqa: E402,F401 - registers "reasoning_gym"
from tseeds_jax.rewards import math_reward as _math  # noqa: E402,F401 - registers "math"
from tseeds_jax.rewards import plain_judge as _judge  # noqa: E402,F401 - registers "code_judge"
from tseeds_jax.rewards.registry import (
    RewardResult,
    RewardSpec,
    get,
    names,
    register,
    score,
    score_batch,
    score_result,
    summarize,
)
from tseeds_jax.rewards.sandbox import SandboxLimits  # noqa: E402

__all__ = [
    "RewardResult",
    "RewardSpec",
    "SandboxLimits",
    "get",
    "names",
    "register",
    "score",
    "score_batch",
    "score_result",
    "summarize",
]
