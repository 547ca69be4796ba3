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
