"""Solvers, one module per method; each registers itself in SOLVERS."""

from streamfit.solvers.base import SOLVERS, Solver, SolverParams, register_solver

__all__ = ["SOLVERS", "Solver", "SolverParams", "register_solver", "get_solver"]


def get_solver(name: str) -> type[Solver]:
    from streamfit.errors import ConfigError

    if name not in SOLVERS:
        raise ConfigError(f"unknown solver {name!r}; available: {', '.join(sorted(SOLVERS)) or 'none'}")
    return SOLVERS[name]


from streamfit.solvers import stagewise  # noqa: F401,E402
from streamfit.solvers import ppdsparse  # noqa: F401,E402
from streamfit.solvers import bcd  # noqa: F401,E402
from streamfit.solvers import fbpd  # noqa: F401,E402
