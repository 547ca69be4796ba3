"""streamfit.config: pipeline sections as the ingest and train steps receive them."""

import pytest

from streamfit.config import load_pipeline
from streamfit.errors import ConfigError
from streamfit.ingest.hashing import HashingConfig
from streamfit.train import make_params


def test_a_pipeline_sets_the_minimum_token_length(tmp_path):
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text("ingest: {inputs: [docs.jsonl], out: s.zarr, hashing: {min_token_length: 1}}\n")
    cfg = load_pipeline(str(pipeline))
    assert HashingConfig(**cfg.ingest.hashing.model_dump()).min_token_length == 1
    assert load_pipeline(str(pipeline)).ingest.out == str(tmp_path / "s.zarr")


def test_none_where_a_parameter_takes_none_and_a_hint_where_it_does_not():
    assert make_params("stagewise", {"pca_components": None}).pca_components is None
    with pytest.raises(ConfigError, match=r"max_iter: .* \(None is not allowed here\)"):
        make_params("stagewise", {"max_iter": None})


def test_worker_timeout_in_train_configs_and_pipelines(tmp_path):
    """worker_timeout: seconds, > 0; a pipeline's train section defaults to the engine's 60, a train
    config to None (train's --worker-timeout, else 60)."""
    from streamfit.config import load_train_config

    pipeline, config = tmp_path / "p.yaml", tmp_path / "t.yaml"
    pipeline.write_text("train: {solver: bcd, out: run, store: s.zarr}\n")
    config.write_text("solver: bcd\n")
    assert load_pipeline(str(pipeline)).train.worker_timeout == 60.0
    assert load_train_config(str(config)).worker_timeout is None
    pipeline.write_text("train: {solver: bcd, out: run, store: s.zarr, worker_timeout: 2.5}\n")
    config.write_text("solver: bcd\nworker_timeout: 2.5\n")
    assert load_pipeline(str(pipeline)).train.worker_timeout == 2.5
    assert load_train_config(str(config)).worker_timeout == 2.5
    for bad in (0, -1):
        pipeline.write_text(f"train: {{solver: bcd, out: run, store: s.zarr, worker_timeout: {bad}}}\n")
        config.write_text(f"worker_timeout: {bad}\n")
        with pytest.raises(ConfigError, match="key 'train.worker_timeout': Input should be greater than 0"):
            load_pipeline(str(pipeline))
        with pytest.raises(ConfigError, match="key 'worker_timeout': Input should be greater than 0"):
            load_train_config(str(config))
