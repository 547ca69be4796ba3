"""The `streamfit` command as a user runs it: every subcommand, errors that name the fix."""

import contextlib
import json
import os
import re
import shlex
import shutil

import numpy as np
import pytest
from click.testing import CliRunner
from sklearn.datasets import dump_svmlight_file, load_digits

from streamfit.cli import main
from streamfit.model import load_model
from streamfit.store import open_store

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# a quick bcd fit in this process: the model most tests below read
QUICK_BCD = ["--solver", "bcd", "-p", "max_iter=3", "--n-workers", "0"]


def run(*args, ok=True):
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    if ok:
        assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    X, y = load_digits(return_X_y=True)
    dump_svmlight_file(X, y, str(d / "digits.svm"), zero_based=False)
    out = run(
        "ingest",
        d / "digits.svm",
        "--no-hash",
        "--out",
        d / "train.zarr",
        "--test-size",
        "0.25",
        "--test-out",
        d / "test.zarr",
        "--chunk-rows",
        "400",
    ).output
    assert "records read 1797, written 1797, skipped 0" in out
    return d


def test_inspect_and_verify(stores):
    info = json.loads(run("inspect", stores / "train.zarr", "--verify", "--json").output)
    assert (info["n_rows"], info["n_features"], info["n_chunks"], info["verified"]) == (1347, 64, 4, True)
    assert len(info["class_rows"]) == 10 and sum(info["class_rows"]) == 1347 and min(info["class_rows"]) > 0
    text = run("inspect", stores / "train.zarr").output
    assert "n_rows: 1347" in text
    rows = ", ".join(f"{c}: {n}" for c, n in zip(info["classes"], info["class_rows"]))
    assert f"class_rows: {rows}\n" in text


def test_verify_names_the_damaged_chunk(stores, tmp_path):
    damaged = tmp_path / "damaged.zarr"
    shutil.copytree(stores / "train.zarr", damaged)
    chunk_file = damaged / "chunks" / "000001" / "data" / "c" / "0"  # chunk 1's values
    raw = bytearray(chunk_file.read_bytes())
    raw[len(raw) // 3] ^= 0x55
    chunk_file.write_bytes(bytes(raw))
    result = run("inspect", damaged, "--verify", ok=False)
    assert result.exit_code == 1 and "chunk 1 " in result.output and "chunk 0 " not in result.output


def test_train_evaluate_predict_resume(stores, tmp_path):
    run_dir = tmp_path / "run"
    train = ["train", stores / "train.zarr", "--solver", "stagewise", "--out", run_dir, "--n-workers", "1"]
    train += ["-p", "generator=sequential", "-p", "block_size=16", "-p", "n_passes=2"]
    run(*train, "--valid", stores / "test.zarr")
    model = load_model(str(run_dir))
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) >= 4 and all("objective" in line for line in lines)
    # --valid-every auto (the default): the first step and the last are validated, those between by time
    assert "valid_accuracy" in lines[0] and all(0 < line.get("valid_accuracy", 0.5) <= 1 for line in lines)
    result = json.loads(run("evaluate", run_dir, stores / "test.zarr", "--json").output)
    assert result["n_samples"] == 450 and result["accuracy"] > 0.9 and lines[-1]["valid_accuracy"] == result["accuracy"]
    # a second train into the same directory must say how to continue
    again = run("train", stores / "train.zarr", "--out", run_dir, ok=False)
    assert again.exit_code == 2 and "--resume" in again.output
    # resuming a finished run changes nothing
    run(*train, "--resume")
    X, _ = open_store(str(stores / "test.zarr")).to_scipy()
    assert np.array_equal(load_model(str(run_dir)).decision_function(X), model.decision_function(X))
    # predict from the store and from raw LIBSVM featurized like the training store
    run("predict", run_dir, stores / "test.zarr", "--out", tmp_path / "p.csv", "--top-k", "2")
    rows = (tmp_path / "p.csv").read_text().splitlines()
    assert rows[0] == "location,label_1,score_1,label_2,score_2" and len(rows) == 451
    run("predict", run_dir, stores / "digits.svm", "--out", tmp_path / "p.jsonl")
    first = json.loads((tmp_path / "p.jsonl").read_text().splitlines()[0])
    assert first["location"].endswith("digits.svm:1") and len(first["labels"]) == 1


def test_bad_solver_parameter_names_the_key(stores, tmp_path):
    result = run("train", stores / "train.zarr", "--out", tmp_path / "r", "-p", "block_sise=3", ok=False)
    assert result.exit_code == 2 and "block_sise" in result.output


def test_param_none_as_list_solvers_prints_it(stores, tmp_path):
    assert "pca_components (default None)" in run("train", "--list-solvers").output
    for word in ("None", "none", "null"):
        run_dir = tmp_path / word
        run(
            "train",
            stores / "train.zarr",
            "--solver",
            "stagewise",
            "-p",
            f"pca_components={word}",
            "-p",
            "n_passes=1",
            "-p",
            "block_size=16",
            "--n-workers",
            "0",
            "--out",
            run_dir,
        )
        assert json.loads((run_dir / "run.json").read_text())["params"]["pca_components"] is None
    result = run(
        "train",
        stores / "train.zarr",
        "--solver",
        "stagewise",
        "-p",
        "max_iter=None",
        "--n-workers",
        "0",
        "--out",
        tmp_path / "r",
        ok=False,
    )
    assert result.exit_code == 2 and "max_iter: Input should be a valid integer" in result.output


def test_missing_store_is_a_clear_error(tmp_path):
    result = run("inspect", tmp_path / "nope.zarr", ok=False)
    assert result.exit_code == 2 and "no such store" in result.output


def test_a_required_declared_option_left_out_is_clicks_usage_error(tmp_path):
    """ingest without --out: click's one line naming the option (exit 2), not an internal
    TypeError from IngestOptions (click 8.5 took the declared options' default=None for a value)."""
    data = tmp_path / "d.svm"
    data.write_text("1 1:1\n")
    result = run("ingest", data, "--no-hash", ok=False)
    assert result.exit_code == 2 and "Missing option '--out' / '-o'" in result.output
    assert "internal error" not in result.output


def test_ingest_error_names_line(tmp_path):
    bad = tmp_path / "bad.svm"
    bad.write_text("1 1:1\n1 2:x\n")
    result = run("ingest", bad, "--no-hash", "--out", tmp_path / "s", ok=False)
    assert result.exit_code == 2 and "bad.svm:2" in result.output
    assert not os.path.exists(tmp_path / "s")


def test_pipeline_bad_key_is_named(tmp_path):
    cfg = tmp_path / "p.yaml"
    cfg.write_text("ingest:\n  inputs: [x.svm]\n  out: s.zarr\n  chunk_row: 10\n")
    result = run("run", cfg, ok=False)
    assert result.exit_code == 2 and "ingest.chunk_row" in result.output
    cfg.write_text("train:\n  solver: bcd\n  out: run\n  store: s.zarr\n  time_limit: 2 days\n")
    result = run("run", cfg, ok=False)
    assert result.exit_code == 2 and "train.time_limit" in result.output and "90m" in result.output


def _metrics(line: str) -> dict[str, float]:
    return {key: float(value) for key, value in re.findall(r"(\w+)=([\d.]+)", line)}


def test_quickstart_pipeline(tmp_path):
    """The README's quickstart job prints what the README shows (its `…` the clone's folder): the
    same ingest and train lines, and the evaluate line's metrics within two test rows (450)."""
    pipelines = tmp_path / "pipelines"
    shutil.copytree(os.path.join(REPO, "pipelines"), pipelines)
    out = run("run", pipelines / "quickstart.yaml").stdout.splitlines()
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    shown = re.search(r"^```\n(ingest: .*?)^```", readme, flags=re.S | re.M)
    assert shown, "README.md no longer shows the quickstart's output"
    expected = shown[1].replace("…/", f"{tmp_path}/").splitlines()
    sections = ["ingest", "train", "evaluate"]
    assert [line.split(":")[0] for line in out] == [line.split(":")[0] for line in expected] == sections
    assert out[:2] == expected[:2]
    got, want = _metrics(out[2]), _metrics(expected[2])
    assert got.keys() == want.keys() and got["n_samples"] == want["n_samples"] == 450
    for key in want:
        assert abs(got[key] - want[key]) <= 2 / 450, (key, out[2], expected[2])
    assert got["accuracy"] > 0.95
    assert out[2].endswith(f"({tmp_path}/runs/quickstart/run/evaluation.json)")
    assert open_store(str(tmp_path / "runs" / "quickstart" / "digits-test.zarr")).n_rows == 450


