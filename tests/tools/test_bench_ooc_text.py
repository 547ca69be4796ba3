"""tools/bench_ooc_text.py's corpus generator: the same seed gives the same bytes, the held-out
documents never draw from a training source document, and the draw follows its classes."""

import importlib.util
import io
import json
import os
import tarfile

import pytest

TOOL = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "bench_ooc_text.py")
spec = importlib.util.spec_from_file_location("bench_ooc_text", TOOL)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

GROUPS = ["alpha", "beta", "gamma"]


@pytest.fixture(scope="module")
def tarball(tmp_path_factory):
    """A 20news-bydate-shaped tarball: each line names its split, group, document and line."""
    path = tmp_path_factory.mktemp("news") / "news.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for subset, n_docs in (("20news-bydate-train", 10), ("20news-bydate-test", 4)):
            for group in GROUPS:
                for doc in range(n_docs):
                    n_lines = 3 + doc % 5
                    text = "\n\n".join(f"{subset[-5:]} {group} d{doc} l{i}" for i in range(n_lines)) + "\n"
                    data = text.encode("latin-1")
                    info = tarfile.TarInfo(f"{subset}/{group}/{1000 + doc}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return str(path)


def records(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_the_same_seed_makes_the_same_bytes_and_another_seed_other_bytes(tarball, tmp_path):
    first = bench.make_corpus(tarball, tmp_path / "a", 300, 60, seed=7)
    again = bench.make_corpus(tarball, tmp_path / "b", 300, 60, seed=7)
    other = bench.make_corpus(tarball, tmp_path / "c", 300, 60, seed=8)
    assert first == again and first["rows"] == {"train": 300, "test": 60, "real-test": 12}
    for name in ("train.jsonl", "test.jsonl", "real-test.jsonl", "corpus.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert (tmp_path / "a" / "train.jsonl").read_bytes() != (tmp_path / "c" / "train.jsonl").read_bytes()
    assert other["sources"] == first["sources"] == {"train": [8, 8, 8], "held_out": [2, 2, 2]}


def test_held_out_documents_never_draw_from_training_sources_and_lines_follow_their_class(tarball, tmp_path):
    bench.make_corpus(tarball, tmp_path, 2000, 400, seed=0)
    sources, off_class, n_lines = {}, 0, 0
    for split in ("train", "test"):
        sources[split] = set()
        for record in records(tmp_path / f"{split}.jsonl"):
            lines = record["text"].split("\n")
            assert record["label"] in GROUPS and 1 <= len(lines) <= bench.MAX_LINES
            for line in lines:
                subset, group, doc, _ = line.split(" ")
                assert subset == "train"  # synthetic documents draw from the training documents only
                sources[split].add((group, doc))
                off_class += group != record["label"]
                n_lines += 1
    assert not sources["train"] & sources["test"]
    assert len(sources["train"]) == 24 and len(sources["test"]) == 6  # every source document drawn
    # a line comes from every class's lines with probability OFF_TOPIC: 2/3 of those from another class
    assert abs(off_class / n_lines - bench.OFF_TOPIC * 2 / 3) < 0.02


def test_the_real_test_set_holds_every_test_document_once_whole(tarball, tmp_path):
    bench.make_corpus(tarball, tmp_path, 30, 6, seed=0)
    real = records(tmp_path / "real-test.jsonl")
    seen = sorted((r["label"], r["text"].split("\n")[0].split(" ")[2]) for r in real)
    assert seen == sorted((g, f"d{d}") for g in GROUPS for d in range(4))
    assert all(r["text"].count("-test") == 3 + int(r["text"].split(" ")[2][1:]) % 5 for r in real)
