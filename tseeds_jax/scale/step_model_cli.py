"""`python -m tseeds_jax.scale.step_model_cli SAMPLER.json[,LEARNER.json|,UPDATE_S] ... [--record PATH]`

The step model (scale/step_model.py) again from saved `tseeds compile --json` outputs, without
compiling: SAMPLER.json is a `--only sampler` output (its summary's `step_model_inputs`), the
optional LEARNER.json a `--only learner` output of the same config, whose update roofline + ICI
(serial) is the update time (or UPDATE_S, a number of seconds: say where it comes from in
--note). One line per argument (sync vs async on-policy step); --record writes them as a result
record (kind "estimate": a model on compile-only bounds).

Options: --length-distribution SPEC[;SPEC...] (instead of each config's; one row per SPEC),
--max-staleness N, --group-size G (the configs' G; 8 for the paper recipe), --partial-tokens C
(default: the steady model's decode steps per step), --no-interrupt, --budget-tokens X,
--keep-kv, --async-placement interleaved|split, --update-s X (instead of LEARNER.json), --json.
The async step is the runtime's rule (scale/step_runtime.py: responses the staleness bound
makes due are forced to finish); the steady model without the bound is printed beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys

from tseeds_jax.rl.config.errors import ConfigValueError


def _load(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def estimate_files(paths: str, args, spec: str | None = None) -> dict:
    """The estimate for one "SAMPLER.json[,LEARNER.json]" argument (length distribution `spec`,
    default the config's)."""
    from tseeds_jax.scale.step_report import step_model_from_inputs

    sampler, *rest = paths.split(",")
    summary = _load(sampler)["summary"]
    if "step_model_inputs" not in summary:
        raise ValueError(f"{sampler}: no summary.step_model_inputs (a `tseeds compile --only "
                         "sampler --json` output of a decode / sharded sampler is needed)")
    update_s, update_from = args.update_s, "--update-s" if args.update_s is not None else None
    for path in rest:
        try:  # a number: the update's seconds, given
            given = float(path)
        except ValueError:
            given = None
        if given is not None:
            if update_s is None:
                update_s, update_from = given, f"{given:g} s given"
            continue
        s = _load(path)["summary"]
        if "learner_roofline_ici_serial_s" not in s:
            raise ValueError(f"{path}: no learner_roofline_ici_serial_s (a `tseeds compile "
                             "--only learner --json` output is needed)")
        if update_s is None:
            update_s, update_from = s["learner_roofline_ici_serial_s"], path
    inputs = summary["step_model_inputs"]
    est = step_model_from_inputs(
        inputs, update_s=update_s, length_distribution=spec,
        max_staleness=args.max_staleness, budget_tokens=args.budget_tokens,
        reprefill=not args.keep_kv, placement=args.async_placement, group_size=args.group_size,
        partial_tokens=args.partial_tokens, interrupt=not args.no_interrupt)
    est["inputs"] = dict(sampler=sampler, update_from=update_from, topology=inputs["topology"],
                         chips=inputs["chips"], requests=inputs["requests"],
                         slots=inputs["slots"])
    return est


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="tseeds_jax.scale.step_model_cli", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="SAMPLER.json[,LEARNER.json | ,UPDATE_S]")
    ap.add_argument("--note", default="", help="the record's note: where given update times "
                    "come from")
    ap.add_argument("--length-distribution", default=None)
    ap.add_argument("--max-staleness", type=int, default=None,
                    help="the staleness bound (default: the runs' config.stale.max_staleness)")
    ap.add_argument("--group-size", type=int, default=8,
                    help="G: a group is trained when all its G responses finished (default 8)")
    ap.add_argument("--partial-tokens", type=int, default=None)
    ap.add_argument("--no-interrupt", action="store_true",
                    help="other responses stop at C tokens also while forced ones finish")
    ap.add_argument("--budget-tokens", type=float, default=None)
    ap.add_argument("--keep-kv", action="store_true")
    ap.add_argument("--async-placement", choices=("interleaved", "split"), default="interleaved")
    ap.add_argument("--update-s", type=float, default=None)
    ap.add_argument("--record", default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from tseeds_jax.scale.step_report import step_model_lines

    out = {}
    specs = args.length_distribution.split(";") if args.length_distribution else [None]
    for paths in args.files:
        for spec in specs:
            try:
                out[f"{paths} {spec}" if spec else paths] = estimate_files(paths, args, spec)
            except (OSError, ValueError, KeyError, ConfigValueError) as e:
                print(f"step_model_cli: {paths}: {e}", file=sys.stderr)
                return 2
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        for paths, est in out.items():
            print(f"{paths} ({est['inputs']['topology']}, {est['inputs']['chips']} chips, "
                  f"update from {est['inputs']['update_from']}):")
            print("\n".join(step_model_lines(est)))
    if args.record:
        write_record(args.record, out, argv, args.note)
        print(f"wrote {args.record}", file=sys.stderr)
    return 0


def _without_note(argv: list[str]) -> list[str]:
    """argv less --note and its text (the note is the record's own field)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--note":
            skip = True
        elif not a.startswith("--note="):
            out.append(a)
    return out


def write_record(path: str, out: dict, argv: list[str], note: str = "") -> None:
    from tseeds_jax import results_record

    rows, values = [], {}
    for paths, est in out.items():
        name = os.path.basename(paths.split(",")[0]).split(".")[0]
        sy, a = est["sync"], est["async"]
        if est["length_distribution"]["spec"] == "full":
            name += "__full"
        split = a["split"]
        u = est["async_unbounded"]
        rows.append([name, est["inputs"]["topology"], est["length_distribution"]["spec"],
                     f"{sy['step_s']:.2f}", f"{sy['occupancy']:.2f}",
                     f"{sy['tokens_per_s_per_chip']:.0f}", f"{a['step_s']:.2f}",
                     f"{a['occupancy']:.2f}", f"{a['tokens_per_s_per_chip']:.0f}",
                     f"**{est['speedup']:.2f}x**",
                     f"{a['forced_share']:.0%} ({a['forced_token_share']:.0%})",
                     "-" if a["shortest_forced"] is None else str(a["shortest_forced"]),
                     f"{split['step_s']:.2f} ({split['sampler_replicas']}/{split['replicas']})"
                     if split else "-", f"{est['speedup_unbounded']:.2f}x",
                     f"{u['responses_over_staleness']:.0%}"])
        for key, v in (("sync_step_s", sy["step_s"]), ("async_step_s", a["step_s"]),
                       ("sync_tokens_per_s_per_chip", sy["tokens_per_s_per_chip"]),
                       ("async_tokens_per_s_per_chip", a["tokens_per_s_per_chip"]),
                       ("speedup", est["speedup"]), ("sync_occupancy", sy["occupancy"]),
                       ("async_occupancy", a["occupancy"]), ("update_s", sy["update_s"]),
                       ("sync_occupancy_first_tenth", sy["occupancy_curve"][0]),
                       ("sync_occupancy_last_tenth", sy["occupancy_curve"][-1]),
                       ("forced_share", a["forced_share"]),
                       ("forced_token_share", a["forced_token_share"]),
                       ("speedup_unbounded", est["speedup_unbounded"]),
                       ("responses_over_staleness", u["responses_over_staleness"]),
                       ("cap_share", est["length_distribution"]["cap_share"])):
            # stored as printed (results_render prints the stored digits)
            v = int(round(v)) if "tokens_per_s" in key else round(v, 2)
            values[f"{name}__{key}"] = {"value": v, "unit": "s" if key.endswith("_s") else
                                        "tokens/s/chip" if "tokens_per_s" in key else
                                        "ratio" if key.startswith("speedup") else "fraction"}
        values[f"{name}__partial_tokens"] = {"value": a["chunk"], "unit": "tokens (C)"}
        values[f"{name}__shortest_forced"] = {"value": a["shortest_forced"], "unit": "tokens"}
    rec = results_record.make(
        os.path.splitext(os.path.basename(path))[0],
        "on-policy step time, sync vs async (partial rollouts, continuous batching across steps, "
        "the staleness bound enforced as the runtime does: scale/step_runtime.py), under the "
        "default response-length distribution (scale/step_model.py)",
        "estimate", "python -m tseeds_jax.scale.step_model_cli " + shlex.join(_without_note(argv)),
        backend="tpu (compile-only, libtpu) + the step model", values=values,
        table={"columns": ["variant", "target", "lengths", "sync step s", "sync occupancy",
                           "sync tokens/s/chip", "async step s", "async occupancy",
                           "async tokens/s/chip", "speed-up",
                           "forced to finish: responses (tokens)", "shortest forced",
                           "async split step s (sampler replicas)",
                           "speed-up without the bound", "its responses over max_staleness"],
               "rows": rows},
        note="decode / prefill / sync costs from the compiled sampler programs' rooflines, the "
             "update from the compiled learner's roofline + ICI (serial): compile-only bounds; "
             "the step model on top is an estimate; nothing ran on a TPU" + (f". {note}" if note
                                                                            else ""))
    results_record.write(path, rec)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
