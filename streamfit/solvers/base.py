"""What every solver provides, and the registry the CLI and config look solvers up in."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from streamfit.checkpoint import Checkpointer
from streamfit.engine import Engine
from streamfit.model import Model
from streamfit.runlog import MetricsLog
from streamfit.store import ChunkSource

SOLVERS: dict[str, type[Solver]] = {}


class SolverParams(BaseModel):
    """Parameters shared by every solver. `lam` is λ with the loss averaged over samples (1/n),
    as the papers write their objectives. No float parameter may be NaN or infinite."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    lam: float = 1e-4
    tol: float = 1e-4
    max_iter: int = 50
    random_state: int = Field(0, ge=0)

    def model_settings(self) -> dict:
        """The parameters that determine the model: all but those declared with
        `json_schema_extra={"affects_model": False}` (how the work is spread, such as threads).
        A checkpoint records these, and resume requires them unchanged."""
        execution = {name for name, f in type(self).model_fields.items()
                     if isinstance(f.json_schema_extra, dict) and f.json_schema_extra.get("affects_model") is False}
        return self.model_dump(exclude=execution)


class Solver:
    """A training method: `fit` streams a ChunkSource through an Engine, saving a checkpoint at
    every step boundary and resuming from the newest one when asked."""

    name: ClassVar[str]
    Params: ClassVar[type[SolverParams]] = SolverParams

    def __init__(self, params: SolverParams):
        self.params = params

    def fit(self, source: ChunkSource, *, engine: Engine, checkpointer: Checkpointer, log: MetricsLog,
            resume: bool = False) -> Model:
        raise NotImplementedError


def register_solver(cls):
    SOLVERS[cls.name] = cls
    return cls
