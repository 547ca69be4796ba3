"""What every solver provides, and the registry the CLI and config look solvers up in."""

from __future__ import annotations

import types
import typing
from typing import ClassVar, Literal

import annotated_types
from pydantic import BaseModel, ConfigDict, Field
from pydantic.fields import FieldInfo

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
    lam: float = Field(1e-4, description="λ, the weight of the penalty")
    tol: float = Field(1e-4, description="tolerance of the stopping test")
    max_iter: int = Field(50, description="cap on the iterations")
    random_state: int = Field(0, ge=0, description="seed of the solver's random draws (a non-negative integer)")

    def model_settings(self) -> dict:
        """The parameters that determine the model: all but those declared with
        `json_schema_extra={"affects_model": False}` (how the work is spread, such as threads).
        A checkpoint records these, and resume requires them unchanged."""
        execution = {name for name, f in type(self).model_fields.items()
                     if isinstance(f.json_schema_extra, dict) and f.json_schema_extra.get("affects_model") is False}
        return self.model_dump(exclude=execution)


_BOUNDS = ((annotated_types.Ge, ">="), (annotated_types.Gt, ">"), (annotated_types.Le, "<="), (annotated_types.Lt, "<"))


def allowed_values(field: FieldInfo) -> str:
    """What a parameter accepts, in words: "one of identity, softmax", "int >= 1",
    "float > 0, or None", "true or false"."""
    kinds = typing.get_args(field.annotation) if isinstance(field.annotation, types.UnionType) else (field.annotation,)
    words = []
    for kind in kinds:
        if kind is type(None):
            continue
        if typing.get_origin(kind) is Literal:
            words.append("one of " + ", ".join(str(v) for v in typing.get_args(kind)))
        elif kind is bool:
            words.append("true or false")
        else:
            bounds = [f"{sign} {getattr(m, next(iter(type(m).__dataclass_fields__)))}"
                      for m in field.metadata for cls, sign in _BOUNDS if isinstance(m, cls)]
            words.append(" ".join([kind.__name__, ", ".join(bounds)]).strip())
    return ", or ".join(words) + (", or None" if type(None) in kinds else "")


def parameter_lines(params: type[SolverParams]) -> list[str]:
    """One line per parameter, the text of `streamfit train --list-solvers`:
    `name (default D) [allowed values]: description`."""
    return [f"{name} (default {f.default}) [{allowed_values(f)}]: {f.description}"
            for name, f in params.model_fields.items()]


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
