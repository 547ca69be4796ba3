"""Solvers, one module per method; each registers itself in SOLVERS when imported (below)."""

from streamfit.solvers import bcd, fbpd, multiboost, ppdsparse, stagewise
from streamfit.solvers.base import SOLVERS, Solver, SolverParams, register_solver

__all__ = [
    "SOLVERS",
    "Solver",
    "SolverParams",
    "bcd",
    "fbpd",
    "get_solver",
    "multiboost",
    "ppdsparse",
    "register_solver",
    "stagewise",
]


def get_solver(name: str) -> type[Solver]:
    from streamfit.errors import ConfigError

    if name not in SOLVERS:
        raise ConfigError(f"unknown solver {name!r}; available: {', '.join(sorted(SOLVERS)) or 'none'}")
    return SOLVERS[name]
