"""streamfit.environment: the cache sizes set by environment variables, and the one-line refusal
of a bad value by every command (even one that never imports the module reading it)."""

import pytest
from click.testing import CliRunner

from streamfit import checkpoint, environment
from streamfit.cli import main
from streamfit.errors import ConfigError
from streamfit.store import store


def test_the_modules_read_their_sizes_with_the_declared_defaults(monkeypatch):
    # what the store and checkpoint modules took at import, from this process's environment
    assert store.CHUNK_CACHE_BYTES == environment.mebibytes("STREAMFIT_CHUNK_CACHE_MB")
    assert checkpoint.STATE_CACHE_BYTES == environment.mebibytes("STREAMFIT_STATE_CACHE_MB")
    for name in environment.MEBIBYTES:
        monkeypatch.delenv(name, raising=False)
    assert environment.mebibytes("STREAMFIT_CHUNK_CACHE_MB") == 512 * 2**20
    assert environment.mebibytes("STREAMFIT_STATE_CACHE_MB") == 256 * 2**20
    environment.check()


@pytest.mark.parametrize("text, mib", [("0", 0), ("1.5", 1.5), (" 64 ", 64), ("", 512), ("1e3", 1000)])
def test_a_number_of_mib_at_least_zero_is_taken(monkeypatch, text, mib):
    monkeypatch.setenv("STREAMFIT_CHUNK_CACHE_MB", text)
    assert environment.mebibytes("STREAMFIT_CHUNK_CACHE_MB") == int(mib * 2**20)
    environment.check()


@pytest.mark.parametrize("text", ["lots", "-1", "nan", "inf", "1e400", "64MiB"])
def test_anything_else_gives_the_default_and_check_names_it(monkeypatch, text):
    monkeypatch.setenv("STREAMFIT_STATE_CACHE_MB", text)
    assert environment.mebibytes("STREAMFIT_STATE_CACHE_MB") == 256 * 2**20
    with pytest.raises(ConfigError, match=r"^STREAMFIT_STATE_CACHE_MB=.*: must be a number of MiB >= 0 .*unset it"):
        environment.check()


def test_every_command_refuses_a_bad_size_in_one_line(tmp_path):
    """inspect imports no checkpoint module, and still refuses a bad STREAMFIT_STATE_CACHE_MB."""
    for name in environment.MEBIBYTES:
        result = CliRunner().invoke(main, ["inspect", str(tmp_path / "none.zarr")], env={name: "lots"})
        assert result.exit_code == 2, result.output
        mib = f"{environment.MEBIBYTES[name]:g}"
        assert result.output == f"error: {name}='lots': must be a number of MiB >= 0 (e.g. {mib}); unset it for {mib}\n"
