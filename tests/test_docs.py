"""The documentation against the code: every `streamfit` command line in README.md and
docs/walkthrough.md uses options its command has, with solver parameters (-p KEY=VALUE) that
the solver accepts; every command's --help runs, explains each option and shows an example;
and a solver parameter the docs call the default is the default of the solver's Params."""

import os
import re
import shlex

import click
import pytest
from click.testing import CliRunner

from streamfit.cli import _parse_key_values, main
from streamfit.solvers import all_solvers

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ("README.md", "docs/walkthrough.md", "docs/architecture.md")
RUNNABLE_DOCS = ("README.md", "docs/walkthrough.md")


def _text(name: str) -> str:
    with open(os.path.join(REPO, name), encoding="utf-8") as f:
        return f.read()


def _command_lines(text: str) -> list[str]:
    """The `streamfit ...` lines of the fenced blocks: continuation lines joined, comments and a
    `$ ` prompt dropped."""
    lines = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith("streamfit "):
                lines.append(line.split(" #", 1)[0])
    return lines


def _inline_command_lines(text: str) -> list[str]:
    """The `streamfit ...` spans of the prose (a placeholder command, `streamfit COMMAND --help`, left out)."""
    spans = (" ".join(span.split()) for span in re.findall(r"`(streamfit [^`]+)`", text))
    return [span for span in spans if not span.split()[1].isupper()]


def _flags(command: click.Command) -> set[str]:
    options = (opt for p in command.params if isinstance(p, click.Option) for opt in (*p.opts, *p.secondary_opts))
    return {"--help", "-h", *options}


def _check_line(line: str) -> None:
    """The line's options exist where it puts them (before the command: main's), and its solver
    parameters are valid values of the solver's Params."""
    words = shlex.split(line)[1:]
    before = []
    while words and words[0].startswith("-"):  # main's options (--log-file FILE takes a value)
        word = words.pop(0)
        before.append(word)
        if word in ("--log-file", "--log-format"):
            words.pop(0)
    assert set(before) <= _flags(main), line
    assert words and words[0] in main.commands, line
    command = main.commands[words[0]]
    flags = _flags(command)
    params, solver = [], "stagewise"
    for i, word in enumerate(words[1:], start=1):
        if word.startswith("-") and not re.fullmatch(r"-?\d[\d.e-]*", word):
            assert word.split("=", 1)[0] in flags, f"{line}: {word} is not an option of streamfit {words[0]}"
            if word in ("-p", "--param"):
                params.append(words[i + 1])
            if word == "--solver":
                solver = words[i + 1]
    if params:
        values = _parse_key_values(params, "-p")
        all_solvers()[solver].Params(**values)  # raises for an unknown key or a bad value


@pytest.mark.parametrize("doc", DOCS)
def test_every_documented_command_line_uses_real_options_and_parameters(doc):
    blocks, inline = _command_lines(_text(doc)), _inline_command_lines(_text(doc))
    if doc in RUNNABLE_DOCS:
        assert len(blocks) >= 10, doc  # the blocks were found
    assert len(blocks + inline) >= 10, doc  # architecture.md: its inline command lines
    for line in blocks + inline:
        _check_line(line)


def test_the_line_check_refuses_what_the_command_refuses():
    """The check above can fail: an unknown option, a parameter of another solver, a bad value."""
    for bad in (
        "streamfit train s.zarr --out r/ --no-such-option",
        "streamfit train s.zarr --out r/ -p kappa=5",  # ppdsparse's, not stagewise's
        "streamfit train s.zarr --solver bcd --out r/ -p penalty=total",
        "streamfit evaluate r/ s.zarr --top-k 3",
        "streamfit --no-such-global train s.zarr --out r/",
    ):
        with pytest.raises((AssertionError, ValueError)):  # an unknown option; a ValidationError
            _check_line(bad)
    _check_line("streamfit -q train s.zarr --solver ppdsparse -p kappa=5 -p lam=None --out r/")


def test_every_command_help_runs_explains_each_option_and_shows_an_example():
    runner = CliRunner()
    top = runner.invoke(main, ["--help"])
    assert top.exit_code == 0, top.output
    for name in main.commands:  # every subcommand is listed at the top, its line whole (not cut with "...")
        listed = re.search(rf"^  {name}\s+(.*)$", top.output, flags=re.M)
        assert listed and not listed[1].endswith("..."), name
    assert "streamfit ingest " in top.output and "streamfit train " in top.output
    for name, command in main.commands.items():
        result = runner.invoke(main, [name, "--help"])
        assert result.exit_code == 0, (name, result.output)
        assert f"streamfit {name} " in result.output, f"streamfit {name} --help shows no example"
        for p in command.params:
            if isinstance(p, click.Option):
                p.get_help_record(click.Context(command))  # a lazily written help (train's -p) is filled in
                assert p.help and p.help.strip(), f"streamfit {name} {p.opts[0]} has no help"


def _documented_defaults(text: str) -> list[tuple[str, str]]:
    """(parameter, value) of the statements `name=value` (the default ...) / (`name=value`, the
    default) / default `name=value` / by default (`name=value`)."""
    value = r'`(?:-p )?([a-z_]+) ?= ?"?([\w./-]+)"?`'
    found = re.findall(value + r"\)?,? \(?(?:the|its) default", text)
    found += re.findall(r"[Dd]efault (?:is )?\(?" + value, text)
    found += re.findall(r"by default \(" + value, text)
    return found


