"""streamfit.config: pipeline sections as the ingest and train steps receive them."""

import glob
import os

import pytest
from click.testing import CliRunner

from streamfit.cli import main
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


@pytest.mark.parametrize(
    "text, key",
    [
        ("ingest: {inputs: [-], out: s.zarr}", "ingest.inputs"),
        ("ingest: {inputs: [a.jsonl], out: s.zarr}\ningest_test: {inputs: [-], out: t.zarr}", "ingest_test.inputs"),
        ("train: {solver: bcd, out: run, store: s.zarr}\npredict: {source: '-'}", "predict.source"),
        ("train: {solver: bcd, out: run, store: s.zarr}\npredict: {source: a.jsonl, out: '-'}", "predict.out"),
    ],
)
def test_a_pipeline_path_of_a_dash_is_refused_rather_than_read_as_a_file_called_dash(tmp_path, text, key):
    """`-` in a pipeline file was the file `-` beside the pipeline (not found, or read); the
    commands' standard input and output are theirs alone: one line naming the key."""
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(text + "\n")
    with pytest.raises(ConfigError) as e:
        load_pipeline(str(pipeline))
    assert str(e.value) == (
        f"{pipeline}: key '{key}': - (standard input or output) is for the commands (streamfit ingest/predict -); a "
        "pipeline reads and writes files: name the file"
    )


def test_none_where_a_parameter_takes_none_and_a_hint_where_it_does_not():
    assert make_params("stagewise", {"pca_components": None}).pca_components is None
    with pytest.raises(ConfigError, match=r"max_iter: .* \(None is not allowed here\)"):
        make_params("stagewise", {"max_iter": None})


def test_a_value_that_fits_no_type_of_a_union_is_one_problem_naming_what_is_allowed():
    """standardize takes true, false or "auto": "maybe" is one problem with the allowed values, not
    pydantic's line per branch of the union (standardize.bool: …; standardize.literal['auto']: …)."""
    with pytest.raises(ConfigError) as e:
        make_params("bcd", {"standardize": "maybe", "lamm": 3})
    message = str(e.value)
    assert "standardize: Input should be a valid boolean" in message
    assert "('maybe'; allowed: true or false, or one of auto)" in message
    assert "standardize." not in message and "lamm: Extra inputs are not permitted (did you mean lam?)" in message


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


def test_checkpoint_interval_is_auto_or_a_duration_on_every_surface(tmp_path):
    """checkpoint_interval: "auto", or seconds >= 0 written as --time-limit's durations are (0
    included: every due step); a bad value names the key, from YAML, the command line or Python."""
    from click.testing import CliRunner

    from streamfit.cli import main
    from streamfit.config import TrainOptions

    config = tmp_path / "t.yaml"
    for text, value in (("auto", "auto"), ("0", 0.0), ("90s", 90.0), ("5m", 300.0), ("1.5", 1.5)):
        config.write_text(f"solver: bcd\ncheckpoint_interval: {text}\n")
        assert load_train_config(str(config)).checkpoint_interval == value
    config.write_text("solver: bcd\ncheckpoint_interval: soon\n")
    with pytest.raises(ConfigError, match="checkpoint_interval 'soon': expected auto, 0 .* or a duration"):
        load_train_config(str(config))
    with pytest.raises(ConfigError, match="checkpoint_interval -1: expected auto"):
        TrainOptions(checkpoint_interval=-1)
    result = CliRunner().invoke(main, ["train", "s.zarr", "--out", "r", "--checkpoint-interval", "-5m"])
    assert result.exit_code == 2 and "--checkpoint-interval '-5m': expected auto" in result.output
    assert "--checkpoint-interval DURATION" in CliRunner().invoke(main, ["train", "--help"]).output


