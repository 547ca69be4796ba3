import subprocess
import sys


def test_python_dash_m_streamfit_is_the_streamfit_command(tmp_path):
    """`python -m streamfit` (streamfit/__main__.py) runs the command line under its own name,
    with its exit status, from a folder other than the repository."""
    run = [sys.executable, "-m", "streamfit"]
    done = subprocess.run([*run, "train", "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("Usage: streamfit train [OPTIONS] STORE")
    done = subprocess.run(
        [*run, "ingest", "missing.csv", "--out", "s.zarr"], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 2 and done.stderr.strip() == "error: missing.csv: no such file"