def test_the_defaults_the_docs_state_are_the_solvers_defaults():
    solvers = all_solvers()
    defaults: dict[str, set[str]] = {}
    for solver in solvers.values():
        for name, field in solver.Params.model_fields.items():
            defaults.setdefault(name, set()).add(str(field.default))
    checked = 0
    for doc in DOCS:
        for name, value in _documented_defaults(_text(doc)):
            if name not in defaults:
                continue
            assert value in defaults[name], (
                f"{doc}: `{name}={value}` is called the default; the code's: {defaults[name]}"
            )
            checked += 1
    assert checked >= 5  # the statements were found
    assert _documented_defaults("`penalty=stage` (the default") == [("penalty", "stage")]


def test_the_readmes_python_examples_run_as_written(tmp_path, monkeypatch):
    """README.md's ```python blocks run as written: the first on the store and run the README's
    commands above it make (digits, `--no-hash`, stagewise; in process here), the second (the
    estimators) with X, y, X_test, y_test from those stores; the names they print are the model's."""
    blocks = re.findall(r"^```python\n(.*?)^```", _text("README.md"), flags=re.S | re.M)
    assert len(blocks) == 2, "a ```python block was added or removed: run it here too"
    monkeypatch.chdir(tmp_path)
    digits = os.path.join(REPO, "pipelines", "data", "digits.svm.gz")
    for args in (
        [
            "ingest",
            digits,
            "--no-hash",
            "--out",
            "digits.zarr",
            "--test-size",
            "0.25",
            "--test-out",
            "digits-test.zarr",
        ],
        [
            "train",
            "digits.zarr",
            "--solver",
            "stagewise",
            "-p",
            "generator=rff",
            "-p",
            "n_passes=2",
            "--out",
            "run/",
            "--n-workers",
            "0",
        ],
    ):
        result = CliRunner().invoke(main, args, catch_exceptions=False)
        assert result.exit_code == 0, result.output
    first: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), first)
    model, X, y = first["model"], first["X"], first["y"]
    assert (model.predict(X) == model.classes_[y]).mean() > 0.95  # the README's comparison, names with names
    import streamfit

    X_test, y_test = streamfit.open_store("digits-test.zarr").to_scipy()
    second = {"X": X, "y": y, "X_test": X_test, "y_test": y_test}
    exec(compile(blocks[1], "README.md", "exec"), second)
    assert second["clf"].score(X_test, y_test) > 0.95


def test_every_module_is_named_in_the_architecture():
    """docs/architecture.md names every module of the package: by its path (`streamfit/x.py`,
    `ingest/x.py`, `x.py`), its dotted or bare module name in backticks, or a row of its package
    folder (`streamfit/store/`, ...); a solver's `NAME_kernels` is its solver's "kernels beside it"."""
    text = _text("docs/architecture.md")
    rows = re.findall(r"^\| `(streamfit/[\w/]+/)` \|", text, flags=re.M)
    assert "streamfit/solvers/" in rows and "streamfit/ingest/sources/" in rows  # the rows were found
    missing = []
    for folder, _, files in os.walk(os.path.join(REPO, "streamfit")):
        for name in files:
            if not name.endswith(".py") or name == "__init__.py":
                continue
            path = os.path.relpath(os.path.join(folder, name), REPO)
            module = path[: -len(".py")].replace(os.sep, ".")
            stem = name[: -len(".py")]
            named = (
                path in text
                or path.removeprefix("streamfit/") in text
                or f"`{module}`" in text
                or f"`{stem}`" in text
                or any(path.startswith(row) for row in rows)
            )
            if not named:
                missing.append(path)
    assert not missing, f"docs/architecture.md does not name {missing}: give each a line in its Modules table"


def test_every_tool_is_named_in_the_readme():
    """README.md's Benchmarks section names every script of tools/ (a new one gets its line)."""
    text = _text("README.md")
    tools = sorted(name for name in os.listdir(os.path.join(REPO, "tools")) if name.endswith((".py", ".sh")))
    assert len(tools) >= 30  # the folder was read
    missing = [name for name in tools if f"tools/{name}" not in text]
    assert not missing, f"README.md does not name {missing}"
    named = set(re.findall(r"tools/(\w+\.(?:py|sh))", text))
    assert named <= set(tools), f"README.md names tools that do not exist: {sorted(named - set(tools))}"


def test_every_default_the_readme_states_for_a_flag_or_variable_is_the_code_s():
    """README's "`--flag` … (default X)" and "`STREAMFIT_…` (default X)": X is what the command's
    --help shows (printed from the declarations) and what the environment module applies."""
    from streamfit import environment, shutdown

    variables = {**environment.MEBIBYTES, shutdown.GRACE_ENV: shutdown.DEFAULT_GRACE_S}
    helps: dict[str, set[str]] = {}
    for command in main.commands.values():
        for p in command.params:
            if isinstance(p, click.Option) and p.help:
                for flag in p.opts:
                    helps.setdefault(flag, set()).update(re.findall(r"[(\[]default:? ([\w.]+)", p.help))
    pattern = r"`(--[\w-]+|STREAMFIT_\w+)`[^`()]{0,40}?[(,] ?default:? ([\w.]+)"
    stated = re.findall(pattern, " ".join(_text("README.md").split()))
    assert len(stated) >= 6, stated  # the statements were found
    for name, value in stated:
        if name.startswith("--"):
            assert value in helps[name], (name, value, helps[name])
        else:
            assert value == f"{variables[name]:g}", (name, value, variables[name])
