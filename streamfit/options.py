"""Options declared once: a dataclass field carries its help text, bounds and command-line
spelling, and the other surfaces are built from it.

    @dataclass
    class EngineOptions:
        worker_timeout: float = option(60.0, "Seconds without any Dask worker before the run fails", gt=0)

`config_model` makes the pydantic model of a YAML section (same names, defaults, bounds; the
help as its description); `streamfit.cli` makes the click options (`--worker-timeout`) from the
same fields. `merge` is the one rule that joins the layers: command line beats config file
beats default. `check_values`, called by the dataclass's __post_init__, applies the same bounds
and checks to a value set from Python, so every surface refuses the same values.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from streamfit.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Option:
    """How a field is offered besides its Python name, type and default.

    help: one line, the click help and the YAML key's description.
    flag: the command-line flag; None: --name-with-dashes (a bool defaulting to True:
        --no-name-with-dashes, which sets False); "": not a command-line option. short: e.g. "-o".
    metavar, default_text: shown by --help (default_text replaces the default's value there);
        show_default False: the help states the default itself.
    ge, gt: the bound of a number. parse(value, where): turns a text such as "90m" into the value,
        on the command line and in YAML alike; bad text raises ConfigError naming `where` (the
        flag, or the YAML key). check(value, where): raises ConfigError naming `where` for a value
        of the right type that is still unusable (a class listed twice); on every surface.
    off_help: the command-line help of a bool defaulting to True, offered as `--no-NAME`.
    in_config: False: not a YAML key (e.g. `like`, which a pipeline sets itself)."""

    help: str
    flag: str | None = None
    short: str | None = None
    metavar: str | None = None
    default_text: str | None = None
    show_default: bool = True
    ge: float | None = None
    gt: float | None = None
    parse: Callable[[Any, str], Any] | None = None
    check: Callable[[Any, str], None] | None = None
    off_help: str | None = None
    in_config: bool = True


def option(default: Any = dataclasses.MISSING, help: str = "", *, default_factory=dataclasses.MISSING, **spec) -> Any:
    """A dataclass field with its Option (see Option for `spec`)."""
    return dataclasses.field(
        default=default, default_factory=default_factory, metadata={"option": Option(help, **spec)}
    )


@dataclasses.dataclass(frozen=True)
class Declared:
    """One declared field: name, type (resolved annotation), default (MISSING: required), Option."""

    name: str
    type: Any
    default: Any
    option: Option

    @property
    def required(self) -> bool:
        return self.default is dataclasses.MISSING


def declared(cls) -> list[Declared]:
    """The fields of dataclass `cls` that carry an Option, in declaration order."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if "option" not in f.metadata:
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        out.append(Declared(f.name, hints[f.name], default, f.metadata["option"]))
    return out


def config_model(
    name: str, cls, doc: str, *, unset_is_none: bool = False, only: tuple[str, ...] | None = None, **extra_fields
) -> type[BaseModel]:
    """The pydantic model of a YAML section from dataclass `cls`: its fields with `in_config`
    (those named in `only`, when given), same names, types, defaults and bounds, the help as
    description, unknown keys refused. unset_is_none: every key defaults to None, meaning "not
    set here" (a layer that `merge` lays over the defaults). `extra_fields`: further fields, as
    create_model takes them."""
    # Any: create_model's stubs check a ** argument against its named parameters (__base__, ...) too
    fields: dict[str, Any] = {}
    validators: dict[str, Any] = {}
    for d in declared(cls):
        if not d.option.in_config or (only is not None and d.name not in only):
            continue
        kind, default = d.type, d.default
        if unset_is_none:
            kind, default = kind | None, None
        fields[d.name] = (
            kind,
            Field(
                ... if d.required and not unset_is_none else default,
                description=d.option.help,
                ge=d.option.ge,
                gt=d.option.gt,
            ),
        )
        if d.option.parse is not None:
            validators[f"_parse_{d.name}"] = field_validator(d.name, mode="before")(_parser(d.option.parse, d.name))
        if d.option.check is not None:
            validators[f"_check_{d.name}"] = field_validator(d.name, mode="after")(_checker(d.option.check, d.name))
    return create_model(
        name, __config__=ConfigDict(extra="forbid"), __doc__=doc, __validators__=validators, **fields, **extra_fields
    )


def _parser(parse: Callable[[Any, str], Any], key: str):
    def validate(cls, value):
        if value is None:
            return None
        try:
            return parse(value, key)
        except ConfigError as e:  # its message, as pydantic reports a ValueError
            raise ValueError(str(e)) from None

    return classmethod(validate)


def _checker(check: Callable[[Any, str], None], key: str):
    def validate(cls, value):
        if value is not None:
            try:
                check(value, key)
            except ConfigError as e:  # its message, as pydantic reports a ValueError
                raise ValueError(str(e)) from None
        return value

    return classmethod(validate)


def check_values(instance) -> None:
    """ConfigError naming the field unless every declared field of dataclass `instance` within
    its bounds (ge, gt) and passes its check: what the command line and YAML enforce, for a
    value set from Python. None (not set) passes."""
    for d in declared(type(instance)):
        value = getattr(instance, d.name)
        if value is None:
            continue
        o = d.option
        if o.ge is not None and value < o.ge:
            raise ConfigError(f"{d.name} {value!r}: must be at least {o.ge:g}")
        if o.gt is not None and value <= o.gt:
            raise ConfigError(f"{d.name} {value!r}: must be greater than {o.gt:g}")
        if o.check is not None:
            o.check(value, d.name)


def distinct_names(names: list[str], what: str) -> None:
    """ConfigError naming `what` if a name in `names` is empty or listed twice."""
    if any(str(n) == "" for n in names):
        raise ConfigError(f"{what} {','.join(map(str, names))!r}: an empty name; list non-empty names")
    seen: set[str] = set()
    for n in map(str, names):
        if n in seen:
            raise ConfigError(f"{what} {','.join(map(str, names))!r}: {n!r} is listed twice; list each name once")
        seen.add(n)


def merge(cls, *layers: dict, by_key: tuple[str, ...] = ()):
    """An instance of dataclass `cls` from its defaults and `layers`, each a dict of the values set
    at that layer (None: not set there), later layers winning: merge(cls, config_file,
    command_line) is "command line beats config file beats default". Keys that are not fields of
    `cls` are not its business (a section's `out`) and are passed over. Fields named in `by_key`
    are dicts merged key by key (solver parameters from a file, some overridden by -p)."""
    names = {f.name for f in dataclasses.fields(cls)}
    values: dict = {}
    for layer in layers:
        for name, value in layer.items():
            if value is None or name not in names:
                continue
            values[name] = {**values.get(name, {}), **value} if name in by_key else value
    return cls(**values)


_BYTE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_BYTE_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_bytes(text: str | int, what: str) -> int:
    """Bytes in "1048576", "64MiB", "64M" or "1TiB" (units are powers of 1024); a bad value raises
    ConfigError naming `what`."""
    match = _BYTE_SIZE.match(str(text))
    if not match or int(match[1]) <= 0:
        raise ConfigError(f"{what} {text!r}: expected a positive size such as 1048576, 64MiB or 1TiB")
    return int(match[1]) * _BYTE_UNITS[match[2].lower()]


def format_bytes(n: int) -> str:
    """n bytes in the largest binary unit that divides it: 67108864 -> "64 MiB"."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"
