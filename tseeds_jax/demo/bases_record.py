"""The record of a demo over bases, written one finished run at a time, and resumed from.

Values (percentages rounded to 0.01 points; lists indexed by base number, inner lists by
training seed 0, 1, ...; `None` where a base has not been warmed yet):
  settings      the settings every run shares (`experiment.settings`): a resumed record must
                match them, so runs of another configuration never mix in
  base_pass1    [per base] the base policy's sampled held-out pass@1; base_greedy the greedy one
  <m>_pass1     [[per seed] per base] held-out pass@1 of method m's final policy
  <m>_all_equal [[per seed] per base] mean share of all-equal groups over the run's steps
                (before DAPO's filter); <m>_all_equal_seeded the same over seeded batches only
                (None for methods without seeded batches)
  <m>_run_s     [[per seed] per base] wall seconds of the run (training and final evaluation)
  <m>_commit    [[per seed] per base] the commit the run ran (`results_record.run_commit`: HEAD
                when it finished, " + uncommitted changes" when the tree differed; None for
                runs recorded before issue 55). A series commits its record between runs, so
                its runs span commits: the record-level `commit` is HEAD when it was opened.
Runs finish in the plan's order (`plan.order`: a method's seeds of one base in order), so a
run's seed is its place in its base's list. The record also names the machine (CPU model and
flags); resuming on another CPU or with a base whose pass@1 differs is refused, since the
demo's numbers are deterministic per CPU only.
"""

from __future__ import annotations

import datetime
import json
import math
import os
from typing import Any

from tseeds_jax import results_record

_SUFFIXES = ("pass1", "all_equal", "all_equal_seeded", "run_s")
COMMIT_NOTE = ("HEAD when the record was opened; each run's commit is in values.<method>_commit "
               "(a series commits its record between runs, so its runs span commits)")


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _round(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 2)


