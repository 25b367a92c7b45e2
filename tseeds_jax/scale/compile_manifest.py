"""`tseeds compile --out DIR`: serialized executables and a manifest a launch checks against.

DIR/manifest.json holds the config (flattened, so that a mismatch names the field), its sha256,
the target topology, jax / jaxlib / libtpu versions, the decode layout the sampler was compiled
for (`decode_layout`; a run given `--compiled DIR` refuses another), and per program the sha256
of its lowered HLO (the program as traced from the trainer's code and the config) and of its
serialized executable (DIR/NAME.xla, `jax.experimental.serialize_executable`).

`check_manifest(DIR, config)` raises `ManifestMismatch` naming the first difference: a config
field, the topology, a library version, or (given `hlo_sha256` of programs lowered by the launch)
a program whose code changed since the compile. `check_lowered(DIR, config)` (`tseeds compile
--check DIR`) lowers the manifest's programs for the config now, without compiling them, and
checks all of that.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from typing import Any

MANIFEST = "manifest.json"


class ManifestMismatch(ValueError):
    pass


def flat_config(cd) -> dict[str, Any]:
    """{"optim.micro_batch_size": 32, ...} of a ConfigDict / dict (values JSON-able)."""
    d = cd.to_dict() if hasattr(cd, "to_dict") else dict(cd)
    out: dict[str, Any] = {}

    def walk(prefix, x):
        if isinstance(x, dict):
            for k in sorted(x):
                walk(f"{prefix}{k}.", x[k])
        else:
            out[prefix[:-1]] = json.loads(json.dumps(x, default=str))

    walk("", d)
    return out


def config_sha256(flat: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(flat, sort_keys=True).encode()).hexdigest()


def versions() -> dict[str, str]:
    import jax
    import jaxlib

    out = {"jax": jax.__version__, "jaxlib": jaxlib.__version__}
    try:
        from importlib.metadata import version

        out["libtpu"] = version("libtpu")
    except Exception:  # not installed: the manifest says so
        out["libtpu"] = "absent"
    return out


def check_out_dir(out: str) -> None:
    """--out must be a new or empty folder (a stale manifest must never survive a failed run)."""
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise ValueError(f"--out={out!r}: exists and is not an empty folder")


def write(out: str, cd, res) -> dict[str, Any]:
    """Writes every executable of `res` (compiled with keep_executables) and the manifest into a
    temporary folder, then moves it to `out` (all or nothing)."""
    from jax.experimental import serialize_executable

    check_out_dir(out)
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tseeds_compile_", dir=parent)
    try:
        flat = flat_config(cd)
        programs = {}
        for c in res.compiled:
            entry = dict(c.to_dict())
            try:
                payload, _, _ = serialize_executable.serialize(c.executable)
                with open(os.path.join(tmp, f"{c.name}.xla"), "wb") as f:
                    f.write(payload)
                entry["executable"] = f"{c.name}.xla"
                entry["executable_sha256"] = hashlib.sha256(payload).hexdigest()
            except Exception as e:  # noqa: BLE001 -- recorded, the HLO fingerprint still holds
                entry["executable"] = None
                entry["serialize_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            programs[c.name] = entry
        manifest = dict(config=flat, config_sha256=config_sha256(flat),
                        topology=res.target.topology, devices=res.target.mesh.size,
                        mesh=dict(res.target.mesh.shape), versions=versions(),
                        decode_layout=decode_layout_record(res.target),
                        programs=programs, summary=res.summary())
        with open(os.path.join(tmp, MANIFEST), "w") as f:
            json.dump(manifest, f, indent=1, default=str)
        if os.path.isdir(out):
            os.rmdir(out)  # empty (checked)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def decode_layout_record(target) -> dict[str, Any] | None:
    """The decode layout the sampler programs were compiled for (None unless
    hardware.sampler_placement is "decode"): `tseeds train --compiled` refuses another one."""
    from tseeds_jax.scale import compile_programs as cp

    if target.cfg.hardware.sampler_placement != "decode":
        return None
    return cp.sampler_shapes(target)["choice"].record()


def manifest_path(out: str) -> str:
    """DIR/manifest.json, or `out` itself when it is a file (a launch copies the manifest only)."""
    return out if os.path.isfile(out) else os.path.join(out, MANIFEST)


def read_manifest(out: str) -> tuple[str, dict[str, Any]]:
    """(path, manifest) of `out`; ManifestMismatch when there is none, ValueError naming the
    file when it is not one `write` made."""
    path = manifest_path(out)
    if not os.path.exists(path):
        raise ManifestMismatch(f"{path}: no manifest (run `tseeds compile --out {out}`)")
    try:
        with open(path) as f:
            manifest = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    keys = ("config", "config_sha256", "topology", "versions", "programs")
    lacking = [k for k in keys if k not in manifest] if isinstance(manifest, dict) else keys
    if lacking:
        raise ValueError(f"{path}: not a `tseeds compile --out` manifest (no {', '.join(lacking)})")
    return path, manifest


def check_manifest(out: str, cd, *, topology: str | None = None,
                   hlo_sha256: dict[str, str] | None = None) -> dict[str, Any]:
    """The manifest of `out` if the launch matches it; else ManifestMismatch naming the field."""
    path, manifest = read_manifest(out)
    flat = flat_config(cd)
    if config_sha256(flat) != manifest["config_sha256"]:
        old = manifest["config"]
        for key in sorted(set(old) | set(flat)):
            if old.get(key, "<unset>") != flat.get(key, "<unset>"):
                raise ManifestMismatch(
                    f"config.{key}={flat.get(key, '<unset>')!r}: compiled with "
                    f"{old.get(key, '<unset>')!r} ({path})")
    if topology is not None and topology != manifest["topology"]:
        raise ManifestMismatch(f"topology {topology!r}: compiled for {manifest['topology']!r}")
    now = versions()
    for lib, v in manifest["versions"].items():
        if now.get(lib) != v:
            raise ManifestMismatch(f"{lib} {now.get(lib)}: compiled with {lib} {v} ({path})")
    for name, sha in (hlo_sha256 or {}).items():
        entry = manifest["programs"].get(name)
        if entry is None:
            raise ManifestMismatch(f"program {name!r}: not in the manifest ({path})")
        if entry["hlo_sha256"] != sha:
            raise ManifestMismatch(f"program {name!r}: its HLO changed since the compile "
                                   f"({entry['hlo_sha256'][:12]} -> {sha[:12]})")
    return manifest


def _impl(entry: dict[str, Any]) -> str:
    """The kernel a manifest program was compiled with (compile_run retries with "chunked")."""
    return "chunked" if "kernel_impl=chunked" in entry.get("note", "") else "pallas"


def check_lowered(out: str, cd, *, topology: str | None = None, only=None,
                  prefill_buckets: str = "all") -> tuple[dict[str, Any], int]:
    """(manifest, programs checked) when `cd` matches the manifest of `out` and every manifest
    program of the `only` groups lowers (no compile) to the HLO that was compiled; else
    ManifestMismatch naming the first difference. Config, topology and versions are checked
    before lowering, so that a changed field is named rather than the HLO it changes. The
    topology defaults to the config's `hardware.accelerator`, else to the manifest's. Programs
    the compile did not make (another --only or --prefill-buckets) are not checked; a manifest
    program of the `only` groups that is not built now is a mismatch."""
    from tseeds_jax.rl.config import TrainConfig
    from tseeds_jax.scale import compile_programs as cp
    from tseeds_jax.scale import compile_run

    only = tuple(only or cp.PHASES)
    manifest = check_manifest(out, cd, topology=topology)
    if topology is None and not TrainConfig.from_config(cd).hardware.accelerator:
        topology = manifest["topology"]
    t = compile_run.make_target(cd, topology=topology)
    check_manifest(out, cd, topology=t.topology)
    wanted = {name: e for name, e in manifest["programs"].items() if e.get("phase") in only}
    hlo = {}
    for impl in sorted({_impl(e) for e in wanted.values()}, reverse=True):  # pallas first
        for prog in compile_run.programs_for(t, only, prefill_buckets=prefill_buckets,
                                             kernel_impl=impl):
            if prog.name in wanted and _impl(wanted[prog.name]) == impl:
                hlo[prog.name] = cp.lower(prog, t.family)[1]
    missing = sorted(set(wanted) - set(hlo))
    if missing:
        raise ManifestMismatch(f"program {missing[0]!r}: compiled, but not built now for "
                               f"--only={','.join(only)} --prefill-buckets={prefill_buckets} "
                               f"({manifest_path(out)})")
    check_manifest(out, cd, topology=t.topology, hlo_sha256=hlo)
    return manifest, len(hlo)
