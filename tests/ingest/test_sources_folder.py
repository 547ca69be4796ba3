"""Class-folder reader: directories and tar archives (20 Newsgroups layout)."""

import io
import os
import tarfile

import pytest

from streamfit.errors import InputError
from streamfit.ingest.sources import BadRecordPolicy, open_source

# 20 Newsgroups bydate layout: <subset>/<group>/<id>, latin-1 text.
NEWS = {
    "20news-bydate-train/sci.space/60155": "From: a@b\n\nThe shuttle launched.\n",
    "20news-bydate-train/sci.space/60156": "Orbits and r\xe9sum\xe9s.\n",
    "20news-bydate-train/rec.autos/101551": "V8 engines.\n",
    "20news-bydate-train/alt.atheism/49960": "Philosophy.\n",
    "20news-bydate-test/sci.space/61000": "Test post.\n",
    "20news-bydate-test/rec.autos/103000": "Test car.\n",
}


def make_tree(root, files):
    for name, text in files.items():
        path = os.path.join(root, *name.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(text.encode("latin-1") if isinstance(text, str) else text)
    return str(root)


def make_tar(path, files, mode="w:gz"):
    with tarfile.open(path, mode) as tar:
        for name, text in files.items():
            data = text.encode("latin-1") if isinstance(text, str) else text
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)


def train(prefix="20news-bydate-train/"):
    return {k[len(prefix) :]: v for k, v in NEWS.items() if k.startswith(prefix)}


@pytest.mark.parametrize("batch_size", [1, 3, 8192])
def test_directory_in_sorted_order(read, tmp_path, batch_size):
    root = make_tree(tmp_path / "news", train())
    source = open_source(root, policy=BadRecordPolicy(), batch_size=batch_size, encoding="latin-1")
    batches = read.batches(source, batch_size)
    assert read.labels(batches) == ["alt.atheism", "rec.autos", "sci.space", "sci.space"]
    assert read.texts(batches)[2:] == ["From: a@b\n\nThe shuttle launched.\n", "Orbits and résumés.\n"]
    assert read.locations(batches)[0] == os.path.join(root, "alt.atheism", "49960")
    assert source.n_read == 4 and source.multilabel is False and source.kind == "text"


def test_directory_with_subsets_needs_subset(read, tmp_path):
    root = make_tree(tmp_path / "news", NEWS)
    with pytest.raises(InputError) as e:
        open_source(root, policy=BadRecordPolicy(), encoding="latin-1")
    assert "20news-bydate-test, 20news-bydate-train" in str(e.value) and "--subset" in e.value.hint
    batches = read.batches(open_source(root, policy=BadRecordPolicy(), subset="20news-bydate-test"))
    assert read.labels(batches) == ["rec.autos", "sci.space"]


def test_single_top_folder_is_used(read, tmp_path):
    root = make_tree(tmp_path / "news", {k: v for k, v in NEWS.items() if "train" in k})
    batches = read.batches(open_source(root, policy=BadRecordPolicy(), encoding="latin-1"))
    assert len(read.labels(batches)) == 4


def test_unknown_subset(tmp_path):
    root = make_tree(tmp_path / "news", NEWS)
    with pytest.raises(InputError, match="no folder 'train'.*20news-bydate-test, 20news-bydate-train"):
        open_source(root, policy=BadRecordPolicy(), subset="train")
    archive = make_tar(tmp_path / "news.tar.gz", NEWS)  # archives are not listed first: found on read
    with pytest.raises(InputError, match="no folder 'train'.*20news-bydate-test, 20news-bydate-train"):
        list(open_source(str(archive), policy=BadRecordPolicy(), subset="train"))


@pytest.mark.parametrize("batch_size", [1, 3, 8192])
@pytest.mark.parametrize(
    "name, mode", [("20news.tar.gz", "w:gz"), ("20news.tgz", "w:gz"), ("n.tar", "w"), ("n.tar.xz", "w:xz")]
)
def test_tar_archive(read, tmp_path, batch_size, name, mode):
    path = make_tar(tmp_path / name, NEWS, mode)
    source = open_source(
        path, policy=BadRecordPolicy(), batch_size=batch_size, subset="20news-bydate-train", encoding="latin-1"
    )
    batches = read.batches(source, batch_size)
    assert read.labels(batches) == ["sci.space", "sci.space", "rec.autos", "alt.atheism"]  # archive order
    assert read.locations(batches)[0] == f"{path}:20news-bydate-train/sci.space/60155"
    assert read.texts(batches)[1] == "Orbits and résumés.\n"
    assert source.n_read == 4


def test_tar_needs_subset(tmp_path):
    path = make_tar(tmp_path / "20news.tar.gz", NEWS)
    with pytest.raises(InputError, match="20news.tar.gz: holds several folders.*--subset"):
        open_source(path, policy=BadRecordPolicy())