def test_the_readme_quickstart_is_what_ci_runs():
    """README.md's two quickstart commands are the ones .ci/run runs, in that order, in a fresh venv
    (CI may add quieter output flags: a command's words are in order in its CI line)."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        block = re.search(r"## Quickstart\n.*?```bash\n(.*?)```", f.read(), flags=re.S)[1]
    commands = [part.strip() for line in block.splitlines() for part in line.split("&&")]
    assert commands == [
        "pip install .",
        "streamfit run pipelines/quickstart.yaml --overwrite",
        'pip install ".[test]"',
        "python -m pytest -n 2",
    ]
    with open(os.path.join(REPO, ".ci", "run"), encoding="utf-8") as f:
        ci = [shlex.split(line) for line in f if line.strip() and not line.lstrip().startswith(("#", "echo"))]
    assert ["python3", "-m", "venv", "$venv"] in ci

    def runs(line: list[str], command: list[str]) -> bool:
        rest = iter(line[1:])
        return line[0] == command[0] and all(word in rest for word in command[1:])

    places = [next((i for i, line in enumerate(ci) if runs(line, shlex.split(c))), None) for c in commands]
    assert None not in places and places == sorted(places), (commands, places)
    assert ci.index(["python3", "-m", "venv", "$venv"]) < places[0]


def test_time_limit_stops_at_a_checkpoint_and_resume_finishes(stores, tmp_path):
    args = [
        "train",
        stores / "train.zarr",
        "--solver",
        "stagewise",
        "-p",
        "generator=sequential",
        "-p",
        "block_size=16",
        "-p",
        "n_passes=2",
        "--n-workers",
        "0",
    ]
    run(*args, "--out", tmp_path / "whole")
    stopped_at = []
    result = run(*args, "--out", tmp_path / "cut", "--time-limit", "0.001s", ok=False)
    while result.exit_code == 3:  # every save is past the limit: one stage per invocation
        record = json.loads((tmp_path / "cut" / "run.json").read_text())
        assert record["status"] == "stopped at the time limit" and "--resume" in result.output
        assert not (tmp_path / "cut" / "model").exists()
        stopped_at.append(record["step"])
        result = run(*args, "--out", tmp_path / "cut", "--time-limit", "0.001s", "--resume", ok=False)
    assert result.exit_code == 0, result.output
    assert len(stopped_at) >= 4 and stopped_at == sorted(set(stopped_at))
    assert json.loads((tmp_path / "cut" / "run.json").read_text())["status"] == "finished"
    X, _ = open_store(str(stores / "test.zarr")).to_scipy()
    whole, cut = load_model(str(tmp_path / "whole")), load_model(str(tmp_path / "cut"))
    assert np.array_equal(cut.decision_function(X), whole.decision_function(X))


def test_bad_time_limit_is_named(stores, tmp_path):
    result = run("train", stores / "train.zarr", "--out", tmp_path / "r", "--time-limit", "soon", ok=False)
    assert result.exit_code == 2 and "--time-limit 'soon'" in result.output


def test_predict_refuses_a_row_wider_than_training_and_leaves_nothing(stores, tmp_path):
    run_dir = tmp_path / "run"
    run("train", stores / "train.zarr", *QUICK_BCD, "--out", run_dir)
    raw = tmp_path / "wide.svm"
    raw.write_text("1 3:1\n2 5:1 65:0.5\n")
    result = run("predict", run_dir, raw, "--out", tmp_path / "p.csv", ok=False)
    assert (
        result.exit_code == 2
        and "wide.svm:2: feature index 65 is beyond the 64 features (indices 1–64)" in result.output
    )
    assert not (tmp_path / "p.csv").exists() and not (tmp_path / "p.csv.partial").exists()


def test_resume_with_overwrite_is_refused_before_any_work(stores, tmp_path):
    result = run("train", stores / "train.zarr", "--out", tmp_path / "r", "--resume", "--overwrite", ok=False)
    assert result.exit_code == 2 and "--resume and --overwrite contradict each other" in result.output
    assert not (tmp_path / "r").exists()
    cfg = tmp_path / "p.yaml"
    cfg.write_text(f"ingest:\n  inputs: [{stores / 'digits.svm'}]\n  out: {tmp_path / 's.zarr'}\n  no_hash: true\n")
    result = run("run", cfg, "--resume", "--overwrite", ok=False)
    assert result.exit_code == 2 and "drop --overwrite to continue" in result.output
    assert not (tmp_path / "s.zarr").exists()


def test_time_limit_stop_after_overwrite_says_to_drop_it(stores, tmp_path):
    args = ["train", stores / "train.zarr", *QUICK_BCD, "--time-limit", "0.001s"]
    result = run(*args, "--out", tmp_path / "r", "--overwrite", ok=False)
    assert result.exit_code == 3 and "plus --resume (and without --overwrite)" in result.output
    result = run(*args, "--out", tmp_path / "r2", ok=False)
    assert result.exit_code == 3 and "plus --resume" in result.output and "--overwrite" not in result.output


def test_ingest_options_that_would_be_ignored_are_usage_errors(stores, tmp_path):
    result = run(
        "ingest", stores / "digits.svm", "--no-hash", "--out", tmp_path / "s", "--test-out", tmp_path / "t", ok=False
    )
    assert result.exit_code == 2 and "--test-out needs --test-size FRACTION" in result.output
    result = run(
        "ingest",
        stores / "digits.svm",
        "--like",
        stores / "train.zarr",
        "--out",
        tmp_path / "s",
        "--n-features",
        "4096",
        "--ngram-max",
        "2",
        ok=False,
    )
    assert result.exit_code == 2 and "from the training store: drop --n-features, --ngram-max" in result.output
    assert not (tmp_path / "s").exists() and not (tmp_path / "t").exists()


def test_ingest_like_defaults_to_the_training_stores_backend_and_chunk_rows(stores, tmp_path):
    run(
        "ingest",
        stores / "digits.svm",
        "--no-hash",
        "--backend",
        "parquet",
        "--chunk-rows",
        "500",
        "--out",
        tmp_path / "train.pq",
    )
    run("ingest", stores / "digits.svm", "--like", tmp_path / "train.pq", "--out", tmp_path / "test.pq")
    info = json.loads(run("inspect", tmp_path / "test.pq", "--json").output)
    assert (info["backend"], info["chunk_rows"]) == ("parquet", 500)
    run(
        "ingest",
        stores / "digits.svm",
        "--like",
        tmp_path / "train.pq",
        "--out",
        tmp_path / "test.zarr",
        "--backend",
        "zarr",
        "--chunk-rows",
        "700",
    )
    info = json.loads(run("inspect", tmp_path / "test.zarr", "--json").output)
    assert (info["backend"], info["chunk_rows"]) == ("zarr", 700)
    help_text = " ".join(run("ingest", "--help").output.split())
    assert "[default: the --like store's, else zarr]" in help_text
    assert "[default: the --like store's, else 16384]" in help_text


@pytest.mark.parametrize(
    "solver, params",
    [
        ("bcd", ["-p", "max_iter=5", "-p", "tol=1e-9"]),
        ("bcd", ["-p", "mode=chunks", "-p", "max_iter=5", "-p", "tol=1e-9"]),
        ("ppdsparse", ["-p", "group_size=3"]),
    ],
)
def test_train_valid_with_bcd_and_ppdsparse(stores, tmp_path, solver, params):
    """--valid was silently ignored by bcd and ppdsparse: bcd validates every --valid-every steps
    and the last, ppdsparse its final model on the last step (10 classes in groups of 3: step 4)."""
    run(
        "train",
        stores / "train.zarr",
        "--solver",
        solver,
        *params,
        "--n-workers",
        "0",
        "--valid",
        stores / "test.zarr",
        "--valid-every",
        "2",
        "--out",
        tmp_path / "run",
    )
    with open(tmp_path / "run" / "metrics.jsonl") as f:
        lines = [json.loads(line) for line in f]
    validated = [line["step"] for line in lines if "valid_accuracy" in line]
    assert validated == ([2, 4, 5] if solver == "bcd" else [4]) and lines[-1]["step"] == (5 if solver == "bcd" else 4)
    assert all(0.5 < line["valid_accuracy"] <= 1 for line in lines if "valid_accuracy" in line)
    assert load_model(str(tmp_path / "run" / "model")).info["converged"] is (solver == "ppdsparse")


def test_quiet_after_the_subcommand(stores, tmp_path, caplog):
    args = ["train", stores / "train.zarr", *QUICK_BCD]
    run(*args, "--out", tmp_path / "loud")
    assert "training bcd on" in caplog.text
    caplog.clear()
    run(*args, "--out", tmp_path / "quiet", "-q")
    assert "training bcd on" not in caplog.text


def test_evaluate_of_standard_input_says_to_ingest_it_first():
    """evaluate reads a store, not raw data: `evaluate RUN -` is one line with the ingest to run
    first (it was `-: no store here`-like, naming no way to get there from a pipe)."""
    result = run("evaluate", "run/", "-", ok=False)  # refused before the model is read
    assert result.exit_code == 2 and result.output == (
        "error: evaluate reads a store (rows with their labels), and - is standard input: ingest it like the "
        "training store first (... | streamfit ingest - --format jsonl --like TRAIN_STORE --out test.zarr), then "
        "evaluate that store\n"
    )


def test_evaluate_names_what_differs(stores, tmp_path):
    run("train", stores / "train.zarr", *QUICK_BCD, "--out", tmp_path / "r")
    (tmp_path / "ab.svm").write_text("a 1:1\nb 64:1\n")
    run("ingest", tmp_path / "ab.svm", "--no-hash", "--n-features", "64", "--out", tmp_path / "ab.zarr")
    result = run("evaluate", tmp_path / "r", tmp_path / "ab.zarr", ok=False)
    assert result.exit_code == 2 and "ab.zarr: has 2 classes, the model 10" in result.output


def test_min_token_length_is_an_ingest_option_recorded_for_like_and_predict(tmp_path):
    assert "--min-token-length" in run("ingest", "--help").output
    docs = tmp_path / "d.jsonl"
    docs.write_text('{"text": "I a b", "label": "x"}\n{"text": "we go", "label": "y"}\n')
    out = run("ingest", docs, "--out", tmp_path / "s2").output
    assert "records read 2, written 2, skipped 0; 1 rows have no features;" in out
    run("ingest", docs, "--out", tmp_path / "s1", "--min-token-length", "1")
    assert open_store(str(tmp_path / "s1")).manifest.hashing["min_token_length"] == 1
    run("ingest", docs, "--like", tmp_path / "s1", "--out", tmp_path / "t1")
    assert open_store(str(tmp_path / "t1")).manifest.nnz == 5
    result = run(
        "ingest", docs, "--like", tmp_path / "s1", "--out", tmp_path / "t2", "--min-token-length", "2", ok=False
    )
    assert result.exit_code == 2 and "drop --min-token-length" in result.output
    run_dir = tmp_path / "run"
    run("train", tmp_path / "s1", *QUICK_BCD, "--out", run_dir)
    assert load_model(str(run_dir)).featurizer["hashing"]["min_token_length"] == 1


def test_inspect_occupancy_reads_as_lines(stores, tmp_path):
    text = run("inspect", stores / "train.zarr", "--occupancy").output
    assert text.endswith("\n     occupancy:\n                columns used: 61 of 64 (95.3 %)\n")
    docs = tmp_path / "d.jsonl"
    docs.write_text("".join(json.dumps({"text": f"word{i} other{i}", "label": i % 2}) + "\n" for i in range(100)))
    run("ingest", docs, "--out", tmp_path / "wide", "--n-features", "4096")
    lines = run("inspect", tmp_path / "wide", "--occupancy").output.splitlines()
    assert [line.strip() for line in lines[lines.index("     occupancy:") + 1 :]] == [
        "columns used: 194 of 4,096 (4.74 %)",
        "estimated distinct features: 199",
        "estimated colliding share: 4.74 %",
        "n_features for under 1 % colliding: 32,768",
        "n_features for under 10 % colliding: 2,048",
    ]
    run("ingest", docs, "--out", tmp_path / "full", "--n-features", "4")
    text = run("inspect", tmp_path / "full", "--occupancy").output
    assert "estimated distinct features: unknown: every column is used" in text
    assert "n_features for under 1 % colliding: unknown: every column is used" in text
    report = json.loads(run("inspect", tmp_path / "full", "--occupancy", "--json").output)["occupancy"]
    assert report["columns_used"] == 4 and report["n_features_for_1pct"] is None


def test_inspect_shows_an_arff_store_s_feature_header_as_its_count(tmp_path):
    """qa31: an ARFF store records its feature attributes and values (arff_header, one entry per
    attribute), and inspect's text printed them all in its source line (bibtex's 1836: 40 kB on
    one line). The text shows their count and digest; --json keeps the header whole."""
    arff = os.path.join(REPO, "tests", "data", "sources", "weather-nominal.arff")
    run("ingest", arff, "--no-hash", "--option", "n_labels=1", "--out", tmp_path / "w.zarr")
    header = json.loads(run("inspect", tmp_path / "w.zarr", "--json").output)["source"]["format_options"]["arff_header"]
    assert [name for name, _ in header["features"]] == ["outlook", "temperature", "humidity", "windy"]
    (line,) = [line for line in run("inspect", tmp_path / "w.zarr").output.splitlines() if "source:" in line]
    assert f"'arff_header': '4 feature attributes, sha256 {header['sha256'][:12]}…'" in line
    assert "outlook" not in line and "'n_labels': 1" in line


def test_worker_timeout_reaches_the_engine(stores, tmp_path):
    """--worker-timeout, worker_timeout in a train config or a pipeline's train section, and run's
    --worker-timeout: how long a scheduler without workers is waited for (1 s here, not 60)."""
    import time

    from distributed import LocalCluster

    with LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster:
        address = cluster.scheduler_address
        train = ["train", stores / "train.zarr", "--solver", "bcd", "--scheduler", address]
        (tmp_path / "train.yaml").write_text("worker_timeout: 1\n")
        pipeline = f"train: {{solver: bcd, out: run, store: {stores / 'train.zarr'}, scheduler: '{address}'"
        (tmp_path / "default.yaml").write_text(pipeline + "}\n")
        (tmp_path / "set.yaml").write_text(pipeline + ", worker_timeout: 1}\n")
        for args in (
            [*train, "--out", tmp_path / "a", "--worker-timeout", "1"],
            [*train, "--out", tmp_path / "b", "--config", tmp_path / "train.yaml"],
            ["run", tmp_path / "default.yaml", "--worker-timeout", "1"],
            ["run", tmp_path / "set.yaml"],
        ):
            started = time.monotonic()
            result = run(*args, ok=False)
            assert result.exit_code == 2, result.output
            assert f"the Dask scheduler at {address} has no workers (waited 1 s)" in result.output
            assert time.monotonic() - started < 45  # not the default 60 s (a loaded machine starts slowly)
    for command in ([*train, "--out", tmp_path / "c"], ["run", tmp_path / "set.yaml"]):
        for bad in ("0", "-1", "soon"):
            result = run(*command, "--worker-timeout", bad, ok=False)
            assert result.exit_code == 2 and "Invalid value for '--worker-timeout'" in result.output
    help_text = " ".join(run("train", "--help").output.split())
    assert "--worker-timeout SECONDS Seconds without any Dask worker before the run fails (default 60)." in help_text


def test_help_of_threshold_and_run_reads_true():
    """run names all its sections. predict and evaluate share train's --threshold declaration: its text may not say that they save T
    in the model or fit it, and their default is the model's own threshold."""
    for command in ("train", "predict", "evaluate"):
        help_text = " ".join(run(command, "--help").output.split())
        assert "train saves T in the model, for predict and evaluate" in help_text, command
        assert (
            "[default: the model's: for stagewise's probabilities the best micro-F1 on the training rows' held-out "
            "scores, for ppdsparse's margins the best micro-F1 on the training rows (-p fit_threshold=false: 0), "
            "else 0]" in help_text
        ), command
    assert "ingest (and ingest_test) -> train -> evaluate -> predict" in " ".join(run("run", "--help").output.split())


