"""The typed config schema is the one source of every field's default: the ConfigDict that
configs/*.py override, the dataclasses and `TrainConfig.from_config` (which fills the fields a
checkpoint's saved config lacks) all give the same value, and bad values name the field."""

import dataclasses
import glob
import importlib.util
import inspect
import os

import pytest

from tseeds_jax.rl import config as config_lib
from tseeds_jax.rl.config import ConfigValueError, TrainConfig, default_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(glob.glob(os.path.join(ROOT, "configs", "*.py")))


def _plain(x):
    """Tuples as lists and nested dicts as dicts, as a ConfigDict's to_dict() and JSON give."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, tuple | list):
        return [_plain(v) for v in x]
    return x


def _leaves(d: dict, cfg, prefix=()):
    """Dotted paths of the fields: a sub-dict is a section when `cfg` holds a dataclass there,
    else one field (a dict-valued field such as model.arch or mesh)."""
    for k, v in d.items():
        sub = getattr(cfg, k)
        if isinstance(v, dict) and dataclasses.is_dataclass(sub):
            yield from _leaves(v, sub, prefix + (k,))
        else:
            yield prefix + (k,)


def _get(cfg, path):
    for k in path:
        cfg = getattr(cfg, k)
    return cfg


def test_every_field_has_one_default():
    """A field missing from the config given to `from_config` (an older checkpoint's saved
    config, a hand-written dict) takes the value `default_config()` gives it."""
    full = default_config().to_dict()
    reference = TrainConfig.from_config(default_config())
    disagree = []
    for path in _leaves(full, reference):
        d = default_config().to_dict()
        node = d
        for k in path[:-1]:
            node = node[k]
        expected = node.pop(path[-1])
        try:
            got = _get(TrainConfig.from_config(d), path)
        except Exception as e:  # noqa: BLE001 -- a field without a default is a finding here
            disagree.append(f"{'.'.join(path)}: no default ({type(e).__name__}: {e})")
            continue
        if _plain(got) != _plain(expected):
            disagree.append(f"{'.'.join(path)}: default_config {expected!r}, from_config {got!r}")
    assert not disagree, "fields whose defaults disagree:\n" + "\n".join(disagree)


def test_configdict_dataclass_and_from_config_agree():
    assert _plain(dataclasses.asdict(TrainConfig())) == _plain(default_config().to_dict())
    assert TrainConfig.from_config(default_config()) == TrainConfig()
    # the checkpointing defaults that governed runs started from a config file
    cfg = TrainConfig()
    assert (cfg.checkpoint_async, cfg.checkpoint_every_minutes, cfg.checkpoint_continuous_s) \
        == (True, 15.0, 120.0)


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_shipped_config_round_trips_through_a_checkpoint_meta(path):
    """configs/*.py validate, and the JSON-able dict a checkpoint stores (dataclasses.asdict)
    builds the same config again (rl/state_io.load_run)."""
    spec = importlib.util.spec_from_file_location("shipped_config", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cfg = TrainConfig.from_config(mod.get_config())
    assert TrainConfig.from_config(_plain(dataclasses.asdict(cfg))) == cfg


def test_every_field_has_a_comment():
    """Each schema field carries a comment (on its line or the line above), each section a
    docstring: the schema is where a newcomer reads what a field means."""
    missing = []
    sections = {f.name: type(getattr(TrainConfig(), f.name)) for f in dataclasses.fields(TrainConfig)
                if dataclasses.is_dataclass(getattr(TrainConfig(), f.name))}
    for cls in [TrainConfig, *sections.values()]:
        if not (cls.__doc__ or "").strip():
            missing.append(cls.__name__)
        lines = inspect.getsource(cls).splitlines()
        names = {f.name for f in dataclasses.fields(cls)} - (set(sections) if cls is TrainConfig
                                                             else set())
        for i, line in enumerate(lines):
            name = line.strip().split(":")[0]
            if line.startswith("    ") and not line.startswith("     ") and name in names \
                    and "#" not in line and not lines[i - 1].strip().startswith("#"):
                missing.append(f"{cls.__name__}.{name}")
    assert not missing, f"fields without a comment: {missing}"


@pytest.mark.parametrize("section,key,value,words", [
    ("rollout", "group_size", "4", "config.rollout.group_size='4': must be an integer"),
    ("rollout", "temperature", True, "config.rollout.temperature=True: must be a number"),
    ("rollout", "bogus", 1, "config.rollout.bogus=1: no such field"),
    ("seeds", "truncation", "middle", "config.seeds.truncation='middle': unknown truncation"),
])
def test_bad_value_names_the_field_and_value(section, key, value, words):
    d = default_config().to_dict()
    d[section][key] = value
    with pytest.raises(ConfigValueError) as e:
        TrainConfig.from_config(d)
    assert words in str(e.value)


@pytest.mark.parametrize("override,words", [
    ("--config.rollout.top_p=2.0", "config.rollout.top_p=2.0: must be in (0, 1]"),
    ("--config.optim.grad_reduce=never", "config.optim.grad_reduce='never'"),
    ("--config.rollout.no_such_field=1", "rollout.no_such_field"),
])
def test_bad_override_names_the_field_and_value(override, words, capsys):
    from tseeds_jax.rl import train_cli

    try:
        code = train_cli.main(["--config", os.path.join(ROOT, "configs", "tiny_dapo.py"),
                               override])
    except SystemExit as e:
        code = e.code
    assert code == 2
    assert words in capsys.readouterr().err


def test_sections_are_exported_where_they_were():
    for name in ("RolloutConfig", "SeedsConfig", "LossConfig", "OptimConfig", "AdvantageConfig",
                 "HardwareConfig", "OffPolicyConfig", "StaleConfig"):
        assert dataclasses.is_dataclass(getattr(config_lib, name))