def test_valid_every_is_auto_or_a_number_of_steps_on_every_surface(tmp_path):
    """valid_every: "auto" (the default everywhere) or a whole number >= 1; a bad value names the
    key, from YAML, the command line or Python."""
    import inspect

    from click.testing import CliRunner

    from streamfit.cli import main
    from streamfit.config import TrainOptions
    from streamfit.runlog import MetricsLog
    from streamfit.train import train

    assert TrainOptions().valid_every == "auto" == inspect.signature(train).parameters["valid_every"].default
    assert MetricsLog(None).valid_every == "auto"
    config = tmp_path / "t.yaml"
    for text, value in (("auto", "auto"), ("AUTO", "auto"), ("1", 1), ("25", 25)):
        config.write_text(f"solver: bcd\nvalid_every: {text}\n")
        assert load_train_config(str(config)).valid_every == value
    for text in ("0", "soon", "1.5", "-3"):
        config.write_text(f"solver: bcd\nvalid_every: {text}\n")
        with pytest.raises(ConfigError, match="valid_every .*: expected auto .* or a number of steps >= 1"):
            load_train_config(str(config))
    with pytest.raises(ConfigError, match="valid_every 0: expected auto"):
        TrainOptions(valid_every=0)
    result = CliRunner().invoke(main, ["train", "s.zarr", "--out", "r", "--valid-every", "often"])
    assert result.exit_code == 2 and "--valid-every 'often': expected auto" in result.output
    assert "--valid-every N|auto" in CliRunner().invoke(main, ["train", "--help"]).output


@pytest.mark.parametrize("preset", sorted(glob.glob(os.path.join(CONFIGS, "*.yaml"))), ids=os.path.basename)
def test_each_preset_lists_every_parameter_of_its_solver_with_its_default(preset):
    """configs/*.yaml say "every option with its default": a parameter added to a solver's Params
    and not to its preset (or one removed or renamed) fails here, as does a default changed on
    one side only."""
    import dataclasses

    import yaml

    from streamfit.config import TrainConfig, TrainOptions
    from streamfit.solvers import get_solver

    cfg = load_train_config(preset)  # the train-config schema, and the solver's Params
    defaults = {name: f.default for name, f in get_solver(cfg.solver).Params.model_fields.items()}
    assert cfg.params == defaults
    assert os.path.basename(preset) == f"{cfg.solver}.yaml"
    # every other option of `train --config` too, each with TrainOptions' default (issue 20, item 12)
    with open(preset) as f:
        assert set(yaml.safe_load(f)) == set(TrainConfig.model_fields)
    engine = {f.name: f.default for f in dataclasses.fields(TrainOptions) if f.name not in ("solver", "params")}
    assert {name: getattr(cfg, name) for name in engine} == engine


def test_there_is_a_preset_for_every_solver():
    from streamfit.solvers import all_solvers

    assert sorted(os.listdir(CONFIGS)) == sorted(f"{name}.yaml" for name in all_solvers())


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
        "dashboard_address": "127.0.0.1:8787",
        "worker_timeout": 9.0,
        "time_limit": None,
        "valid": None,
        "valid_every": "auto",
        "checkpoint_every": 1,
        "checkpoint_interval": "auto",
        "threshold": None,
    }
    assert train_options(None, {}) == TrainOptions()  # no file, nothing given: the defaults (stagewise)
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(
        "train: {solver: bcd, out: run, store: s.zarr, time_limit: 2h, valid_every: 3, threshold: fit}\n"
    )
    options = train_options(load_pipeline(str(pipeline)).train.options, {"time_limit": 60.0})
    assert (options.time_limit, options.valid_every, options.solver, options.threshold) == (60.0, 3, "bcd", "fit")


@pytest.mark.parametrize("size", [1.5, 0, -0.2, 1])
def test_a_test_size_outside_0_1_names_the_pipeline_key_and_the_flag(tmp_path, size):
    """One bound for test_size on every surface: the pipeline names its key, the command line
    its flag (it named the flag in a pipeline too: qa30)."""
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(f"ingest: {{inputs: [d.jsonl], out: s.zarr, test_size: {size}, test_out: t.zarr}}\n")
    with pytest.raises(ConfigError, match=rf"p\.yaml: key 'ingest.test_size': test_size {size}.*between 0 and 1"):
        load_pipeline(str(pipeline))
    result = CliRunner().invoke(
        main, ["ingest", "d.jsonl", "--out", "s.zarr", "--test-size", str(size), "--test-out", "t.zarr"]
    )
    assert result.exit_code == 2 and f"--test-size {float(size)}: must be between 0 and 1" in result.output