def test_the_options_of_ingest_train_and_run_are_their_declarations():
    """Every declared field with a flag is a click option of its commands, its help the field's."""
    from streamfit.config import TrainOptions
    from streamfit.ingest.hashing import HashingConfig
    from streamfit.ingest.pipeline import IngestOptions
    from streamfit.options import declared

    def offered(command: str) -> dict:
        return {p.name: p for p in main.commands[command].params}

    for command, cls, prefix, skip in (
        ("train", TrainOptions, "", ()),
        ("run", TrainOptions, "", ("solver",)),
        ("ingest", IngestOptions, "", ()),
        ("ingest", HashingConfig, "hashing_", ()),
    ):
        params = offered(command)
        for d in declared(cls):
            if d.option.flag == "" or d.name in skip:  # a shape of its own there (-p, INPUTS, --ngram-max) or none
                continue
            option = params[prefix + d.name]
            assert option.required == d.required  # a required one (ingest --out) has no default: click checks it
            assert d.required or option.default is None  # unset: the file or the default decides
            assert (d.option.off_help or d.option.help).rstrip(".").lower() in option.help.lower(), (command, d.name)
    listing = run("train", "--list-solvers").output
    assert (
        "fbpd: Proximal primal-dual multiclass SVM (Chierchia et al. 2015): the exact Crammer-Singer hinge" in listing
    )
    assert "    link (default identity) [one of identity, softmax]: " in listing
    assert "    stopping (default auto) [one of auto, gap, violation]: " in listing
    assert "stagewise: lam, tol, max_iter, random_state, link, calibration" in " ".join(
        run("train", "--help").output.split()
    )


def _one_line_error(result, *fragments):
    """The command failed with exit status 2 and one `error:` line holding every fragment."""
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert lines[-1].startswith("error: ") and all(f in lines[-1] for f in fragments), result.output
    assert sum(line.startswith("error") for line in lines) == 1, result.output


def _edit_json(file, edit, digest_key=None):
    """Apply `edit` to a JSON file; with digest_key, update that digest over the rest."""
    from streamfit.store.format import json_digest

    record = json.loads(file.read_text())
    edit(record)
    if digest_key:
        record[digest_key] = json_digest(record, digest_key)
    file.write_text(json.dumps(record))


def _swap_first_classes(record):
    record["classes"][:2] = record["classes"][1::-1]


def test_an_edited_manifest_is_one_error_line_from_every_command(stores, tmp_path):
    edited = tmp_path / "edited.zarr"
    shutil.copytree(stores / "train.zarr", edited)
    _edit_json(edited / "manifest.json", _swap_first_classes)
    for args in (["inspect", edited], ["inspect", edited, "--verify"], ["train", edited, "--out", tmp_path / "r"]):
        _one_line_error(run(*args, ok=False), "manifest.json: fails its checksum (manifest_sha256)", "re-ingest")

    def drop_last_chunk(m):
        last = m["chunks"].pop()
        m["n_rows"], m["nnz"] = last["row_start"], m["nnz"] - last["nnz"]
        labels = open_store(str(stores / "train.zarr")).read_chunk(last["id"]).labels  # the counts kept consistent
        m["class_rows"] = (np.array(m["class_rows"]) - np.bincount(labels, minlength=len(m["classes"]))).tolist()

    short = tmp_path / "short.zarr"
    shutil.copytree(stores / "train.zarr", short)
    _edit_json(short / "manifest.json", drop_last_chunk, "manifest_sha256")  # digest updated: the data disagrees
    result = run("inspect", short, "--verify", ok=False)
    assert result.exit_code == 1 and "damaged: " in result.output and "manifest copy in the Zarr root" in result.output
    result = run("train", short, "--solver", "bcd", "--n-workers", "0", "--out", tmp_path / "r2", ok=False)
    _one_line_error(result, "the manifest copy in the Zarr root attributes has another n_rows", "re-ingest the store")


@pytest.mark.parametrize(
    "damage, fragment",
    [
        (lambda d: (d / "model.json").write_text((d / "model.json").read_text()[:80]), "model.json: unreadable"),
        (lambda d: _edit_json(d / "model.json", _swap_first_classes), "model.json: fails its checksum"),
        (lambda d: _edit_json(d / "model.json", lambda r: r.update(kind="tree"), "record_sha256"), "kind 'tree'"),
        (
            lambda d: _edit_json(d / "model.json", lambda r: r.update(n_features=65), "record_sha256"),
            "holds n_features",
        ),
    ],
)
def test_a_damaged_model_is_one_error_line_from_predict_and_evaluate(stores, tmp_path, damage, fragment):
    run("train", stores / "train.zarr", *QUICK_BCD, "--out", tmp_path / "r")
    damage(tmp_path / "r" / "model")
    _one_line_error(run("predict", tmp_path / "r", stores / "test.zarr", "-o", tmp_path / "p.csv", ok=False), fragment)
    _one_line_error(run("evaluate", tmp_path / "r", stores / "test.zarr", ok=False), fragment, "retrain")
    assert not (tmp_path / "p.csv").exists()


def test_nan_weights_with_updated_checksums_are_one_error_line(stores, tmp_path):
    import hashlib
    import io

    run("train", stores / "train.zarr", *QUICK_BCD, "--out", tmp_path / "r")
    model_dir = tmp_path / "r" / "model"
    with np.load(model_dir / "arrays.npz") as z:
        arrays = {k: z[k] for k in z.files}
    name = next(k for k in arrays if k.startswith("coef"))
    arrays[name] = arrays[name].astype(np.float64)
    arrays[name].flat[0] = np.nan
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    (model_dir / "arrays.npz").write_bytes(buf.getvalue())
    digest = hashlib.sha256(buf.getvalue()).hexdigest()
    _edit_json(model_dir / "model.json", lambda r: r.update(arrays_sha256=digest), "record_sha256")
    result = run("predict", tmp_path / "r", stores / "test.zarr", "-o", tmp_path / "p.csv", ok=False)
    _one_line_error(result, f"arrays.npz: array '{name}' holds NaN or infinite values", "retrain")


def test_a_checkpoint_edited_between_a_stop_and_resume_is_refused(stores, tmp_path):
    args = [
        "train",
        stores / "train.zarr",
        "--solver",
        "stagewise",
        "-p",
        "generator=sequential",
        "-p",
        "block_size=16",
    ]
    args += ["--n-workers", "0", "--out", tmp_path / "r", "--time-limit", "0.001s"]
    assert run(*args, ok=False).exit_code == 3  # stopped after its first checkpoint, as a kill would leave it
    step_dir = max((tmp_path / "r" / "checkpoints").glob("step-*"))
    meta = step_dir / "meta.json"
    original = meta.read_text()
    values = json.loads(original)["meta"]["values"]
    key = next(k for k, v in values.items() if type(v) is int)

    def bump(record):
        record["meta"]["values"][key] += 1

    _edit_json(meta, bump)  # as the campaign did: the digest no longer matches
    _one_line_error(run(*args, "--resume", ok=False), "meta.json: fails its checksum", "--overwrite")
    meta.write_text(original)
    _edit_json(meta, lambda r: r["meta"]["values"].update({key: "many"}), "record_sha256")  # digest updated too
    _one_line_error(run(*args, "--resume", ok=False), "'many'", "damaged")
    meta.write_text(original)
    assert run(*args, "--resume", ok=False).exit_code in (0, 3)  # the untouched checkpoint resumes


