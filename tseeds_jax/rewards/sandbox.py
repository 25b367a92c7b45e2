"""Run one untrusted Python program with limits and isolation (see docs/sandbox.md).

`run_program` runs it in the allowlisted bubblewrap sandbox (`_bwrap`): a root of its own holding
only /usr, the interpreter and its standard library (site-packages hidden), /proc, a minimal /dev
with a small /dev/shm, a small /tmp and the CPU count (4) under /sys; new user, mount, pid,
network, IPC, UTS and cgroup namespaces; rlimits. It fails closed: when a layer cannot be had, the
result is `sandbox_error` with `error["layer"]` naming it. Only the explicit switch
`allow_weak_isolation` (config `sandbox_allow_weak_isolation`, off by default) lets such a machine
grade with the weaker namespace sandbox (`weak_isolation`: the host's filesystem read-only with a
denylist of hidden directories; as non-root without namespaces, rlimits and seccomp only), and
every such result records `isolation["weak"] = True` and why. `package_binds` finds what makes an
installed package importable in there.

Must be called from a single-threaded process (it forks): the reward workers of `_pool`.
"""

from __future__ import annotations

import os
import sys

import tseeds_jax.rewards._bwrap as _bwrap
import tseeds_jax.rewards.weak_isolation as weak_isolation
from tseeds_jax.rewards._common import PROJECT_ROOT, UID_BASE, Dialog, RunResult, SandboxLimits, warn_once

__all__ = ["BINDS_ENV", "PROJECT_ROOT", "UID_BASE", "RunResult", "SandboxLimits", "WEAK_ENV", "configure",
           "configured_binds", "package_binds", "run_program", "weak_isolation_allowed"]

# How the config switch reaches the reward workers (they inherit the trainer's environment).
WEAK_ENV = "TSEEDS_SANDBOX_ALLOW_WEAK_ISOLATION"
BINDS_ENV = "TSEEDS_SANDBOX_EXTRA_BINDS"  # os.pathsep-separated absolute paths
# Layers whose absence the switch may excuse; an interpreter that cannot start is never excused.
_EXCUSABLE = ("bubblewrap", "user namespace", "allowlisted root (mount namespace)", "network namespace",
              "seccomp filter", "sandbox setup")
_UNAVAILABLE: list[dict] = []  # this worker's bubblewrap failure, once seen under the switch


def weak_isolation_allowed() -> bool:
    return os.environ.get(WEAK_ENV) == "1"


def configured_binds() -> tuple[str, ...]:
    return tuple(p for p in os.environ.get(BINDS_ENV, "").split(os.pathsep) if p)


def configure(*, allow_weak_isolation: bool = False, extra_binds: tuple[str, ...] | list[str] = ()) -> None:
    """Set the switch and the extra read-only binds for this process and the reward workers it
    starts (restarted if either changed)."""
    if not isinstance(allow_weak_isolation, bool):
        raise TypeError(f"sandbox_allow_weak_isolation must be a bool, got {allow_weak_isolation!r}")
    binds = tuple(extra_binds)
    for p in binds:
        if not isinstance(p, str) or not os.path.isabs(p) or not os.path.exists(p) or os.pathsep in p:
            raise ValueError(f"sandbox_extra_binds: {p!r} must be an existing absolute path")
    if weak_isolation_allowed() == allow_weak_isolation and configured_binds() == binds:
        return
    for key, value in ((WEAK_ENV, "1" if allow_weak_isolation else ""), (BINDS_ENV, os.pathsep.join(binds))):
        if value:
            os.environ[key] = value
        else:
            os.environ.pop(key, None)
    import tseeds_jax.rewards._pool as _pool

    _pool.restart_shared(_pool.shared_python())


def package_closure(names) -> list[str]:
    """`names` and the top-level packages of their distributions' requirements, recursively (pytest
    needs `_pytest`, `pluggy`, `iniconfig`, `packaging`): requirements whose environment marker
    does not hold here (extras, other platforms) are left out."""
    import importlib.metadata as md
    import re

    tops = md.packages_distributions()  # top-level package -> distributions
    dist_tops: dict[str, list[str]] = {}
    for top, dists in tops.items():
        for dname in dists:
            dist_tops.setdefault(dname.lower().replace("_", "-"), []).append(top)
    out, todo, seen = list(names), [d for n in names for d in tops.get(n, [])], set()
    while todo:
        dname = todo.pop().lower().replace("_", "-")
        if dname in seen:
            continue
        seen.add(dname)
        out += [t for t in dist_tops.get(dname, []) if t.isidentifier()]
        try:
            reqs = md.requires(dname) or []
        except md.PackageNotFoundError:
            continue
        for req in reqs:
            if ";" in req and not _marker_holds(req.split(";", 1)[1]):
                continue
            todo.append(re.match(r"[A-Za-z0-9_.\-]+", req).group(0))
    return list(dict.fromkeys(out))