def test_a_pipeline_section_names_a_bad_hashing_setting(tmp_path):
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text("ingest: {inputs: [d.jsonl], out: s.zarr, hashing: {n_features: 1000}}\n")
    with pytest.raises(ConfigError, match=r"p\.yaml: key 'ingest.hashing': .*n_features=1000 is not a power of two"):
        load_pipeline(str(pipeline))
    pipeline.write_text("ingest: {inputs: [d.jsonl], out: s.zarr, no_hash: true, hashing: {n_features: 1000}}\n")
    assert load_pipeline(str(pipeline)).ingest.hashing is None  # no_hash: the hashing section is not checked


def test_an_ingest_sections_n_features_with_hashing_is_refused(tmp_path):
    """`n_features` beside the ingest section's other keys (as the flag --n-features is spelled)
    is the width of unhashed columns: with hashing on, the store was silently 2**18 wide (qa36:
    `n_features: 1000` ingested without a word, where the command line refuses 1000). Now one
    line naming the key and where a hashed width goes; with no_hash: true it is the width."""
    pipeline = tmp_path / "p.yaml"
    for value, example in ((1000, 1024), (4096, 4096), (1, 2)):
        pipeline.write_text(f"ingest: {{inputs: [d.jsonl], out: s.zarr, n_features: {value}}}\n")
        with pytest.raises(ConfigError) as e:
            load_pipeline(str(pipeline))
        assert str(e.value) == (
            f"{pipeline}: key 'ingest.n_features': the width of unhashed columns (with no_hash: true); a hashed "
            f"store's width is hashing: {{n_features: N}}, a power of two (e.g. {example})"
        )
    pipeline.write_text("ingest: {inputs: [d.svm], out: s.zarr, no_hash: true, n_features: 1000}\n")
    assert load_pipeline(str(pipeline)).ingest.n_features == 1000
    pipeline.write_text("ingest: {inputs: [d.jsonl], out: s.zarr, hashing: {n_features: 1024}}\n")
    assert load_pipeline(str(pipeline)).ingest.hashing.n_features == 1024


def test_every_pipeline_mistake_is_one_line_naming_the_key_with_a_guess(tmp_path):
    """Misspelled keys at each level, a section that is not a mapping, an unknown solver or
    source option: one ConfigError line naming the key, with the closest known name (issue 20, item 10)."""
    pipeline = tmp_path / "p.yaml"
    cases = {
        "ingest: {inputs: [d.jsonl], out: s.zarr, chunk_row: 5, hashing: {n_feature: 1024}}\ntrian: {}\n": [
            "key 'ingest.hashing.n_feature': unknown key (did you mean n_features?)",
            "key 'ingest.chunk_row': unknown key (did you mean chunk_rows?)",
            "key 'trian': unknown key (did you mean train?); known here: ingest, ingest_test, train, evaluate",
        ],
        "ingest: 5\n": ["key 'ingest': expected a mapping of keys (key: value), got 5"],
        "ingest: {inputs: [d.h5], out: s, hashing: null}\n": [
            "key 'ingest.hashing': expected a mapping of keys (key: value), got None (to keep numeric indices "
            "unhashed, as --no-hash does: no_hash: true)"
        ],
        "train: {solver: bdc, out: r, store: s}\n": ["key 'train.solver': unknown solver 'bdc' (did you mean bcd?)"],
        "ingest: {inputs: [d.jsonl], out: s, source_options: {text_feld: x}}\n": [
            "unknown source option(s) text_feld (did you mean text_field?)"
        ],
        "evaluate: {stor: t}\n": ["key 'evaluate.stor': unknown key (did you mean store?)"],
        "evaluate: {n_worker: 2}\npredict: {source: x, part: true}\n": [
            "key 'evaluate.n_worker': unknown key (did you mean n_workers?)",
            "key 'predict.part': unknown key (did you mean parts?)",
        ],
        "ingest: {inputs: [d.jsonl], out: s}\ningest_test: {inputs: [t.jsonl], out: t, schedular: x}\n": [
            "key 'ingest_test.schedular': unknown key (did you mean scheduler?)"
        ],
        # a format option beside the section's keys, as the CLI's flags read (session 22: the
        # line listed the section's keys without naming source_options)
        "ingest: {inputs: [d.h5], out: s, x_dataset: X, label_field: c}\n": [
            "key 'ingest.x_dataset': unknown key here; it is a format option: put it under source_options "
            "({x_dataset: …})",
            "key 'ingest.label_field': unknown key here; it is a format option: put it under source_options",
        ],
    }
    for text, expected in cases.items():
        pipeline.write_text(text)
        with pytest.raises(ConfigError) as e:
            load_pipeline(str(pipeline))
        assert "\n" not in str(e.value) and str(e.value).startswith(f"{pipeline}: ")
        for part in expected:
            assert part in str(e.value)


