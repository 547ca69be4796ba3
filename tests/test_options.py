"""streamfit.options: a dataclass field's Option makes the YAML model; merge is the precedence rule."""

import datetime
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from streamfit.config import parse_duration
from streamfit.errors import ConfigError
from streamfit.options import (
    check_values,
    config_model,
    declared,
    distinct_names,
    format_bytes,
    merge,
    option,
    parse_bytes,
)


@dataclass
class Job:
    name: str = option(help="what to call it")
    workers: int | None = option(None, "worker processes", ge=0)
    timeout: float = option(60.0, "seconds to wait", gt=0)
    limit: float | None = option(None, "a duration", parse=parse_duration)
    settings: dict = option(default_factory=dict, help="free-form settings", flag="")
    hidden: bool = option(False, "not a YAML key", in_config=False)
    progress: bool = True  # no Option: not declared


def test_declared_lists_the_fields_with_an_option_in_order():
    assert [d.name for d in declared(Job)] == ["name", "workers", "timeout", "limit", "settings", "hidden"]
    name, workers = declared(Job)[:2]
    assert name.required and not workers.required and workers.type == int | None


def test_the_yaml_model_has_the_fields_names_defaults_bounds_and_help():
    Model = config_model("Model", Job, "A job in YAML.")
    assert list(Model.model_fields) == ["name", "workers", "timeout", "limit", "settings"]
    assert Model.__doc__ == "A job in YAML."
    m = Model(name="x")
    assert (m.workers, m.timeout, m.limit, m.settings) == (None, 60.0, None, {})
    assert Model.model_fields["timeout"].description == "seconds to wait"
    assert Model(name="x", limit="90m").limit == 5400.0
    for bad in ({"timeout": 0}, {"workers": -1}, {"limit": "soon"}, {"hidden": True}, {"nosuch": 1}, {}):
        with pytest.raises(ValidationError):
            Model(**{"name": "x", **bad} if bad else {})
    with pytest.raises(ValidationError, match=r"limit 'soon': expected a positive duration"):
        Model(name="x", limit="soon")


def test_a_layer_model_leaves_every_key_unset_and_keeps_the_bounds():
    Layer = config_model("Layer", Job, "Overrides.", unset_is_none=True)
    layer = Layer()
    assert all(getattr(layer, name) is None for name in Layer.model_fields)
    with pytest.raises(ValidationError, match="greater than 0"):
        Layer(timeout=0)


def test_only_picks_fields():
    assert list(config_model("Few", Job, "Few.", only=("name", "limit")).model_fields) == ["name", "limit"]


def test_merge_command_line_beats_file_beats_default():
    file = {"name": "file", "workers": 2, "timeout": 5.0, "settings": {"a": 1, "b": 2}, "out": "not a field"}
    command_line = {"workers": None, "timeout": 7.0, "settings": {"b": 3}}
    job = merge(Job, file, command_line, by_key=("settings",))
    assert job == Job(name="file", workers=2, timeout=7.0, limit=None, settings={"a": 1, "b": 3})
    assert merge(Job, {"name": "x"}) == Job(name="x")  # nothing set: the defaults
    assert merge(Job, {"name": "x", "settings": {"a": 1}}, {"settings": {"b": 2}}).settings == {"b": 2}  # not by key


@pytest.mark.parametrize(
    "text, n",
    [("1048576", 1 << 20), (4096, 4096), ("64MiB", 64 << 20), ("64M", 64 << 20), ("2 kb", 2048), ("1TiB", 1 << 40)],
)
def test_parse_bytes_reads_binary_units(text, n):
    assert parse_bytes(text, "--max-record-bytes") == n
    assert parse_bytes(format_bytes(n).replace(" bytes", ""), "x") == n


@pytest.mark.parametrize("text", ["0", "-1", "lots", "1.5M", "1PiB", True])
def test_parse_bytes_refuses_other_text_naming_the_option(text):
    with pytest.raises(ConfigError, match=r"^--max-input-bytes .*: expected a positive size such as"):
        parse_bytes(text, "--max-input-bytes")


@dataclass
class Checked:
    names: list[str] | None = option(None, "distinct names", check=distinct_names)
    count: int = option(1, "at least one", ge=1)
    share: float = option(0.5, "above zero", gt=0)

    def __post_init__(self):
        check_values(self)


def test_a_check_and_the_bounds_hold_in_yaml_and_from_python():
    """The same values are refused by the YAML model and by the dataclass (the command line: test_cli)."""
    Model = config_model("Checked", Checked, "doc")
    for bad, fragment in (
        ({"names": ["a", "a"]}, "names 'a,a': 'a' is listed twice"),
        ({"count": 0}, "count 0: must be at least 1"),
        ({"share": 0.0}, "share 0.0: must be greater than 0"),
    ):
        with pytest.raises(ConfigError, match=fragment):
            Checked(**bad)
        with pytest.raises(ValidationError):
            Model(**bad)
    assert Checked(names=["a", "b"], count=1, share=1e-9).names == ["a", "b"]
    assert Model(names=["a", "b"]).names == ["a", "b"]


@settings(deadline=None)  # a slow example on a loaded machine is not a failure
@given(st.lists(st.text(max_size=3), max_size=6))
def test_distinct_names_refuses_exactly_a_repeated_or_empty_name(names):
    good = "" not in names and len(set(names)) == len(names)
    try:
        distinct_names(names, "--classes")
    except ConfigError as e:
        assert not good and str(e).startswith("--classes ") and "\n" not in str(e)
    else:
        assert good


@settings(deadline=None)  # its first example imports the CLI and yaml: 289 ms at load 14 on 2 cores (session 18)
@given(st.text(max_size=40))
def test_key_value_pairs_are_plain_yaml_or_one_config_error_line(value):
    """Whatever follows KEY=, the result is a plain value (never an object a tag builds) or a ConfigError."""
    from streamfit.cli import _parse_key_values

    try:
        parsed = _parse_key_values([f"key={value}"], "--option")
    except ConfigError as e:
        assert str(e).startswith("--option ") and "key=" in str(e) and "\n" not in str(e)
        return
    plain = (str, int, float, bool, type(None), list, dict, datetime.date)
    assert isinstance(parsed["key"], plain)


def test_yaml_tags_are_refused_never_run(tmp_path, monkeypatch):
    from streamfit.cli import _parse_key_values

    monkeypatch.chdir(tmp_path)
    for tag in ('!!python/object/apply:os.system ["touch owned"]', "!!python/name:os.system", "!!binary xx"):
        with pytest.raises(ConfigError, match="not a plain YAML value"):
            _parse_key_values([f"k={tag}"], "-p")
    assert not (tmp_path / "owned").exists()