def _marker_holds(marker: str) -> bool:
    try:
        from packaging.markers import Marker
    except ImportError:  # no evaluator: a conditional requirement is left out
        return False
    try:
        return Marker(marker.strip()).evaluate({"extra": ""})
    except Exception:  # noqa: BLE001 - a marker we cannot read: left out
        return False


def package_binds(names, *, closure: bool = True) -> tuple[str, ...]:
    """The directories that make installed top-level packages importable in the sandbox (its
    site-packages are hidden): the package and a sibling `NAME.libs` of bundled shared libraries
    (numpy's wheels keep OpenBLAS there), and (`closure`) their requirements'
    (`package_closure`). ValueError naming a package that is not installed."""
    import importlib.util

    if isinstance(names, str) or not all(isinstance(n, str) and n.isidentifier() for n in names):
        raise ValueError(f"packages must be a list of package names, got {names!r}"[:200])
    if closure and names:
        names = package_closure(names)
    out: list[str] = []
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None or not (spec.submodule_search_locations or spec.origin):
            raise ValueError(f"packages: {name!r} is not installed for {sys.executable}")
        for d in list(spec.submodule_search_locations or []) or [spec.origin]:
            out += [p for p in (os.path.realpath(d), os.path.realpath(d) + ".libs") if os.path.exists(p)]
    return tuple(dict.fromkeys(out))


def refusal(error: dict) -> str:
    """One line for a result the sandbox refused to grade."""
    return (f"the code sandbox refuses to grade: missing layer: {error.get('layer')} "
            f"({error.get('step')}: {error.get('error')}); set config sandbox_allow_weak_isolation=True "
            "to grade with weaker isolation on this machine (docs/sandbox.md)")


def run_program(
    source: str,
    stdin: str = "",
    limits: SandboxLimits | None = None,
    *,
    extra_binds: tuple[str, ...] = (),
    allow_weak_isolation: bool | None = None,
    seccomp: bool = True,
    harness: tuple[str, Dialog] | None = None,
) -> RunResult:
    """Run Python `source` with `stdin`; never raises for program misbehaviour.

    extra_binds: host files or directories the program may read (bound read-only at the same path).
    allow_weak_isolation: None reads the switch from the environment (`configure`).
    harness: (mode, dialog) runs `source` under `sandbox_harness` (assert tests, see `grading`).
    """
    if not isinstance(source, str) or not isinstance(stdin, str):
        raise TypeError(f"source and stdin must be str, got {type(source).__name__}/{type(stdin).__name__}")
    for p in extra_binds:
        if not isinstance(p, str) or not os.path.isabs(p) or not os.path.exists(p):
            raise ValueError(f"sandbox extra_binds: {p!r} must be an existing absolute path")
    limits = limits or SandboxLimits()
    weak = weak_isolation_allowed() if allow_weak_isolation is None else allow_weak_isolation
    if weak and _UNAVAILABLE:
        return _weak(source, stdin, limits, _UNAVAILABLE[0], seccomp, harness)
    res = _bwrap.run(source, stdin, limits, extra_binds=tuple(extra_binds), seccomp=seccomp, harness=harness)
    if res.status != "sandbox_error" or res.error.get("layer") not in _EXCUSABLE:
        return res
    if not weak:
        res.stderr_tail = (refusal(res.error) + "\n" + res.stderr_tail)[:2000]
        return res
    _UNAVAILABLE.append(res.error)
    if harness:
        harness[1].restart()
    return _weak(source, stdin, limits, res.error, seccomp, harness)


def _weak(source, stdin, limits, why: dict, seccomp: bool, harness) -> RunResult:
    warn_once(f"code sandbox: weaker isolation allowed by the switch: {why.get('layer')} unavailable "
              f"({why.get('step')}: {why.get('error')}); programs see the host's filesystem "
              "(docs/sandbox.md)")
    res = weak_isolation.run_program(source, stdin, limits, seccomp=seccomp, harness=harness)
    res.isolation = dict(res.isolation, backend="namespaces", allowlisted_root=False, weak=True,
                         missing_layer=why.get("layer"), why=f"{why.get('step')}: {why.get('error')}")
    return res