def test_outputs_that_overlap_an_input_and_a_broken_quote_are_one_error_line(stores, tmp_path):
    """Issue 22 class 4: each ends in exit status 2 and one line naming the path and the fix;
    the inputs are intact."""
    src = tmp_path / "digits.svm"
    shutil.copy(stores / "digits.svm", src)
    before = src.read_bytes()
    split = ("--test-size", "0.25", "--no-hash")
    for args, fragment in [
        (("--out", tmp_path / "s", "--test-out", tmp_path / "s" / "test", *split), "--test-out"),
        (("--out", tmp_path / "s" / "train", "--test-out", tmp_path / "s", *split), "overlap"),
        (("--out", src, "--no-hash", "--overwrite"), "overlaps the input"),
        (("--out", tmp_path, "--no-hash", "--overwrite"), "overlaps the input"),
    ]:
        _one_line_error(run("ingest", src, *args, ok=False), fragment)
    assert src.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["digits.svm"]
    run_dir = tmp_path / "run"
    run("train", stores / "train.zarr", *QUICK_BCD, "--out", run_dir)
    table = tmp_path / "rows.csv"
    table.write_text("text,label\nhello,a\n")
    result = run("predict", run_dir, table, "--out", table, ok=False)
    _one_line_error(result, "rows.csv overlaps the input", "choose another --out")
    assert table.read_text() == "text,label\nhello,a\n"
    table.write_text('text,label\nhello world,a\ngood day,"b\nthird,a\n')
    result = run("ingest", table, "--out", tmp_path / "q", ok=False)
    _one_line_error(result, "rows.csv:3: a quote opened in this record is never closed", "close the quote")


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    """A corpus of broken inputs and option files, each one thing wrong."""
    import h5py

    from streamfit.store import StoreWriter

    d = tmp_path_factory.mktemp("broken")
    (d / "a.csv").write_text("text,label\n" + "".join(f"word {i},{'xy'[i % 2]}\n" for i in range(20)))
    np.savez(d / "object.npz", X=np.array([{"a": 1}] * 3, dtype=object), y=np.array([0, 1, 0]))
    np.savez(d / "object_y.npz", X=np.ones((3, 2)), y=np.array([{"a": 1}, 1, 2], dtype=object))
    with h5py.File(d / "empty_y.h5", "w") as f:
        f["X"], f["y"] = np.ones((3, 4)), np.zeros(0, dtype=np.int64)
    with h5py.File(d / "null_y.h5", "w") as f:
        f["X"] = np.ones((3, 4))
        f.create_dataset("y", dtype="f8")
    (d / "classes.yaml").write_text(f"ingest:\n  inputs: [{d / 'a.csv'}]\n  out: {d / 'o.zarr'}\n  classes: [x, x]\n")
    (d / "encoding.yaml").write_text(
        f"ingest:\n  inputs: [{d / 'a.csv'}]\n  out: {d / 'o.zarr'}\n  source_options: {{encoding: 1}}\n"
    )
    (d / "tag.yaml").write_text('params: !!python/object/apply:os.system ["echo owned > owned.txt"]\n')
    StoreWriter(str(d / "no_rows.zarr")).close(n_features=64, classes=[str(c) for c in range(10)])
    return d


TAG = 'x=!!python/object/apply:os.system ["echo owned > owned.txt"]'


def _broken_commands(d, stores, run_dir):
    """(argv, fragments of the one error line): every command, each given a broken input or option."""
    out = ["--out", d / "o.zarr"]
    return [
        (["ingest", d / "a.csv", *out, "--classes", "x,x"], ["--classes 'x,x'", "listed twice"]),
        (["ingest", d / "a.csv", *out, "--classes", "x,,y"], ["--classes", "an empty name"]),
        (["ingest", d / "a.csv", *out, "--encoding", "no-such"], ["encoding='no-such'", "utf-8"]),
        (["ingest", d / "a.csv", *out, "--label-separator", ""], ["label_separator: empty"]),
        (["ingest", d / "a.csv", *out, "--text-field", ","], ["text_field=','", "comma-separated"]),
        (["ingest", d / "a.csv", *out, "--option", "encoding=1"], ["encoding=1: expected text"]),
        (["ingest", d / "a.csv", *out, "--option", "multilabel=3"], ["multilabel=3: expected true or false"]),
        (["ingest", d / "a.csv", *out, "--option", TAG], ["--option", "not a plain YAML value", "quote it"]),
        (["ingest", d / "a.csv", *out, "--option", "=1"], ["--option '=1'", "KEY"]),
        (["ingest", d / "object.npz", "--no-hash", *out], ["object.npz", "array 'X'"]),
        (["ingest", d / "empty_y.h5", "--no-hash", *out], ["empty_y.h5", "'y' has 0"]),
        (["ingest", d / "object_y.npz", "--no-hash", *out], ["object_y.npz: array 'y' holds Python objects"]),
        (["ingest", d / "null_y.h5", "--no-hash", *out], ["null_y.h5: dataset 'y' holds no values"]),
        (
            ["ingest", d / "a.csv", *out, "--test-size", "0.01", "--test-out", d / "t.zarr"],
            ["--test-size 0.01 leaves the test store without rows", "raise --test-size"],
        ),
        (["inspect", d / "missing.zarr"], ["missing.zarr"]),
        (["transpose", d / "missing.zarr"], ["missing.zarr"]),
        (["train", stores / "train.zarr", "--out", d / "r", "-p", TAG], ["--param", "not a plain YAML value"]),
        (["train", stores / "train.zarr", "--out", d / "r", "--config", d / "tag.yaml"], ["tag.yaml", "line 1"]),
        (["train", stores / "train.zarr", "--out", d / "r", "--time-limit", "0"], ["--time-limit '0'"]),
        (["evaluate", run_dir, d / "no_rows.zarr"], ["no_rows.zarr: holds no rows", "nothing to evaluate"]),
        (["evaluate", d / "missing", stores / "test.zarr"], ["missing"]),
        (["predict", run_dir, d / "a.csv", "-o", d / "p.csv", "--option", "encoding=1"], ["encoding=1"]),
        (["predict", run_dir, d / "a.csv", "-o", d / "p.csv", "--option", TAG], ["not a plain YAML value"]),
        (["run", d / "classes.yaml"], ["classes.yaml: key 'ingest.classes'", "listed twice"]),
        (["run", d / "encoding.yaml"], ["encoding.yaml: section 'ingest'", "encoding=1"]),
        (["run", d / "tag.yaml"], ["tag.yaml: not valid YAML (line 1"]),
    ]


def test_broken_inputs_and_options_are_one_error_line_from_every_command(stores, broken, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a YAML tag, if it were run, would leave owned.txt
    run_dir = tmp_path / "run"
    run("train", stores / "train.zarr", "--solver", "bcd", "-p", "max_iter=2", "--n-workers", "0", "--out", run_dir)
    for argv, fragments in _broken_commands(broken, stores, run_dir):
        _one_line_error(run(*argv, ok=False), *fragments)
    assert not (tmp_path / "owned.txt").exists()
    for made in ("o.zarr", "t.zarr", "p.csv", "r"):
        assert not (broken / made).exists(), made


def test_a_full_disk_during_transpose_is_one_error_line_and_leaves_the_store(stores, tmp_path, monkeypatch):
    import errno

    from streamfit.store import csc

    store = tmp_path / "s.zarr"
    shutil.copytree(stores / "train.zarr", store)

    def no_space(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(csc, "_write_block", no_space)
    _one_line_error(run("transpose", store, ok=False), "csc.partial: cannot write", "the disk is full")
    assert open_store(str(store)).manifest.csc is None and not (store / "csc.partial").exists()
    assert open_store(str(store)).verify() == []


def test_an_internal_error_is_one_line_and_its_traceback_is_logged_with_verbose(stores, monkeypatch, caplog):
    import streamfit.store

    def bug(_path):
        raise KeyError("a bug")

    monkeypatch.setattr(streamfit.store, "open_store", bug)
    result = run("inspect", stores / "train.zarr", ok=False)
    _one_line_error(result, "KeyError: 'a bug'", "an internal error in `streamfit inspect`", "please report it")
    assert "Traceback" not in caplog.text
    verbose = run("-v", "inspect", stores / "train.zarr", ok=False)
    _one_line_error(verbose, "KeyError: 'a bug'")
    assert "Traceback" in caplog.text and 'raise KeyError("a bug")' in caplog.text
    caplog.clear()  # -v after the subcommand, as -q (issue 20, item 12)
    _one_line_error(run("inspect", stores / "train.zarr", "-v", ok=False), "KeyError: 'a bug'")
    assert "Traceback" in caplog.text


def test_running_out_of_memory_is_one_error_line(stores, monkeypatch, caplog):
    import streamfit.store

    def too_big(_path):
        raise MemoryError()

    monkeypatch.setattr(streamfit.store, "open_store", too_big)
    result = run("inspect", stores / "train.zarr", ok=False)
    _one_line_error(result, "`streamfit inspect` ran out of memory", "fewer hashed features")
    assert "Traceback" not in caplog.text


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["ingest", "x.svm", "--out", "y", "--batch-size", "0"], ["'--batch-size'", "streamfit ingest --help"]),
        (["train", "s.zarr", "--out", "r", "--bogus"], ["No such option '--bogus'", "streamfit train --help"]),
        (["train", "s.zarr"], ["Missing option '--out'", "streamfit train --help"]),
        (["--bogus", "inspect", "s.zarr"], ["No such option '--bogus'", "streamfit --help"]),
    ],
)
def test_a_bad_option_is_one_error_line(tmp_path, monkeypatch, args, fragments):
    from click.testing import CliRunner

    from streamfit.cli import main

    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, args)
    _one_line_error(result, *fragments)
    assert "Usage:" not in result.output


def test_log_file_in_json_lines_holds_the_progress_lines_and_the_error(stores, tmp_path):
    log = tmp_path / "job.log"
    train = ["train", stores / "train.zarr", "--solver", "bcd", "-p", "max_iter=3", "-p", "tol=1e-12"]
    run("--log-file", log, "--log-format", "json", *train, "--n-workers", "0", "--out", tmp_path / "r")
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert all({"time", "level", "logger", "message"} <= e.keys() for e in entries)
    assert any(e["message"].startswith("training bcd on") for e in entries)
    steps = [e for e in entries if e["logger"] == "streamfit.runlog"]
    assert steps[0]["message"].startswith("bcd: step 1/3, ") and steps[0]["step"] == 1
    assert (steps[-1]["step"], steps[-1]["planned"], steps[-1]["eta_s"]) == (3, 3, 0.0)
    assert steps[-1]["elapsed_s"] >= steps[0]["elapsed_s"] > 0
    failed = run(
        "--log-file", log, "--log-format", "json", *train, "-p", "max_itr=3", "--out", tmp_path / "r2", ok=False
    )
    last = json.loads(log.read_text().splitlines()[-1])
    assert failed.exit_code == 2 and last["level"] == "ERROR" and "max_itr" in last["message"]
    assert last["message"] in failed.output  # the same one line as on stderr