def test_a_command_line_flag_written_as_a_pipeline_key_is_told_where_it_goes(tmp_path):
    """The ingest, train and predict flags that a pipeline spells otherwise (`--no-header`,
    `--hash-seed`, `--ngram-max`, `--no-idf`, `-p`, predict's `--id-field`), written as section
    keys, get one line each naming where the setting goes. Before session 25 the closest key was
    guessed: `no_header` "did you mean no_hash?", `hash_seed` "did you mean seed?" (the split's
    seed, not the hashing's), and the hashing flags, `-p` and predict's format options were only
    "unknown key" and the section's keys."""
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(
        "ingest: {inputs: [d.tsv], out: s, no_header: true, hash_seed: 3, ngram_max: 2, value: count, "
        "min_token_length: 1, no_lowercase: true, no_alternate_sign: true, no_idf: true, no_l2_normalize: true}\n"
        "ingest_test: {inputs: [t.tsv], out: t, no_header: true}\n"
        "train: {solver: bcd, out: r, p: {max_iter: 3}}\n"
        "predict: {source: n.jsonl, id_field: id, text_field: body}\n"
    )
    with pytest.raises(ConfigError) as e:
        load_pipeline(str(pipeline))
    text = str(e.value)
    assert "\n" not in text and "did you mean" not in text, text
    for part in (
        "key 'ingest.no_header': unknown key here; --no-header is written source_options: {header: false}",
        "key 'ingest.hash_seed': unknown key here; --hash-seed is written hashing: {seed: …}",
        "key 'ingest.ngram_max': unknown key here; --ngram-max N is written hashing: {ngram_range: [1, N]}",
        "key 'ingest.value': unknown key here; --value is written hashing: {value: …}",
        "key 'ingest.min_token_length': unknown key here; --min-token-length is written hashing: {min_token_length: …}",
        "key 'ingest.no_lowercase': unknown key here; --no-lowercase is written hashing: {lowercase: false}",
        "key 'ingest.no_alternate_sign': unknown key here; --no-alternate-sign is written hashing: "
        "{alternate_sign: false}",
        "key 'ingest.no_idf': unknown key here; --no-idf is written idf: false",
        "key 'ingest.no_l2_normalize': unknown key here; --no-l2-normalize is written l2_normalize: false",
        "key 'ingest_test.no_header': unknown key here; --no-header is written source_options: {header: false}",
        "key 'train.p': unknown key here; -p KEY=VALUE is written params: {KEY: VALUE}",
        "key 'predict.id_field': unknown key here; it is a format option: put it under options ({id_field: …})",
        "key 'predict.text_field': unknown key here; it is a format option: put it under options ({text_field: …})",
    ):
        assert part in text, (part, text)
    # the settings that ingest_test takes from the training store: said so, not "unknown key"
    pipeline.write_text("ingest: {inputs: [d.tsv], out: s}\ningest_test: {inputs: [t.tsv], out: t, no_idf: true}\n")
    with pytest.raises(
        ConfigError,
        match=r"key 'ingest_test.no_idf': unknown key here; ingest_test reads its "
        r"inputs as the ingest section's store was written \(hashing, IDF, normalization\): set "
        r"--no-idf there, as idf: false",
    ):
        load_pipeline(str(pipeline))


