"""The differential rule of the grading contract (docs/sandbox.md, "The contract"), shared by the
corpus tests: every program runs through the grader ("code") and the plain judge ("code_judge",
the reference semantics, same sandbox, no proxies) and any disagreement must be allowed:

- the grader scores 1 where the judge scores 0: never allowed (A: never more lenient);
- the grader scores 0 where the judge scores 1: allowed only with a tampering verdict of the
  grader (reason "tampering"), or for a program that the task's truth calls wrong (the judge was
  fooled: the program tampered with it, and the grader's own verdict is the truth), or for a case
  named in `design_limits` (documented in docs/sandbox.md, "Design limits").
"""

from __future__ import annotations


def run_both(cases, max_workers: int = 2) -> dict:
    """{name: [grader score, reason, note, tampering, judge score, judge status]}, grouped by the
    cases' reward options."""
    from tseeds_jax import rewards

    out: dict = {}
    for opts in {repr(sorted(c[3].items())): c[3] for c in cases}.values():
        picked = [c for c in cases if c[3] == opts]
        got = rewards.score_batch("code", [c[1] for c in picked], [c[2] for c in picked],
                                  max_workers=max_workers, **opts)
        ref = rewards.score_batch("code_judge", [c[1] for c in picked], [c[2] for c in picked],
                                  max_workers=max_workers)
        for c, g, j in zip(picked, got, ref):
            out[c[0]] = [g.score, g.reason, g.details.get("stderr_tail", "")[-200:],
                         g.details.get("tampering"), j.score, j.reason]
    return out


def violations(cases, scores: dict, design_limits: dict | None = None) -> dict:
    """The cases that break the rule (name: why), and any whose grade is not the task's truth."""
    limits = design_limits or {}
    bad = {}
    for name, *_, truth in cases:
        g, reason, note, tamper, j, jstatus = scores[name]
        if g != truth:
            bad[name] = f"grader {g} ({reason}: {note}) but the task's truth is {truth}"
        elif g > j:
            bad[name] = f"grader 1 where the judge says 0 ({jstatus}): more lenient than the judge"
        elif g < j and not (reason == "tampering" or truth == 0 or name in limits):
            bad[name] = f"grader 0 ({reason}: {note}) where the judge says 1, without a tampering verdict"
    return bad