def test_with_json_logs_every_line_on_stderr_is_json_the_error_line_too(stores, tmp_path):
    """`streamfit --log-format json CMD 2> log` (a container's log collector reads stderr): every
    line is one JSON object, the final `error:` line and inspect's `damaged:` lines too (they were
    printed as plain text between the JSON lines), with or without --log-file; the file holds the
    same error record. Text logs keep the plain lines."""
    import subprocess
    import sys

    damaged = tmp_path / "damaged.zarr"
    shutil.copytree(stores / "train.zarr", damaged)
    chunk = damaged / "chunks" / "000001" / "data" / "c" / "0"
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 1
    chunk.write_bytes(bytes(data))
    log = tmp_path / "job.log"
    for args, status, message in (
        (["inspect", tmp_path / "missing.zarr"], 2, "error: "),
        (["inspect", damaged, "--verify"], 1, "damaged: "),
        (["--log-file", log, "--log-format", "json", "evaluate", tmp_path / "no-run", damaged], 2, "error: "),
    ):
        argv = [sys.executable, "-m", "streamfit.cli", *([] if "--log-file" in args else ["--log-format", "json"])]
        done = subprocess.run([str(a) for a in argv + args], capture_output=True, text=True, timeout=300)
        assert done.returncode == status, done.stderr
        entries = [json.loads(line) for line in done.stderr.splitlines()]  # each line JSON
        assert entries and entries[-1]["level"] == "ERROR" and entries[-1]["message"].startswith(message), entries
    assert json.loads(log.read_text().splitlines()[-1])["message"] == entries[-1]["message"]
    text = subprocess.run(
        [sys.executable, "-m", "streamfit.cli", "inspect", str(tmp_path / "missing.zarr")],
        capture_output=True,
        text=True,
    )
    assert text.returncode == 2 and text.stderr.startswith("error: ") and len(text.stderr.splitlines()) == 1


def test_the_cli_imports_no_cluster_store_backend_numba_or_solver_until_a_command_needs_one():
    import subprocess
    import sys

    heavy = [
        "dask",
        "distributed",
        "zarr",
        "pyarrow",
        "h5py",
        "numba",
        "psutil",
        "streamfit.solvers",
        "streamfit.estimators",
    ]
    for command in ("import streamfit.cli", "import streamfit.cli; streamfit.cli.main(['--help'])"):
        code = (
            f"import atexit, sys; atexit.register(lambda: print([m for m in {heavy!r} if m in sys.modules]))\n"
            + command
        )
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip().splitlines()[-1] == "[]", command


def test_the_command_lines_process_exits_with_the_heap_frozen_and_an_embedded_call_leaves_it(stores, tmp_path):
    """main() reading the process's own command line freezes the collector's objects for the exit
    (gc.freeze: the interpreter's finalization then skips its searches for cycles, 0.3-0.4 CPU s
    of a small job), even a cycle made after the command returned, and the exit status, stdout
    and the log file are still complete; main(args) called from Python, as an embedding program
    or a test does, freezes nothing."""
    import subprocess
    import sys

    store, log = str(stores / "train.zarr"), str(tmp_path / "job.log")
    last = (  # registered first: runs last, after streamfit's handler and the logging module's
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0, not any(o is cycle for o in gc.get_objects())))\n"
        "from streamfit.cli import main\n"
    )
    for args, embedded, status in (
        (["inspect", store, "--json"], False, 0),
        (["--log-file", log, "inspect", str(tmp_path / "missing.zarr")], False, 2),
        (["inspect", store, "--json"], True, 0),
    ):
        call = f"main({args!r}, standalone_mode=False)" if embedded else f"sys.argv = ['streamfit', *{args!r}]; main()"
        code = last + f"try:\n    {call}\nexcept SystemExit as e:\n    status = e.code\nelse:\n    status = 0\n"
        code += "cycle = []\ncycle.append(cycle)\nsys.exit(status)\n"
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert result.returncode == status, result.stderr
        assert result.stdout.splitlines()[-1] == f"frozen {not embedded} {not embedded}", (args, result.stdout)
        if status == 0:
            assert json.loads("\n".join(result.stdout.splitlines()[:-1]))["n_rows"] > 0
        else:  # the error line on stderr and in the log file, written by the logging module's exit flush too
            assert "missing.zarr" in result.stderr and "missing.zarr" in open(log).read().splitlines()[-1]


@pytest.mark.slow
def test_a_small_job_in_process_imports_no_cluster_and_only_its_solver(stores, tmp_path):
    """A small train and evaluate run in process (engine auto): Dask, its scheduler, zarr-python and
    the other solvers are never imported (their imports cost a second or more of a small job)."""
    import subprocess
    import sys

    unused = [
        "dask",
        "distributed",
        "bokeh",
        "tornado",
        "pyarrow",
        "zarr",
        "streamfit.solvers.bcd",
        "streamfit.solvers.fbpd",
    ]
    train = ["-q", "train", str(stores / "train.zarr"), "--solver", "ppdsparse", "--out", str(tmp_path / "r")]
    evaluate = ["-q", "evaluate", str(tmp_path / "r"), str(stores / "test.zarr"), "--json"]
    code = (
        "import sys, streamfit.cli\n"
        f"for args in ({train!r}, {evaluate!r}):\n    streamfit.cli.main(args, standalone_mode=False)\n"
        f"print([m for m in {unused!r} if m in sys.modules], 'streamfit.solvers.ppdsparse' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()  # train's one line, evaluate's JSON, the imports
    assert lines[0].startswith("model written to") and lines[-1] == "[] True", result.stdout
    assert json.loads("\n".join(lines[1:-1]))["accuracy"] > 0.9
    assert json.loads((tmp_path / "r" / "run.json").read_text())["engine"] == "inprocess"


@pytest.fixture(scope="module")
def multilabel_stores(tmp_path_factory):
    """A small multilabel train/validation pair: 4 labels from a noisy linear rule."""
    import scipy.sparse as sp

    from streamfit.store import StoreWriter

    d = tmp_path_factory.mktemp("multilabel")
    rng = np.random.default_rng(3)
    X = sp.random(300, 40, density=0.25, random_state=4, format="csr", dtype=np.float32)
    Y = sp.csr_matrix((X @ rng.normal(size=(40, 4)) + 0.3 * rng.normal(size=(300, 4)) > 0.4).astype(np.float32))
    for name, rows in (("train", slice(0, 200)), ("valid", slice(200, 300))):
        w = StoreWriter(str(d / f"{name}.zarr"), chunk_rows=64, multilabel=True)
        w.write_rows(X[rows], Y[rows])
        w.close(n_features=40, classes=["a", "b", "c", "d"])
    return d


@pytest.mark.parametrize(
    "solver, params",
    [
        # probabilities: the threshold of the best micro-F1 on the training rows' leave-one-out scores
        ("stagewise", {"link": "identity", "n_passes": 1, "generator": "sequential"}),
        ("stagewise", {"link": "softmax", "n_passes": 1}),  # per-label logits: threshold 0
        ("bcd", {"max_iter": 30}),
        ("ppdsparse", {}),
    ],
)
def test_multilabel_predict_evaluate_and_estimator_agree(multilabel_stores, tmp_path, solver, params):
    """One decision rule per model, stated in model.json: model.predict, `streamfit predict`'s
    predicted sets and `streamfit evaluate`'s micro-F1 (checked by scikit-learn) all apply it;
    --threshold overrides it for predict and evaluate alike. stagewise's identity link saves the
    threshold of 0.005, 0.01, …, 0.995 with the best micro-F1 (scikit-learn's f1_score of each) on
    the training rows' held-out scores, here (one block of every column) those of refits without
    each row; ppdsparse the margin of −0.99, −0.98, …, 0.99 with the best micro-F1 on the training
    rows, other margins 0."""
    from sklearn.metrics import f1_score

    from streamfit.train import train

    store, valid = multilabel_stores / "train.zarr", multilabel_stores / "valid.zarr"
    train(str(store), solver, str(tmp_path / "run"), params, n_workers=0, progress=False)
    model = load_model(str(tmp_path / "run"))
    expected = 0.0
    X_train, Y_train = open_store(str(store)).to_scipy()
    if params.get("link") == "identity" or solver == "ppdsparse":
        S_train, truth = model.decision_function(X_train), Y_train.toarray().astype(np.int8)
        if solver == "stagewise":  # leave-one-out: ridge on [1, X] with the full set's n·λ, without row i
            A = np.hstack([np.ones((X_train.shape[0], 1)), X_train.toarray()])
            D = np.diag([0.0] + [1.0] * X_train.shape[1]) * A.shape[0] * model.info["lam"]
            S_train = np.array(
                [
                    A[i] @ np.linalg.solve(A[rest].T @ A[rest] + D, A[rest].T @ truth[rest])
                    for i in range(len(A))
                    for rest in [np.arange(len(A)) != i]
                ]
            )
        grid = np.arange(1, 200) / 200 if solver == "stagewise" else np.arange(-99, 100) / 100
        f1 = np.array([f1_score(truth, (S_train > t).astype(np.int8), average="micro", zero_division=0) for t in grid])
        default = 0.5 if solver == "stagewise" else 0.0
        best = grid[f1 == f1.max()]  # on ties: stagewise the smallest, ppdsparse the margin nearest 0
        expected = best[0] if solver == "stagewise" else best[np.argmin(np.abs(best))]
        assert expected != default and max(f1) > f1_score(truth, (S_train > default).astype(np.int8), average="micro")
    record = json.loads((tmp_path / "run" / "model" / "model.json").read_text())
    assert record["decision"]["threshold"] == model.decision_threshold == expected
    X, Y = open_store(str(valid)).to_scipy()
    Y = Y.toarray().astype(np.int8)
    for threshold in (None, 0.25):
        given = [] if threshold is None else ["--threshold", threshold]
        pred = model.predict(X, threshold)
        rule = model.decision_function(X) > (expected if threshold is None else threshold)
        assert np.array_equal(pred, rule.astype(np.int8))
        result = json.loads(run("evaluate", tmp_path / "run", valid, "--json", *given).output)
        assert abs(result["micro_f1"] - f1_score(Y, pred, average="micro", zero_division=0)) < 1e-12
        assert abs(result["macro_f1"] - f1_score(Y, pred, average="macro", zero_division=0)) < 1e-12 or (
            not pred.any(axis=0).all()  # evaluate averages over the labels that occur; scikit-learn over all
        )
        assert result["labels_per_row"] == pred.sum() / len(pred)
        if solver == "stagewise":  # probabilities: the mean binary cross-entropy over rows and labels
            P = np.clip(model.predict_proba(X), 1e-15, 1 - 1e-15)
            assert np.isclose(result["log_loss"], -np.mean(np.where(Y == 1, np.log(P), np.log1p(-P))), rtol=1e-12)
        else:  # margins give no probabilities
            assert "log_loss" not in result
        run("predict", tmp_path / "run", valid, "--out", tmp_path / "p.jsonl", *given)
        sets = [json.loads(line)["predicted"] for line in (tmp_path / "p.jsonl").read_text().splitlines()]
        assert sets == [model.classes_[row.astype(bool)].tolist() for row in pred]
    if solver == "stagewise" and params["link"] == "identity":
        from streamfit import StagewiseLSClassifier

        clf = StagewiseLSClassifier(n_passes=1, generator="sequential", random_state=0).fit(X_train, Y_train.toarray())
        assert clf.model_.decision_threshold == expected  # the CLI's model, fitted in memory
        S = clf.model_.decision_function(X)
        assert np.array_equal(clf.predict(X), (S > expected).astype(np.int8))
        assert np.array_equal(clf.decision_function(X) > 0, S > expected)


def test_threshold_fit_on_valid_and_refusals(multilabel_stores, stores, tmp_path):
    """train --threshold fit saves the micro-F1-best threshold of --valid; a number is saved as
    given; 'fit' without --valid, on a multiclass store, or in evaluate is one error line."""
    from streamfit.metrics import fit_threshold

    store, valid = multilabel_stores / "train.zarr", multilabel_stores / "valid.zarr"
    common = ("--solver", "bcd", "-p", "max_iter=20", "--n-workers", "0")
    run("train", store, "--out", tmp_path / "fit", "--valid", valid, "--threshold", "fit", *common)
    model = load_model(str(tmp_path / "fit"))
    t, f1 = fit_threshold(model, open_store(str(valid)))
    assert model.decision_threshold == t and model.info["threshold_fit"]["micro_f1"] == f1
    assert json.loads(run("evaluate", tmp_path / "fit", valid, "--json").output)["micro_f1"] == f1
    run("train", store, "--out", tmp_path / "set", "--threshold", "-0.2", *common)
    assert load_model(str(tmp_path / "set")).decision_threshold == -0.2
    for args, fragment in (
        (("train", store, "--out", tmp_path / "a", "--threshold", "fit", *common), "pass --valid"),
        (("train", stores / "train.zarr", "--out", tmp_path / "b", "--threshold", "0.5", *common), "multiclass"),
        (("train", store, "--out", tmp_path / "c", "--threshold", "high", *common), "--threshold 'high'"),
        (("evaluate", tmp_path / "set", valid, "--threshold", "fit"), "give a number here"),
    ):
        result = run(*args, ok=False)
        assert result.exit_code == 2 and fragment in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1


def test_evaluate_per_label_table(multilabel_stores, tmp_path):
    store, valid = multilabel_stores / "train.zarr", multilabel_stores / "valid.zarr"
    run("train", store, "--out", tmp_path / "run", "--solver", "bcd", "-p", "max_iter=10", "--n-workers", "0")
    lines = run("evaluate", tmp_path / "run", valid, "--per-label").output.splitlines()
    assert "micro_f1=" in lines[0] and lines[1].split() == ["class", "precision", "recall", "f1", "support"]
    assert [line.split()[0] for line in lines[2:]] == ["a", "b", "c", "d"]


def test_an_unconverged_fbpd_run_warns_on_the_command_line(stores, tmp_path, caplog):
    """The README's promise, for the CLI as for the estimators: stopping at max_iter is a warning."""
    run(
        "train",
        stores / "train.zarr",
        "--out",
        tmp_path / "r",
        "--solver",
        "fbpd",
        "-p",
        "max_iter=2",
        "--n-workers",
        "0",
    )
    assert "fbpd: not converged after 2 steps" in caplog.text and "raise -p max_iter" in caplog.text


def _endless_train_on_two_workers(stores, tmp_path, **popen):
    """`streamfit train` of fbpd that never ends by itself (tol 0) on a 2-worker embedded cluster,
    started with `popen` and waited for until it has taken a step (every wait bounded): (the
    process, its run directory, its stderr file, its child processes then)."""
    import subprocess
    import sys
    import time

    import psutil

    run_dir = tmp_path / "run"
    argv = [sys.executable, "-m", "streamfit.cli", "train", stores / "train.zarr", "--solver", "fbpd"]
    argv += ["-p", "max_iter=100000", "-p", "tol=0", "-p", "gap_tol=0"]
    argv += ["--n-workers", "2", "--dashboard-address", "127.0.0.1:0", "--out", run_dir]
    stderr = tmp_path / "stderr.txt"
    with open(stderr, "w") as err:
        proc = subprocess.Popen([str(a) for a in argv], stdout=subprocess.DEVNULL, stderr=err, **popen)
    try:
        deadline = time.monotonic() + 300
        while not (run_dir / "metrics.jsonl").exists() or not (run_dir / "metrics.jsonl").read_text().strip():
            assert proc.poll() is None, stderr.read_text()
            assert time.monotonic() < deadline, "no step within 300 s"
            time.sleep(0.02)
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) >= 4, children  # forkserver, resource tracker, 2 nannies (and their workers)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc, run_dir, stderr, children


