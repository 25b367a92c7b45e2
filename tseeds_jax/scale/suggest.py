"""Settings that lower a plan's peak: single changes ranked, and a greedy path to a fit.

Each candidate is a config override applied to the `Workload`, re-estimated with
`plan.estimate`.
"""

from __future__ import annotations

import dataclasses

from tseeds_jax.decode_layout import default_slots
from tseeds_jax.scale import plan as plan_lib
from tseeds_jax.scale.plan import MemoryPlan, Workload
from tseeds_jax.scale.plan_sampler import num_hosts, sampler_requests


@dataclasses.dataclass(frozen=True)
class Suggestion:
    change: str  # a config override, e.g. "--config.optim.micro_batch_size=16"
    why: str
    plan: MemoryPlan


def _candidates(w: Workload):
    """(override text, why, new workload) for each single setting change that may save memory."""
    data, fsdp, tensor = w.mesh
    m = w.model
    out = []
    if not m.remat:
        out.append(("--config.model.remat=True", "keep only layer inputs for the backward",
                    w.replace(model=m.replace(remat=True))))
    mini = w.sequences // w.mini_batches
    micro = w.micro_batch_size or mini
    shards = data * fsdp
    if micro // 2 >= shards and (micro // 2) and mini % (micro // 2) == 0:
        out.append((f"--config.optim.micro_batch_size={micro // 2}",
                    "halve the sequences per micro-batch (same update, more accumulation steps)",
                    w.replace(micro_batch_size=micro // 2)))
    if data > 1:
        out.append((f"--config.mesh.data={data // 2} --config.mesh.fsdp={fsdp * 2}",
                    "shard parameters and optimizer state over more devices",
                    w.replace(mesh=(data // 2, fsdp * 2, tensor))))
    heads_ok = lambda t: m.num_key_value_heads % t == 0 and m.num_attention_heads % t == 0  # noqa
    for src, (nd, nf) in (("fsdp", (data, fsdp // 2)), ("data", (data // 2, fsdp))):
        if (nd * nf * tensor * 2 == w.num_devices and nd >= 1 and nf >= 1
                and heads_ok(tensor * 2) and m.intermediate_size % (tensor * 2) == 0):
            out.append((f"--config.mesh.data={nd} --config.mesh.fsdp={nf} "
                        f"--config.mesh.tensor={tensor * 2}",
                        f"split heads / MLP / vocab over 2x more devices (from {src})",
                        w.replace(mesh=(nd, nf, tensor * 2))))
            break
    if m.dtype == "float32":
        out.append(("--config.model.dtype=bfloat16", "bfloat16 activations and KV cache",
                    w.replace(model=m.replace(dtype="bfloat16"))))
    if w.sampler_dtype == "float32" and m.param_dtype == "float32":
        out.append(("--config.model.sampler_dtype=bfloat16", "sample with bfloat16 weights",
                    w.replace(sampler_dtype="bfloat16")))
    slots = w.sampler_slots or default_slots(sampler_requests(w))
    if slots > 8:
        out.append((f"--config.hardware.sampler_slots={slots // 2}",
                    "fewer concurrent decode slots (smaller KV cache, slower rollouts)",
                    w.replace(sampler_slots=slots // 2)))
    if w.sampler_placement == "replica":
        hosts = num_hosts(w)
        out.append(("--config.hardware.sampler_placement=sharded",
                    "sample and run the statistics passes on the learner's mesh (parameters, KV "
                    "cache and rows split by the rules table)" +
                    (f"; {hosts} hosts: data x fsdp must be a multiple of {hosts}"
                     if hosts > 1 else ""),
                    w.replace(sampler_placement="sharded")))
    return out


def suggestions(plan: MemoryPlan, *, max_rounds: int = 6) -> tuple[list[Suggestion], list[Suggestion]]:
    """(ranked single changes, a greedy path of changes to a fit).

    Single changes are ranked by the peak after applying each one alone; the path applies the
    best change again and again until the plan fits (or `max_rounds`)."""
    hbm = plan.hbm_bytes
    ranked = []
    for change, why, w2 in _candidates(plan.workload):
        p2 = plan_lib.estimate(w2, hbm_bytes=hbm)
        if p2.peak_bytes < plan.peak_bytes:
            ranked.append(Suggestion(change, why, p2))
    ranked.sort(key=lambda s: s.plan.peak_bytes)
    path: list[Suggestion] = []
    cur = plan
    if hbm is None:
        return ranked, path
    for _ in range(max_rounds):
        if cur.fits:
            break
        options = [(plan_lib.estimate(w2, hbm_bytes=hbm), c, why)
                   for c, why, w2 in _candidates(cur.workload)]
        options = [o for o in options if o[0].peak_bytes < cur.peak_bytes * 0.99]
        if not options:
            break
        best = min(options, key=lambda o: o[0].peak_bytes)
        path.append(Suggestion(best[1], best[2], best[0]))
        cur = best[0]
    return ranked, path
