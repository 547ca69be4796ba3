"""streamfit.config: pipeline sections as the ingest and train steps receive them."""

import glob
import os

import pytest

from streamfit.config import load_pipeline, load_train_config
from streamfit.errors import ConfigError
from streamfit.ingest.hashing import HashingConfig
from streamfit.train import make_params

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


def test_a_pipeline_sets_the_minimum_token_length(tmp_path):
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text("ingest: {inputs: [docs.jsonl], out: s.zarr, hashing: {min_token_length: 1}}\n")
    cfg = load_pipeline(str(pipeline))
    assert cfg.ingest.hashing == HashingConfig(min_token_length=1)
    assert load_pipeline(str(pipeline)).ingest.out == str(tmp_path / "s.zarr")


def test_none_where_a_parameter_takes_none_and_a_hint_where_it_does_not():
    assert make_params("stagewise", {"pca_components": None}).pca_components is None
    with pytest.raises(ConfigError, match=r"max_iter: .* \(None is not allowed here\)"):
        make_params("stagewise", {"max_iter": None})


def test_worker_timeout_in_train_configs_and_pipelines(tmp_path):
    """worker_timeout: seconds, > 0; a pipeline's train section defaults to the engine's 60, a train
    config to None (train's --worker-timeout, else 60)."""
    pipeline, config = tmp_path / "p.yaml", tmp_path / "t.yaml"
    pipeline.write_text("train: {solver: bcd, out: run, store: s.zarr}\n")
    config.write_text("solver: bcd\n")
    assert load_pipeline(str(pipeline)).train.options.worker_timeout == 60.0
    assert load_train_config(str(config)).worker_timeout is None
    pipeline.write_text("train: {solver: bcd, out: run, store: s.zarr, worker_timeout: 2.5}\n")
    config.write_text("solver: bcd\nworker_timeout: 2.5\n")
    assert load_pipeline(str(pipeline)).train.options.worker_timeout == 2.5
    assert load_train_config(str(config)).worker_timeout == 2.5
    for bad in (0, -1):
        pipeline.write_text(f"train: {{solver: bcd, out: run, store: s.zarr, worker_timeout: {bad}}}\n")
        config.write_text(f"worker_timeout: {bad}\n")
        with pytest.raises(ConfigError, match="key 'train.worker_timeout': Input should be greater than 0"):
            load_pipeline(str(pipeline))
        with pytest.raises(ConfigError, match="key 'worker_timeout': Input should be greater than 0"):
            load_train_config(str(config))


@pytest.mark.parametrize("preset", sorted(glob.glob(os.path.join(CONFIGS, "*.yaml"))), ids=os.path.basename)
def test_each_preset_lists_every_parameter_of_its_solver_with_its_default(preset):
    """configs/*.yaml say "every option with its default": a parameter added to a solver's Params
    and not to its preset (or one removed or renamed) fails here, as does a default changed on
    one side only."""
    from streamfit.solvers import get_solver

    cfg = load_train_config(preset)  # the train-config schema, and the solver's Params
    defaults = {name: f.default for name, f in get_solver(cfg.solver).Params.model_fields.items()}
    assert cfg.params == defaults
    assert os.path.basename(preset) == f"{cfg.solver}.yaml"


def test_there_is_a_preset_for_every_solver():
    from streamfit.solvers import SOLVERS

    assert sorted(os.listdir(CONFIGS)) == sorted(f"{name}.yaml" for name in SOLVERS)


def test_train_options_command_line_beats_the_file_beats_the_default(tmp_path):
    from streamfit.config import TrainOptions, train_options

    config = tmp_path / "t.yaml"
    config.write_text("solver: bcd\nparams: {lam: 0.5, max_iter: 7}\nthreads_per_worker: 2\nworker_timeout: 5\n")
    options = train_options(
        load_train_config(str(config)), {"worker_timeout": 9.0, "n_workers": None, "params": {"max_iter": 3}}
    )
    assert options == TrainOptions(
        solver="bcd", params={"lam": 0.5, "max_iter": 3}, threads_per_worker=2, worker_timeout=9.0
    )
    assert options.engine() == {
        "scheduler": None,
        "n_workers": None,
        "threads_per_worker": 2,
        "worker_timeout": 9.0,
        "time_limit": None,
        "valid": None,
        "valid_every": 1,
        "checkpoint_every": 1,
        "threshold": None,
    }
    assert train_options(None, {}) == TrainOptions()  # no file, nothing given: the defaults (stagewise)
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(
        "train: {solver: bcd, out: run, store: s.zarr, time_limit: 2h, valid_every: 3, threshold: fit}\n"
    )
    options = train_options(load_pipeline(str(pipeline)).train.options, {"time_limit": 60.0})
    assert (options.time_limit, options.valid_every, options.solver, options.threshold) == (60.0, 3, "bcd", "fit")


def test_a_pipeline_section_names_a_bad_hashing_setting(tmp_path):
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text("ingest: {inputs: [d.jsonl], out: s.zarr, hashing: {n_features: 1000}}\n")
    with pytest.raises(ConfigError, match=r"p\.yaml: key 'ingest.hashing': .*n_features=1000 is not a power of two"):
        load_pipeline(str(pipeline))
    pipeline.write_text("ingest: {inputs: [d.jsonl], out: s.zarr, no_hash: true, hashing: {n_features: 1000}}\n")
    assert load_pipeline(str(pipeline)).ingest.hashing is None  # no_hash: the hashing section is not checked