def _signal_the_job_on_two_workers(stores, tmp_path, terminal_job, sig, status):
    """_endless_train_on_two_workers in a process group of its own (a job that a terminal started),
    sent `sig` to the whole group (a terminal's Ctrl-C, its close), waited for to exit with
    `status`, its child processes then gone: (the run directory, its stderr)."""
    import signal

    import psutil

    proc, run_dir, stderr, children = _endless_train_on_two_workers(stores, tmp_path, **terminal_job)
    try:
        os.killpg(proc.pid, sig)
        assert proc.wait(timeout=120) == status, stderr.read_text()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    gone, alive = psutil.wait_procs(children, timeout=30)
    assert not alive, alive
    return run_dir, stderr.read_text()


@pytest.mark.slow
def test_sigterm_stops_a_run_on_the_embedded_cluster_at_a_checkpoint(stores, tmp_path):
    """SIGTERM to `streamfit train` on a 2-worker embedded cluster, once it has taken a step
    (streamfit.shutdown: the handler sets a flag, the driver stops before its next step): the
    last step is checkpointed, exit status 143, one line that says how to continue, run.json
    says so, the cluster shut down (no child process left: workers, nannies, forkserver,
    resource tracker) and no warning of leaked semaphores. The run never ends by itself
    (tol 0), so the signal cannot come after its end; every wait is bounded."""
    import signal

    import psutil

    proc, run_dir, stderr, children = _endless_train_on_two_workers(stores, tmp_path)
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM, stderr.read_text()
    finally:
        proc.kill()
        proc.wait()
    gone, alive = psutil.wait_procs(children, timeout=30)
    assert not alive, alive
    text = stderr.read_text()
    step = json.loads((run_dir / "checkpoints" / "LATEST").read_text())["step"]
    assert step == json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])["step"] >= 1
    assert text.splitlines()[-1] == (
        f"stopped: terminated by SIGTERM; {run_dir}: checkpoint of step {step} saved; the same command plus "
        "--resume continues"
    ), text
    assert "SIGTERM: stopping at the next safe point" in text, text
    assert "leaked" not in text and "resource_tracker" not in text and "Exception ignored" not in text, text
    record = json.loads((run_dir / "run.json").read_text())
    assert (record["status"], record["step"]) == ("stopped by SIGTERM", step)


@pytest.mark.slow
def test_ctrl_c_on_a_terminal_stops_a_run_on_the_embedded_cluster_with_one_line(stores, tmp_path, terminal_job):
    """Ctrl-C on a terminal sends SIGINT to the whole foreground process group: the driver and
    the embedded cluster's worker processes. The driver alone reports it (one `stopped:` line,
    status 130, the checkpoints kept) and closes the cluster; the workers ignore SIGINT (the
    forkserver they are forked from sets it aside first: streamfit.worker_signals). Each worker
    printed its own KeyboardInterrupt traceback (about 30 lines), and the driver warned that a
    worker had left the cluster during a pass. The run never ends by itself (tol 0), so the
    signal cannot come after its end; every wait is bounded."""
    import signal

    run_dir, text = _signal_the_job_on_two_workers(stores, tmp_path, terminal_job, signal.SIGINT, 130)
    assert "Traceback" not in text and "KeyboardInterrupt" not in text and "left the cluster" not in text, text
    assert text.splitlines()[-1] == (
        "stopped: interrupted (Ctrl-C); the checkpoints saved so far are kept: the same command plus --resume "
        "continues from the last one"
    ), text
    assert json.loads((run_dir / "checkpoints" / "LATEST").read_text())["step"] >= 0  # a checkpoint kept


def _assert_the_model_of_an_undisturbed_run(train: list, run_dir, reference_dir) -> None:
    """The model in `run_dir` is bitwise that of `streamfit TRAIN --out reference_dir` run now."""
    from streamfit.model import load_model

    reference = run(*train, "--out", reference_dir)
    assert reference.exit_code == 0, reference.output
    got, want = load_model(str(run_dir))._arrays(), load_model(str(reference_dir))._arrays()
    assert got.keys() == want.keys()
    for key in want:
        assert np.array_equal(got[key], want[key]), key


SIGHUP_LINE = (
    "stopped: hung up by SIGHUP (its terminal closed; start it with nohup, or from a batch system, to keep it "
    "running); {run_dir}: checkpoint of step {step} saved; the same command plus --resume continues"
)


@pytest.mark.slow
def test_sighup_on_a_run_on_the_embedded_cluster_is_a_stop_at_a_checkpoint(stores, tmp_path, terminal_job):
    """A closed terminal sends SIGHUP to the command's whole process group (the shell forwards it
    to its job): the driver and the embedded cluster's workers. On main the driver died of it
    with status 129 and no line; now it is a stop as a SIGTERM's: the last step checkpointed, one
    line naming SIGHUP and the way to continue, status 129, the cluster shut down. The workers
    ignore SIGHUP (streamfit.worker_signals), so no worker is lost before the driver stops."""
    import signal

    run_dir, text = _signal_the_job_on_two_workers(stores, tmp_path, terminal_job, signal.SIGHUP, 129)
    step = json.loads((run_dir / "checkpoints" / "LATEST").read_text())["step"]
    assert text.splitlines()[-1] == SIGHUP_LINE.format(run_dir=run_dir, step=step), text
    assert "Traceback" not in text and "left the cluster" not in text and "leaked" not in text, text
    record = json.loads((run_dir / "run.json").read_text())
    assert (record["status"], record["step"]) == ("stopped by SIGHUP", step)


