"""streamfit._jit.kernel: a kernel whose compiled code numba can cache nowhere is one line naming
the folders numba tried and NUMBA_CACHE_DIR, not numba's RuntimeError."""

import pytest

from streamfit._jit import kernel
from streamfit.errors import OutputError


def _function_from(filename: str):
    """A function whose code says it comes from `filename` (numba's cache locators look there)."""
    namespace: dict = {}
    exec(compile("def add_one(x):\n    return x + 1.0\n", filename, "exec"), namespace)
    return namespace["add_one"]


def test_a_kernel_numba_can_cache_nowhere_is_one_line_naming_numba_cache_dir(tmp_path):
    # a source file that is not on disk: every locator of numba declines it, as each declines a
    # read-only installation's folder when the home folder and NUMBA_CACHE_DIR are not writable
    with pytest.raises(OutputError) as raised:
        kernel()(_function_from(str(tmp_path / "gone" / "kernels.py")))
    message = str(raised.value)
    assert message.startswith(f"numba cannot cache the compiled code of {tmp_path / 'gone' / 'kernels.py'}: ")
    assert str(tmp_path / "gone" / "__pycache__") in message
    assert "set NUMBA_CACHE_DIR to a folder this user can write" in message
    assert "\n" not in message


def test_a_kernel_from_a_file_on_disk_is_defined_and_runs(tmp_path):
    """The control: the same function from a file numba can cache beside (or in NUMBA_CACHE_DIR)."""
    source = tmp_path / "kernels.py"
    source.write_text("def add_one(x):\n    return x + 1.0\n")
    assert kernel()(_function_from(str(source)))(1.0) == 2.0