def run_shares(run_dir: str) -> tuple[float | None, float | None]:
    """(all-equal share over all steps, over seeded steps) in % from a run's metrics.jsonl."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return None, None
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]

    def mean(key):
        vals = [float(r[key]) for r in rows if isinstance(r.get(key), int | float)
                and math.isfinite(float(r[key]))]
        return 100 * sum(vals) / len(vals) if vals else None

    return mean("zero_adv_group_frac"), mean("zero_adv_group_frac/seeded")


class BasesRecord:
    """One record file: `open` creates or resumes it, `add_base`/`add_run` write it at once."""

    def __init__(self, path: str, rec: dict[str, Any]):
        self.path, self.rec = path, rec

    @classmethod
    def open(cls, path: str, *, name_what: str, command: str, settings: dict, methods: list[str],
             bases: int, commit: str | None, resume: bool) -> BasesRecord:
        """Resumes `path` when it exists and `resume` is set (after checking its settings and
        machine), else starts it empty (replacing a file there)."""
        mach = results_record.machine()
        if os.path.exists(path) and resume:
            rec = results_record.load(path)
            old = (rec.get("values") or {}).get("settings", {}).get("value")
            if old != settings:
                raise ValueError(f"record {path!r}: field 'values.settings' = {old!r} differs from "
                                 f"this demo's settings {settings!r}")
            for key in ("cpu", "flags"):
                if rec["machine"].get(key) != mach.get(key):
                    raise ValueError(
                        f"record {path!r}: field 'machine.{key}' = {rec['machine'].get(key)!r}, "
                        f"this machine has {mach.get(key)!r}: the demo's numbers are deterministic "
                        "per CPU only, so runs of two machines are not one record")
            out = cls(path, rec)
            out._grow(methods, bases)
            return out
        values: dict[str, Any] = {
            "settings": {"value": settings, "unit": "settings every run shares"},
            "base_pass1": {"value": [], "unit": "% sampled held-out pass@1, per base"},
            "base_greedy": {"value": [], "unit": "% greedy held-out accuracy, per base"}}
        rec = results_record.make(
            os.path.splitext(os.path.basename(path))[0], name_what, "measured", command,
            backend="cpu", values=values, commit=commit, machine_info=mach, date=_now(),
            note="written one finished run at a time; date: first and last write",
            commit_note=COMMIT_NOTE)
        out = cls(path, rec)
        out._grow(methods, bases)
        out._write()
        return out

    def _grow(self, methods: list[str], bases: int) -> None:
        """Adds empty entries for new methods and bases (a resumed record may get more)."""
        v = self.rec["values"]
        for key in ("base_pass1", "base_greedy"):
            v[key]["value"] += [None] * (bases - len(v[key]["value"]))
        units = {"pass1": "% held-out pass@1, [[per training seed] per base]",
                 "all_equal": "% all-equal groups over all steps, [[per training seed] per base]",
                 "all_equal_seeded": "% all-equal groups over seeded steps, [[per training seed] "
                                     "per base]",
                 "run_s": "wall s per run (training and final evaluation), [[per training seed] "
                          "per base]"}
        for m in methods:
            for suf in _SUFFIXES:
                entry = v.setdefault(f"{m}_{suf}", {"value": [], "unit": units[suf]})
                entry["value"] += [[] for _ in range(bases - len(entry["value"]))]
            # Runs recorded before per-run commits (issue 55) have None: the commit is unknown.
            entry = v.setdefault(f"{m}_commit", {"value": [], "unit": "the commit each run ran, "
                                 "[[per training seed] per base]"})
            entry["value"] += [[] for _ in range(bases - len(entry["value"]))]
            for runs, commits in zip(v[f"{m}_pass1"]["value"], entry["value"]):
                commits += [None] * (len(runs) - len(commits))

    def _write(self) -> None:
        first = self.rec["date"].split(" – ")[0]
        self.rec["date"] = f"{first} – {_now()}" if first != _now() else first
        results_record.write(self.path, self.rec)

    def base_pass1(self, base: int) -> float | None:
        return self.rec["values"]["base_pass1"]["value"][base]

    def add_base(self, base: int, pass1: float, greedy: float) -> None:
        """Records base `base` (fractions); refuses one that differs from its recorded value."""
        v = self.rec["values"]
        got, old = _round(100 * pass1), v["base_pass1"]["value"][base]
        if old is not None and old != got:
            raise ValueError(f"record {self.path!r}: field 'values.base_pass1[{base}]' = {old!r}, "
                             f"this warm start gave {got!r}: not the same base policy")
        v["base_pass1"]["value"][base] = got
        v["base_greedy"]["value"][base] = _round(100 * greedy)
        self._write()

    def has(self, method: str, base: int, seed: int) -> float | None:
        """The recorded pass@1 (%) of (method, base, seed), else None."""
        vals = self.rec["values"].get(f"{method}_pass1", {}).get("value") or []
        return vals[base][seed] if base < len(vals) and seed < len(vals[base]) else None

    def add_run(self, method: str, base: int, seed: int, pass1: float, run_dir: str | None,
                seconds: float | None, commit: str | None = None) -> None:
        """Appends a finished run (pass1 a fraction); its seed must be its base's next. commit:
        the code it ran (default `results_record.run_commit()`, HEAD now)."""
        v = self.rec["values"]
        lst = v[f"{method}_pass1"]["value"][base]
        if seed != len(lst):
            raise ValueError(f"record {self.path!r}: {method} base {base} seed {seed}: the record "
                             f"holds seeds 0-{len(lst) - 1} of it; runs are added in seed order")
        shares = run_shares(run_dir) if run_dir else (None, None)
        for suf, x in zip(_SUFFIXES, (100 * pass1, *shares, seconds)):
            v[f"{method}_{suf}"]["value"][base].append(
                round(x, 1) if suf == "run_s" and x is not None else _round(x))
        v[f"{method}_commit"]["value"][base].append(commit or results_record.run_commit())
        self._write()

    def set_value(self, key: str, value: Any, unit: str) -> None:
        """Sets one more value (e.g. the demo's wall time) and writes the record."""
        self.rec["values"][key] = {"value": value, "unit": unit}
        self._write()