@pytest.mark.slow
@pytest.mark.parametrize("stderr_to", ["file", "closed terminal"])
def test_sighup_stops_train_at_a_checkpoint_in_the_log_file_and_resume_gives_the_same_model(
    digits_cli_store, tmp_path, terminal_job, stderr_to
):
    """`streamfit --log-file LOG train` (in process) sent SIGHUP after its second step, as a
    closed terminal's shell sends its job: status 129, the `stopped:` line naming SIGHUP in the
    log file (and on stderr, where it can still be written), and the same command plus --resume
    ends with the model of an uninterrupted run, bitwise. With stderr a terminal (a pty) whose
    other end is closed just before the signal, every write to it raises EIO: the stop is still
    the same (the line in the log file alone). On main: status 129 from the kernel, no line."""
    import pty
    import signal
    import subprocess
    import sys
    import time

    train = ["train", digits_cli_store, "--solver", "fbpd", "-p", "max_iter=300", "-p", "tol=0", "-p", "gap_tol=0"]
    train += ["--n-workers", "0"]
    log_file, run_dir = tmp_path / "train.log", tmp_path / "run"
    argv = [sys.executable, "-m", "streamfit.cli", "--log-file", log_file, *train, "--out", run_dir]
    terminal, stderr = (
        pty.openpty() if stderr_to == "closed terminal" else (None, os.open(tmp_path / "err", os.O_WRONLY | os.O_CREAT))
    )
    try:
        proc = subprocess.Popen([str(a) for a in argv], stdout=subprocess.DEVNULL, stderr=stderr, **terminal_job)
    finally:
        os.close(stderr)
    metrics = run_dir / "metrics.jsonl"
    try:
        deadline = time.monotonic() + 300
        while not metrics.exists() or len(metrics.read_text().splitlines()) < 2:
            assert proc.poll() is None, log_file.read_text()
            assert time.monotonic() < deadline, "no second step within 300 s"
            time.sleep(0.005)
        if terminal is not None:
            os.close(terminal)  # the terminal closes: the kernel hangs its pty up, then SIGHUP comes
        os.killpg(proc.pid, signal.SIGHUP)
        assert proc.wait(timeout=120) == 128 + signal.SIGHUP, log_file.read_text()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    step = json.loads((run_dir / "checkpoints" / "LATEST").read_text())["step"]
    assert 2 <= step < 300
    line = SIGHUP_LINE.format(run_dir=run_dir, step=step)
    assert log_file.read_text().splitlines()[-1].endswith(line), log_file.read_text()
    if terminal is None:
        assert (tmp_path / "err").read_text().splitlines()[-1] == line
    resumed = subprocess.run(
        [str(a) for a in [sys.executable, "-m", "streamfit.cli", "-q", *train, "--out", run_dir, "--resume"]],
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stderr
    _assert_the_model_of_an_undisturbed_run(train, run_dir, tmp_path / "reference")


@pytest.mark.slow
def test_a_train_under_nohup_runs_on_through_sighup_to_the_model_of_an_undisturbed_run(
    digits_cli_store, tmp_path, terminal_job
):
    """`nohup streamfit train …` (the real nohup: SIGHUP ignored from the start) sent SIGHUP after
    its second step, as its closed terminal would: it is not a stop request (nohup's purpose), the
    command runs to its end, status 0, the model bitwise that of an undisturbed run. Taking SIGHUP
    as a stop while nohup had it ignored would end it with 129 after that step."""
    import shutil
    import signal
    import subprocess
    import sys
    import time

    nohup = shutil.which("nohup")
    assert nohup is not None, "coreutils' nohup is not on PATH"
    train = ["train", digits_cli_store, "--solver", "fbpd", "-p", "max_iter=60", "-p", "tol=0", "-p", "gap_tol=0"]
    train += ["--n-workers", "0"]
    run_dir = tmp_path / "run"
    argv = [nohup, sys.executable, "-m", "streamfit.cli", "-q", *train, "--out", run_dir]
    proc = subprocess.Popen(
        [str(a) for a in argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, **terminal_job
    )
    metrics = run_dir / "metrics.jsonl"
    try:
        deadline = time.monotonic() + 300
        while not metrics.exists() or len(metrics.read_text().splitlines()) < 2:
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "no second step within 300 s"
            time.sleep(0.005)
        os.killpg(proc.pid, signal.SIGHUP)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert json.loads((run_dir / "run.json").read_text())["status"] != "stopped by SIGHUP"
    _assert_the_model_of_an_undisturbed_run(train, run_dir, tmp_path / "reference")


# the CLI, run after Store._read_from_disk is made to send its own process SIGTERM while it reads
# the second chunk; at exit it prints the chunks read
SIGTERM_AT_THE_SECOND_CHUNK = """
import atexit, os, signal, sys
from streamfit.cli import main
from streamfit.store.store import Store
read, reads = Store._read_from_disk, []
def signalled(self, i, verify):
    reads.append(i)
    if len(reads) == 2:
        os.kill(os.getpid(), signal.SIGTERM)
    return read(self, i, verify)
Store._read_from_disk = signalled
atexit.register(lambda: print("chunks read:", reads))
main(sys.argv[1:], prog_name="streamfit")
"""


@pytest.mark.slow
def test_sigterm_stops_evaluate_between_chunks_with_one_line_and_status_143(stores, tmp_path):
    """A SIGTERM while `streamfit evaluate` reads the second of 4 chunks (streamfit.shutdown; the
    guard is installed for every command now, as for train): it stops before the third, prints
    nothing on stdout but the chunks read, one line on stderr and exits 143. (inspect's and
    transpose's stops: tests/store/test_store.py, tests/store/test_csc.py; run's evaluate
    section: tests/test_jobs.py.)"""
    import signal
    import subprocess
    import sys

    store = tmp_path / "s.zarr"
    shutil.copytree(stores / "train.zarr", store)
    run_dir = tmp_path / "run"
    run("train", store, "--solver", "bcd", "-p", "max_iter=2", "--n-workers", "0", "--out", run_dir)
    done = subprocess.run(
        [sys.executable, "-c", SIGTERM_AT_THE_SECOND_CHUNK, "evaluate", str(run_dir), str(store)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert done.stdout == "chunks read: [0, 1]\n", done.stdout
    # the one line (the watchdog's warning that a SIGTERM came is another thread's: before or after it)
    stopped = [line for line in done.stderr.splitlines() if line.startswith("stopped:")]
    left = f"{store}: not evaluated to the end (evaluate writes nothing); run the command again"
    assert stopped == [f"stopped: terminated by SIGTERM; {left}"], done.stderr
    assert "Traceback" not in done.stderr, done.stderr


# the CLI, run after distributed's process start is made to send the job's whole process group
# the signal named by argv[1] (a batch system's SIGTERM, a terminal's Ctrl-C) once the embedded
# cluster's worker process number argv[2] has started; the time it was sent goes to argv[3]
SIGNAL_AS_THE_CLUSTER_STARTS = """
import os, signal, sys, time
from distributed.process import AsyncProcess
from streamfit.cli import main
start, started, sig = AsyncProcess.start, [], getattr(signal, sys.argv[1])
async def started_then_signalled(self):
    await start(self)
    started.append(self)
    if len(started) == int(sys.argv[2]):
        with open(sys.argv[3], "w") as sent:
            sent.write(repr(time.time()))
        os.killpg(os.getpgrp(), sig)
AsyncProcess.start = started_then_signalled
main(sys.argv[4:], prog_name="streamfit")
"""


CLUSTER_START_SIGTERM = (
    "stopped: terminated by SIGTERM; the embedded Dask cluster was starting, nothing was computed; run the "
    "same command again"
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig, after, status, line",
    [
        ("SIGTERM", 2, 143, CLUSTER_START_SIGTERM),
        # the forkserver killed before it forks the second worker (fix33)
        ("SIGTERM", 1, 143, CLUSTER_START_SIGTERM),
        (
            "SIGINT",
            2,
            130,
            "stopped: interrupted (Ctrl-C); the checkpoints saved so far are kept: the same command plus --resume "
            "continues from the last one",
        ),
    ],
)
def test_a_signal_to_the_job_while_the_embedded_cluster_starts_is_a_stop_in_one_line(
    stores, tmp_path, terminal_job, sig, after, status, line
):
    """qa32: a SIGTERM to the whole job (driver, forkserver and workers) while the embedded
    cluster's workers were starting also ended them, LocalCluster raised "Nanny failed to start",
    and train ended with `error: RuntimeError: Nanny failed to start. (an internal error …; please
    report it …)`, exit 2; a Ctrl-C there printed the right line, then distributed's atexit close
    of the half-started cluster printed 20 lines of an AssertionError's traceback. A SIGTERM that
    ended the forkserver before it forked the second worker printed the nanny's 30-line EOFError
    and waited out the grace period (qa32). Each is now the stop it was asked for, in one line
    with its status, within seconds; the same command again trains."""
    import subprocess
    import sys
    import time

    run_dir, sent = tmp_path / "run", tmp_path / "sent"
    argv = ["train", str(stores / "train.zarr"), "--solver", "bcd", "-p", "max_iter=2", "--n-workers", "2"]
    done = subprocess.run(
        [sys.executable, "-c", SIGNAL_AS_THE_CLUSTER_STARTS, sig, str(after), sent, *argv, "--out", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "STREAMFIT_SIGTERM_GRACE": "60"},
        **terminal_job,  # a process group of its own, SIGINT at its default: a job as a shell runs it
    )
    assert time.time() - float(sent.read_text()) < 20  # main's, after one worker: the 60-s grace period
    assert done.returncode == status, done.stderr
    # the one line (the SIGTERM watchdog's warning that a SIGTERM came is another thread's)
    lines = [text for text in done.stderr.splitlines() if not text.startswith(("INFO", "WARNING streamfit.shutdown"))]
    assert lines == [line], done.stderr
    assert run(*argv[:6], "--n-workers", "0", "--out", run_dir).exit_code == 0  # the same command, in process


def test_the_walkthroughs_text_and_archive_commands_give_its_outputs(tmp_path):
    """docs/walkthrough.md, sections 1 and 2, as a user runs them on the shipped inputs: the
    errors that ask for --no-header and --subset, the stores, evaluate's accuracy (the one the page
    shows), and predictions that carry the ids and agree with the labels in the raw file
    (issue 20, "Done when")."""
    import csv
    import gzip

    from sklearn.metrics import accuracy_score, f1_score

    data = os.path.join(REPO, "tests", "data", "walkthrough")
    news, clinic = os.path.join(data, "news-train.txt.gz"), os.path.join(data, "clinic.tar.gz")
    out = tmp_path / "news-train.zarr"
    headerless = run("ingest", news, "--out", out, ok=False)
    assert headerless.exit_code == 2 and "pass --no-header and column numbers" in headerless.output
    run("ingest", news, "--no-header", "--label-field", "0", "--id-field", "1", "--text-field", "2", "--out", out)
    run("ingest", os.path.join(data, "news-test.txt.gz"), "--like", out, "--out", tmp_path / "news-test.zarr")
    run("train", out, "--n-workers", "0", "--out", tmp_path / "news-run", "-q")
    evaluated = run("evaluate", tmp_path / "news-run", tmp_path / "news-test.zarr").output
    with open(os.path.join(REPO, "docs", "walkthrough.md"), encoding="utf-8") as f:
        assert evaluated in f.read().splitlines(keepends=True)  # the page shows this line
    predictions = tmp_path / "news-predictions.csv"
    run("predict", tmp_path / "news-run", os.path.join(data, "news-test.txt.gz"), "--out", predictions)
    with gzip.open(os.path.join(data, "news-test.txt.gz"), "rt") as f:
        truth = {line.split("\t")[1]: line.split("\t")[0] for line in f}
    rows = list(csv.DictReader(predictions.open()))
    assert [r["id"] for r in rows] == list(truth)
    # evaluate's scores are those of predict's labels against the raw file's, by scikit-learn
    y_true, y_pred = list(truth.values()), [r["label_1"] for r in rows]
    metrics = dict(item.split("=") for item in evaluated.split())
    assert metrics["n_samples"] == str(len(rows))
    for name, value in [
        ("accuracy", accuracy_score(y_true, y_pred)),
        ("macro_f1", f1_score(y_true, y_pred, average="macro")),
    ]:
        assert metrics[name] == f"{value:.4f}"
    assert metrics["micro_f1"] == metrics["accuracy"]  # one label a row

    several = run("ingest", clinic, "--out", tmp_path / "c.zarr", ok=False)
    assert "holds several folders of class folders: clinic/test, clinic/training" in several.output
    run("ingest", clinic, "--subset", "training", "--out", tmp_path / "clinic-train.zarr")
    like = ["--like", tmp_path / "clinic-train.zarr", "--out", tmp_path / "clinic-test.zarr"]
    run("ingest", clinic, "--subset", "clinic/test", *like)
    sizes = [open_store(str(tmp_path / f"clinic-{s}.zarr")).n_rows for s in ("train", "test")]
    assert sizes == [180, 60]


def test_ingest_off_a_terminal_logs_its_progress(tmp_path):
    """A real `streamfit ingest` with stderr a pipe (a batch job's log): a line for the records
    read, then one per chunk written (count of all, elapsed time, ETA), at default verbosity."""
    import re
    import subprocess
    import sys

    data = os.path.join(REPO, "tests", "data", "dna400.libsvm")
    argv = [sys.executable, "-m", "streamfit.cli", "ingest", data, "--no-hash", "--chunk-rows", "100"]
    argv += ["--out", str(tmp_path / "train.zarr"), "--test-size", "0.25", "--test-out", str(tmp_path / "test.zarr")]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    progress = [line for line in result.stderr.splitlines() if line.startswith("INFO streamfit.runlog: ")]
    messages = [line.removeprefix("INFO streamfit.runlog: ") for line in progress]
    n_rows = open_store(tmp_path / "train.zarr").n_rows + open_store(tmp_path / "test.zarr").n_rows
    read = [m for m in messages if m.startswith("ingest: ")]
    written = [m for m in messages if m.startswith("write: ")]
    assert messages == read + written and len(set(messages)) == len(messages), messages
    assert re.fullmatch(rf"ingest: record {n_rows}, \d+:\d\d elapsed", read[-1]), messages
    chunks = -(-n_rows // 100)  # the stage's, train and test rows together
    assert re.fullmatch(r"write: chunk 1/\d+, \d+:\d\d elapsed", written[0]), messages
    assert re.fullmatch(rf"write: chunk {chunks}/{chunks}, \d+:\d\d elapsed, ETA 0:00", written[-1]), messages
    assert "\r" not in result.stderr  # no bar drawn into the log


def test_predict_takes_the_formats_ingest_takes_and_lists_them():
    """predict --format is ingest's --format (the same choices, shown by --help, a bad one refused by click)."""
    import click

    def choices(command):
        option = next(p for p in main.commands[command].params if p.name in ("format", "fmt"))
        assert isinstance(option.type, click.Choice), command
        return list(option.type.choices)

    assert choices("predict") == choices("ingest") and "libsvm" in choices("ingest")
    assert "[libsvm|jsonl|csv|tsv|folder|parquet|hdf5|numpy|arff]" in run("predict", "--help").output
    result = run("predict", "run/", "new.svm", "--out", "p.csv", "--format", "svm", ok=False)
    assert result.exit_code == 2 and "'svm' is not one of 'libsvm'" in result.output


def test_a_bad_hashing_flag_is_named_as_the_user_gave_it(tmp_path):
    """`ingest --n-features 1000` named an internal class, `HashingConfig: n_features=1000`; the
    line names the flag (issue 20, item 10: the same mistake in a pipeline names its key)."""
    (tmp_path / "a.tsv").write_text("label\ttext\nx\tsome words\n")
    for flag, value, fragment in (
        ("--n-features", "1000", "use e.g. 1024"),
        ("--hash-seed", "4294967296", "use an int"),
    ):
        r = run("ingest", str(tmp_path / "a.tsv"), flag, value, "--out", str(tmp_path / "s.zarr"), ok=False)
        assert r.exit_code == 2 and "HashingConfig" not in r.output, r.output
        assert r.output.startswith(f"error: {flag}={value} ") and fragment in r.output, r.output


def test_output_piped_into_head_ends_without_an_error_line():
    """`streamfit train --list-solvers | head -1`: the reader closes the pipe; the command ends
    silently with SIGPIPE's status 141 (it printed `error: Broken pipe; check that the location
    exists, is writable and has free space`, a write error about no path)."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-c", "from streamfit.cli import main; main()", "train", "--list-solvers"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])},
    )
    proc.stdout.close()  # the reader gone before the listing is written (the command takes a second to start)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == "", err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full (a Linux device) on this system")
def test_a_failed_write_to_stdout_names_stdout(stores):
    """`streamfit inspect STORE > /dev/full` (stdout a full disk): one line naming stdout and the
    cause, status 2 (was `error: No space left on device; …`, naming no file; `streamfit
    --version > /dev/full` was click's traceback); a command's own --help too, which click writes
    while it parses the command's options (was the line without "stdout")."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    for args in (
        ["inspect", str(stores / "train.zarr")],
        ["train", "--list-solvers"],
        ["--version"],
        ["train", "--help"],
        ["predict", "-h"],
    ):
        with open("/dev/full", "w") as full:
            done = subprocess.run(
                [sys.executable, "-m", "streamfit", *args], stdout=full, stderr=subprocess.PIPE, env=env, text=True
            )
        assert done.returncode == 2 and done.stderr == (
            "error: stdout: cannot write (No space left on device): the file or device this command's output was "
            "sent to refused it; free space there, or send the output elsewhere\n"
        ), (args, done.stderr)


@pytest.mark.parametrize("where", ["python", "kernel"])
def test_ctrl_c_is_one_line_and_status_130(stores, tmp_path, monkeypatch, where):
    """Ctrl-C (KeyboardInterrupt) stops a command with one line saying what is left and status
    130, the shell's for SIGINT (was click's "Aborted!" and 1, the status of damage found by
    inspect --verify); inside a numba kernel the interrupt surfaces as a SystemError ("returned a
    result with an exception set") whose context is the KeyboardInterrupt, which was reported
    as an internal error."""
    import streamfit.train

    def interrupted(*args, **kwargs):
        if where == "python":
            raise KeyboardInterrupt
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise SystemError("CPUDispatcher(<function step>) returned a result with an exception set")  # noqa: B904

    monkeypatch.setattr(streamfit.train, "train", interrupted)
    result = run("train", stores / "train.zarr", "--out", tmp_path / "run", ok=False)
    assert result.exit_code == 130, result.output
    assert result.output.splitlines()[-1] == (
        "stopped: interrupted (Ctrl-C); the checkpoints saved so far are kept: the same command plus --resume "
        "continues from the last one"
    ), result.output
    result = run("train", stores / "train.zarr", "--out", tmp_path / "run", "--overwrite", ok=False)
    assert result.exit_code == 130 and result.output.endswith("(and without --overwrite)\n"), result.output


def test_streamfits_own_options_after_the_command_say_where_they_go(stores, tmp_path):
    """`streamfit run job.yaml --log-file job.log` (the options of streamfit itself written where
    -v and -q may go): one line that says to put them before the command, not only "No such
    option"; a misspelled option of the command keeps the --help hint."""
    result = run("train", stores / "train.zarr", "--out", tmp_path / "r", "--log-file", tmp_path / "log", ok=False)
    assert result.exit_code == 2 and result.output == (
        "error: No such option '--log-file'. (--log-file is an option of streamfit itself: put it before the "
        "command, streamfit --log-file … train …)\n"
    ), result.output
    result = run("train", stores / "train.zarr", "--out", tmp_path / "r", "--lgo-file", "x", ok=False)
    assert result.exit_code == 2 and result.output.endswith("(see streamfit train --help)\n"), result.output
    assert not (tmp_path / "r").exists() and not (tmp_path / "log").exists()


def test_every_default_the_ingest_help_states_by_hand_is_the_one_the_code_applies():
    """Most defaults in --help are printed from the declarations (streamfit.options); the source
    flags, --zero-based and the hashing flags state theirs in their own help text. Each one stated
    is the default of every reader that takes the option, of LibsvmSource and of HashingConfig."""
    import inspect

    import click

    from streamfit.ingest.hashing import HashingConfig
    from streamfit.ingest.sources import FORMATS, LibsvmSource

    helps = {p.name: p.help for p in main.commands["ingest"].params if isinstance(p, click.Option)}

    def stated(name):
        found = re.findall(r"\[default: ([^\],;]+)", helps[name])
        assert len(found) == 1, (name, helps[name])
        return found[0]

    checked = 0
    for name in ("text_field", "label_field", "encoding", "x_dataset", "y_dataset", "label_separator"):
        defaults = {
            inspect.signature(cls).parameters[name].default
            for cls in FORMATS.values()
            if name in inspect.signature(cls).parameters
        }
        assert len(defaults) == 1, (name, defaults)  # the readers agree
        (default,) = defaults
        assert stated(name) == ("none" if default is None else str(default)), name
        checked += 1
    assert checked == 6
    assert inspect.signature(LibsvmSource).parameters["zero_based"].default is False
    assert "(default: 1)" in helps["zero_based"]
    config = HashingConfig()
    assert stated("n_features") == str(config.n_features) and stated("ngram_max") == str(config.ngram_range[1])


def test_predicts_error_naming_an_ingest_flag_says_how_predict_takes_it(tmp_path):
    """A model trained on a headerless TSV (text in column 1) scoring JSONL: the reader's fix names
    `--text-field`, a flag predict has not (qa36: a user tried it and got "No such option"); the
    line now adds `--option text_field=…`, which works. A flag predict has (--id-field) is not
    translated."""
    import gzip

    rows = [("pos", "good fine great nice"), ("neg", "bad awful poor sad")] * 20
    with gzip.open(tmp_path / "train.tsv.gz", "wt") as f:
        f.writelines(f"{label}\t{text}\n" for label, text in rows)
    (tmp_path / "new.jsonl").write_text(
        "".join(json.dumps({"doc": f"d{i}", "body": t}) + "\n" for i, (_, t) in enumerate(rows))
    )
    columns = ["--no-header", "--label-field", "0", "--text-field", "1"]
    run("ingest", tmp_path / "train.tsv.gz", *columns, "--out", tmp_path / "s.zarr")
    run("train", tmp_path / "s.zarr", *QUICK_BCD, "--out", tmp_path / "run")
    predict = ["-q", "predict", tmp_path / "run", tmp_path / "new.jsonl", "--out", tmp_path / "p.csv"]
    result = run(*predict, ok=False)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no field '1' (set --text-field" in lines[0], result.stderr
    assert lines[0].endswith("(predict takes it as --option text_field=…)"), lines[0]
    assert not (tmp_path / "p.csv").exists()
    run(*predict, "--option", "text_field=body", "--id-field", "doc")
    assert (tmp_path / "p.csv").read_text().splitlines()[1].startswith(f"{tmp_path / 'new.jsonl'}:1,d0,pos,")
    (tmp_path / "p.csv").unlink()
    result = run(*predict, "--option", "text_field=body", "--id-field", "nope", ok=False)
    assert result.exit_code == 2 and "no field 'nope' (set --id-field" in result.stderr, result.stderr
    assert "predict takes" not in result.stderr
