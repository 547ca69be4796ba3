"""Solvers, one module per method; each registers itself in SOLVERS (and its model kind in
streamfit.model.MODEL_KINDS) when imported. A command imports only what it runs: `get_solver`
the one solver it trains, `import_model_kind` the one model kind it loads (importing all five
solvers costs a second of a small job's start-up: numba, the objectives, scipy.optimize);
`all_solvers` imports every one (help texts, the list of solvers, tests)."""

import importlib

from streamfit.solvers.base import SOLVERS, Solver, SolverParams, register_solver

__all__ = [
    "MODEL_KIND_MODULES",
    "SOLVER_NAMES",
    "SOLVERS",
    "Solver",
    "SolverParams",
    "all_solvers",
    "get_solver",
    "import_model_kind",
    "register_solver",
]

# every solver's name, which is also the name of its module in this package
SOLVER_NAMES = ("bcd", "fbpd", "multiboost", "ppdsparse", "stagewise")
# model kind -> the module of this package that registers it (the kind "linear" is streamfit.model's)
MODEL_KIND_MODULES = {"boosted_stumps": "multiboost", "ppdsparse": "ppdsparse", "stagewise": "stagewise"}


def get_solver(name: str) -> type[Solver]:
    """The solver class `name`, its module imported; ConfigError for a name that is no solver's."""
    from streamfit.errors import ConfigError

    if name not in SOLVERS and name not in SOLVER_NAMES:
        raise ConfigError(f"unknown solver {name!r}; available: {', '.join(SOLVER_NAMES)}")
    if name not in SOLVERS:
        importlib.import_module(f"{__name__}.{name}")
    return SOLVERS[name]


def all_solvers() -> dict[str, type[Solver]]:
    """SOLVERS with every solver module imported: name -> class."""
    for name in SOLVER_NAMES:
        get_solver(name)
    return SOLVERS


def import_model_kind(kind: str) -> None:
    """Import the solver module that registers model kind `kind`, if a solver's (else nothing)."""
    module = MODEL_KIND_MODULES.get(kind)
    if module is not None:
        importlib.import_module(f"{__name__}.{module}")