def test_the_walkthrough_pipeline_loads_with_its_predict_section():
    cfg = load_pipeline(os.path.join(os.path.dirname(CONFIGS), "pipelines", "walkthrough.yaml"))
    data = os.path.join(os.path.dirname(CONFIGS), "tests", "data", "walkthrough")
    assert cfg.ingest.inputs == [os.path.join(data, "news-train.txt.gz")]
    assert cfg.ingest.source_options == {"header": False, "label_field": "0", "id_field": "1", "text_field": "2"}
    assert (cfg.predict.source, cfg.predict.run_dir) == (os.path.join(data, "news-test.txt.gz"), cfg.train.out)


def test_a_pipelines_urls_are_kept_as_written_and_its_paths_resolved_against_its_folder(tmp_path, monkeypatch):
    """A URL in a pipeline (written out, or from a $VAR) names the object store: it is not joined
    to the file's folder as a relative path (which made `s3://bucket/x.zarr` the local folder
    `FOLDER/s3:/bucket/x.zarr`, written without a word); local paths still are."""
    monkeypatch.setenv("BUCKET", "s3://bucket/jobs")
    path = tmp_path / "p.yaml"
    path.write_text(
        "ingest: {inputs: ['s3://bucket/data/*.jsonl.gz', local.jsonl], out: $BUCKET/train.zarr, "
        "test_size: 0.2, test_out: s3://bucket/jobs/test.zarr}\n"
        "train: {solver: stagewise, out: '${BUCKET}/run'}\n"
        "evaluate: {}\n"
        "predict: {source: gs://other/new.jsonl, out: ../preds.csv}\n"
    )
    config = load_pipeline(str(path))
    assert config.ingest.inputs == ["s3://bucket/data/*.jsonl.gz", str(tmp_path / "local.jsonl")]
    assert (config.ingest.out, config.ingest.test_out) == ("s3://bucket/jobs/train.zarr", "s3://bucket/jobs/test.zarr")
    assert (config.train.store, config.train.out) == ("s3://bucket/jobs/train.zarr", "s3://bucket/jobs/run")
    assert config.evaluate.store == "s3://bucket/jobs/test.zarr"
    assert (config.predict.source, config.predict.out) == ("gs://other/new.jsonl", str(tmp_path.parent / "preds.csv"))


def test_the_presets_describe_the_engine_options_in_the_same_words():
    """The engine and run options (TrainOptions) are the same for every solver, so each preset's
    lines for them, comments included, are one text: a comment corrected in one preset only fails here."""
    sections = {}
    for preset in sorted(glob.glob(os.path.join(CONFIGS, "*.yaml"))):
        with open(preset, encoding="utf-8") as f:
            text = f.read()
        marker = "# The engine and the run:"
        assert text.count(marker) == 1, preset
        sections[os.path.basename(preset)] = text[text.index(marker) :]
    assert len(sections) >= 5 and len(set(sections.values())) == 1, sorted(sections)


@pytest.mark.parametrize(
    "pipeline", sorted(glob.glob(os.path.join(os.path.dirname(CONFIGS), "pipelines", "*.yaml"))), ids=os.path.basename
)
def test_each_shipped_pipeline_loads_and_names_its_command(pipeline):
    """pipelines/*.yaml validate, their repository inputs exist, and each says how it is run."""
    cfg = load_pipeline(pipeline)
    repo = os.path.dirname(CONFIGS)
    for path in cfg.ingest.inputs if cfg.ingest else []:
        if os.path.commonpath([repo, path]) == repo:  # shipped data (news20 reads shared/data beside the clone)
            assert os.path.exists(path), path
    with open(pipeline, encoding="utf-8") as f:
        assert f"streamfit run pipelines/{os.path.basename(pipeline)}" in f.read()