def test_flat_tar_and_hidden_files(read, tmp_path):
    files = {"./pos/1.txt": "good", "./neg/2.txt": "bad", "./neg/._2.txt": b"\x00\x05", ".DS_Store": b"\x00"}
    path = make_tar(tmp_path / "reviews.tgz", files)
    batches = read.batches(open_source(path, policy=BadRecordPolicy()))
    assert read.labels(batches) == ["pos", "neg"] and read.texts(batches) == ["good", "bad"]


def test_truncated_archive(tmp_path):
    path = make_tar(tmp_path / "20news.tar.gz", {f"c{i % 3}/{i}": "x" * (i * 97) for i in range(60)})
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(InputError, match="20news.tar.gz: truncated or corrupt gzip stream"):
        list(open_source(path, policy=BadRecordPolicy("skip")))


def test_truncated_archive_inside_a_member(tmp_path):
    path = make_tar(tmp_path / "20news.tar", {"a/1": "x" * 5000, "b/2": "y" * 5000}, "w")
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[:3000])
    with pytest.raises(InputError, match="20news.tar: truncated or corrupt archive"):
        list(open_source(path, policy=BadRecordPolicy("skip")))


@pytest.mark.parametrize("name, problem", [("x.tgz", "gzip stream"), ("x.tar", "archive")])
def test_not_a_tar(tmp_path, name, problem):
    path = tmp_path / name
    path.write_bytes(b"plain text" * 100)
    with pytest.raises(InputError, match=f"{name}: truncated or corrupt {problem}"):
        open_source(str(path), policy=BadRecordPolicy())


BAD = {
    "bad-utf8": ({"a/1": "ok", "a/2": b"caf\xe9", "b/3": "fine"}, "a/2", "not valid utf-8 text"),
    "stray-file": ({"a/1": "ok", "README": "about", "b/3": "fine"}, "README", "not in a class folder"),
    "too-deep": ({"a/1": "ok", "a/sub/2": "deep", "b/3": "fine"}, "a/sub/2", "not in a class folder"),
}


@pytest.mark.parametrize("case", BAD)
@pytest.mark.parametrize("container", ["dir", "tar"])
def test_bad_record_error_mode(tmp_path, case, container):
    files, bad, problem = BAD[case]
    path = make_tree(tmp_path / "d", files) if container == "dir" else make_tar(tmp_path / "d.tar.gz", files)
    with pytest.raises(InputError) as e:
        list(open_source(path, policy=BadRecordPolicy()))
    location = os.path.join(path, *bad.split("/")) if container == "dir" else f"{path}:{bad}"
    assert e.value.location == location and problem in e.value.problem


@pytest.mark.parametrize("case", BAD)
@pytest.mark.parametrize("container", ["dir", "tar"])
def test_bad_record_skip_and_quarantine(read, tmp_path, quarantine, case, container):
    files, bad, problem = BAD[case]
    path = make_tree(tmp_path / "d", files) if container == "dir" else make_tar(tmp_path / "d.tar.gz", files)
    source = open_source(path, policy=quarantine, batch_size=1)
    batches = read.batches(source, 1)
    assert read.labels(batches) == ["a", "b"] and read.texts(batches) == ["ok", "fine"]
    assert source.n_read == 3 and quarantine.n_skipped == 1
    [entry] = quarantine.entries()
    assert entry["location"].endswith(bad.split("/")[-1]) and problem in entry["problem"]
    if case == "bad-utf8":
        assert entry["raw"] == "caf\\xe9"


def test_encoding_errors_replace(read, tmp_path):
    root = make_tree(tmp_path / "d", {"a/1": b"caf\xe9"})
    batches = read.batches(open_source(root, policy=BadRecordPolicy(), encoding_errors="replace"))
    assert read.texts(batches) == ["caf\ufffd"]


def test_empty_directory(read, tmp_path):
    source = open_source(str(tmp_path), "folder", policy=BadRecordPolicy())
    assert read.batches(source) == [] and source.n_read == 0


def test_a_plain_file_is_not_a_folder(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("a")
    with pytest.raises(InputError, match="not a directory or a tar archive"):
        open_source(str(path), "folder", policy=BadRecordPolicy())


def test_without_class_folders_every_file_is_an_unlabeled_document(read, tmp_path):
    root = make_tree(tmp_path / "docs", {"a.txt": "first", "more/b.txt": "second"})
    batches = read.batches(open_source(root, policy=BadRecordPolicy(), class_folders=False))
    assert read.texts(batches) == ["first", "second"] and read.labels(batches) == [None, None]
    news = make_tree(tmp_path / "news", NEWS)
    source = open_source(
        news, policy=BadRecordPolicy(), class_folders=False, subset="20news-bydate-test", encoding="latin-1"
    )
    assert read.texts(read.batches(source)) == ["Test car.\n", "Test post.\n"]
