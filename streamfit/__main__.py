"""`python -m streamfit`: the `streamfit` command (streamfit.cli), for an environment whose
scripts folder is not on PATH."""

from streamfit.cli import main

if __name__ == "__main__":
    main(prog_name="streamfit")
