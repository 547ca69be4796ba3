"""A zip or tar archive holding one data file (data.zip -> data.csv, as data portals ship them;
data.tgz -> data/data.csv, as `tar czf data.tgz data/` makes it) is read as that file, named
data.zip:data.csv: the store of the extracted file; folder corpora in archives stay folder
corpora; several data files are a clear error."""

import gzip
import io
import json
import os
import subprocess
import tarfile
import zipfile

import numpy as np
import pytest

from streamfit.errors import InputError
from streamfit.ingest.hashing import HashingConfig
from streamfit.ingest.inputs import expand_inputs
from streamfit.ingest.pipeline import IngestOptions, ingest
from streamfit.ingest.sources import BadRecordPolicy, open_source
from streamfit.store import open_store

WORDS = ["alpha", "beta", "gamma", "delta", "sky", "sea", "rock", "tree", "star", "sand"]


def _rows(n, seed):
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        label = str(rng.integers(0, 3))
        words = rng.choice(WORDS, size=rng.integers(1, 8))
        rows.append((" ".join(words) + f" c{label}", label))
    return rows


def _csv(path, rows, bad_line=None):
    lines = ["text,label"] + [f'"{t}",{y}' for t, y in rows]
    if bad_line is not None:
        lines.insert(bad_line - 1, '"unterminated')
    path.write_text("\n".join(lines) + "\n")
    return path


def _zip(path, members, method=zipfile.ZIP_DEFLATED):
    with zipfile.ZipFile(path, "w", compression=method) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return str(path)


def _store(path):
    m = open_store(str(path)).manifest
    return m.n_rows, m.classes, [c.sha256 for c in m.chunks], m.fingerprint


def _ingest(inputs, out, **options):
    options.setdefault("hashing", HashingConfig(n_features=2**10))
    ingest(IngestOptions(inputs=inputs, out=str(out), progress=False, chunk_rows=40, **options))
    return _store(out)


@pytest.mark.parametrize("method", [zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED, zipfile.ZIP_BZIP2])
def test_a_zip_of_one_csv_gives_the_store_of_the_extracted_file(tmp_path, method):
    """data.zip holding data.csv, a README, macOS's __MACOSX/ and .DS_Store: the store of data.csv
    (manifest fingerprint, every chunk's digest), also as the test store of --like."""
    data = _csv(tmp_path / "data.csv", _rows(150, 0))
    test = _csv(tmp_path / "test.csv", _rows(60, 1))
    archive = _zip(
        tmp_path / "data.zip",
        {
            "data.csv": data.read_bytes(),
            "README.txt": "columns: text, label\n",
            "__MACOSX/._data.csv": b"\x00\x05\x16\x07",
            ".DS_Store": b"\x00\x00\x00\x01Bud1",
        },
        method,
    )
    test_archive = _zip(tmp_path / "test.zip", {"test.csv": test.read_bytes()}, method)
    _check_read_as_extracted(tmp_path, archive, f"{archive}:data.csv", data, test_archive, test)


def _check_read_as_extracted(tmp_path, archive, member, data, test_archive, test):
    """The archive expands to `member` and gives the store of the extracted file `data` (150
    rows), and `test_archive` ingested --like it the store of `test`."""
    assert expand_inputs([archive]) == [member]
    plain = _ingest([str(data)], tmp_path / "plain.zarr")
    archived = _ingest([archive], tmp_path / "archived.zarr")
    assert archived == plain and plain[0] == 150
    assert open_store(str(tmp_path / "archived.zarr")).manifest.source["paths"] == [member]
    like = {"like": str(tmp_path / "plain.zarr"), "hashing": None}
    assert _ingest([test_archive], tmp_path / "te_archived.zarr", **like) == _ingest(
        [str(test)], tmp_path / "te.zarr", **like
    )


@pytest.mark.parametrize("suffix", [".zip", ".tgz"])
def test_a_zipped_member_is_read_with_its_own_compression_and_named_in_bad_records(tmp_path, suffix):
    """A data.jsonl.gz in a zip (or a tgz) is decompressed by its name; a bad record's location
    is data.zip:member:LINE, as the readers name lines of a file."""
    rows = [json.dumps({"text": t, "label": y}) for t, y in _rows(30, 2)]
    rows.insert(4, "{not json")
    raw = ("\n".join(rows) + "\n").encode()
    (tmp_path / "data.jsonl.gz").write_bytes(gzip.compress(raw, mtime=0))
    write = _zip if suffix == ".zip" else _tar
    archive = write(tmp_path / f"data{suffix}", {"data.jsonl.gz": gzip.compress(raw, mtime=0)})
    member = f"{archive}:data.jsonl.gz"
    with BadRecordPolicy("skip") as policy:
        batches = list(open_source(member, policy=policy))
    assert sum(len(b.labels) for b in batches) == 30
    assert batches[0].locations[0] == f"{member}:1"
    with pytest.raises(InputError, match=f"^{member}:5: "):
        list(open_source(member, policy=BadRecordPolicy("error")))
    skip = {"on_bad_record": "skip"}
    assert _ingest([archive], tmp_path / "z.zarr", **skip) == _ingest(
        [str(tmp_path / "data.jsonl.gz")], tmp_path / "p.zarr", **skip
    )


def test_several_data_files_are_an_error_naming_them_and_a_member_path_picks_one(tmp_path):
    a, b = _csv(tmp_path / "a.csv", _rows(50, 3)), _csv(tmp_path / "b.csv", _rows(40, 4))
    archive = _zip(tmp_path / "both.zip", {"a.csv": a.read_bytes(), "b.csv": b.read_bytes()})
    with pytest.raises(
        InputError, match=rf"^{archive}: holds 2 data files \(a.csv, b.csv\) \(name the one to read as {archive}:a.csv"
    ):
        expand_inputs([archive])
    assert expand_inputs([f"{archive}:b.csv"]) == [f"{archive}:b.csv"]
    assert _ingest([f"{archive}:b.csv"], tmp_path / "b.zarr") == _ingest([str(b)], tmp_path / "plain.zarr")
    with pytest.raises(
        InputError, match=rf"^{archive}:c.csv: no member 'c.csv' in {archive} \(its files: a.csv, b.csv\)"
    ):
        list(open_source(f"{archive}:c.csv", policy=BadRecordPolicy()))


def test_a_txt_member_is_the_data_file_with_a_format_given_and_parquet_members_are_refused(tmp_path):
    data = _csv(tmp_path / "data.csv", _rows(30, 5))
    archive = _zip(tmp_path / "txt.zip", {"data.txt": data.read_bytes()})
    assert expand_inputs([archive]) == [archive]  # a document without a data format's name: a folder corpus
    assert expand_inputs([archive], "csv") == [f"{archive}:data.txt"]
    assert expand_inputs([archive], "folder") == [archive]
    assert _ingest([archive], tmp_path / "t.zarr", format="csv") == _ingest([str(data)], tmp_path / "p.zarr")
    pq_zip = _zip(tmp_path / "pq.zip", {"d.parquet": b"PAR1"})
    with pytest.raises(
        InputError,
        match=rf"^{pq_zip}: holds the parquet file d.parquet, which is not read from an archive \(extract it\)",
    ):
        expand_inputs([pq_zip])


def test_folder_corpora_in_zip_archives_stay_folder_corpora(tmp_path):
    """Class folders (even of .csv documents) and flat documents without a data format's name
    are read as before: a folder corpus."""
    corpus = _zip(tmp_path / "corpus.zip", {"sports/a.csv": "x,y\n", "news/b.csv": "x,y\n"})
    flat = _zip(tmp_path / "flat.zip", {"doc1": "a game", "doc2": "the news"})
    assert expand_inputs([corpus, flat]) == [corpus, flat]
    with BadRecordPolicy("skip") as policy:
        labels = [y for batch in open_source(corpus, policy=policy) for y in batch.labels]
    assert sorted(labels) == ["news", "sports"]


def test_a_damaged_member_is_a_one_line_error(tmp_path):
    data = _csv(tmp_path / "data.csv", _rows(200, 6)).read_bytes()
    archive = tmp_path / "data.zip"
    _zip(archive, {"data.csv": data}, zipfile.ZIP_STORED)
    raw = bytearray(archive.read_bytes())
    at = raw.index(data[:40]) + 100
    raw[at] ^= 0xFF  # a flipped byte: the CRC-32 check at the member's end fails
    archive.write_bytes(bytes(raw))
    with pytest.raises(InputError, match=rf"^{archive}:data.csv: truncated or corrupt archive \(Bad CRC-32"):
        list(open_source(f"{archive}:data.csv", policy=BadRecordPolicy("skip")))


def test_a_zip_behind_a_url_gives_the_store_of_the_local_file(tmp_path, s3):
    data = _csv(tmp_path / "data.csv", _rows(120, 7))
    archive = _zip(tmp_path / "data.zip", {"data.csv": data.read_bytes(), "LICENSE": "CC0\n"})
    url = "s3://streamfit-test/zip-inputs/data.zip"
    s3.put(archive, url.removeprefix("s3://"))
    assert expand_inputs([url]) == [f"{url}:data.csv"]
    assert _ingest([url], tmp_path / "s3.zarr") == _ingest([str(data)], tmp_path / "plain.zarr")
    assert os.path.exists(tmp_path / "s3.zarr")


TAR_MODES = {".tar": "w", ".tgz": "w:gz", ".tar.gz": "w:gz", ".tar.bz2": "w:bz2", ".tar.xz": "w:xz"}


def _tar(path, members, folders=()):
    """A tar archive (compressed by its name) of `members` {name: bytes}, with folder entries
    for `folders` first, as tar writes a folder it is given."""
    with tarfile.open(path, TAR_MODES[next(s for s in TAR_MODES if str(path).endswith(s))]) as tf:
        for folder in folders:
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tf.addfile(info)
        for name, data in members.items():
            data = data.encode() if isinstance(data, str) else data
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return str(path)


@pytest.mark.parametrize("suffix", list(TAR_MODES))
@pytest.mark.parametrize("folder", ["", "data/"])
def test_a_tar_of_one_csv_gives_the_store_of_the_extracted_file(tmp_path, suffix, folder):
    """A tar archive holding data.csv, at its top or in one folder, with a README, macOS's
    __MACOSX/ and .DS_Store: the store of data.csv (fingerprint, every chunk's digest), also as
    the test store of --like, as a zip of the same file gives."""
    data = _csv(tmp_path / "data.csv", _rows(150, 0))
    test = _csv(tmp_path / "test.csv", _rows(60, 1))
    members = {
        f"{folder}data.csv": data.read_bytes(),
        f"{folder}README.txt": "columns: text, label\n",
        f"{folder}.DS_Store": b"\x00\x00\x00\x01Bud1",
        "__MACOSX/._data.csv": b"\x00\x05\x16\x07",
    }
    archive = _tar(tmp_path / f"data{suffix}", members, [folder] if folder else [])
    test_archive = _tar(tmp_path / f"test{suffix}", {f"{folder}test.csv": test.read_bytes()})
    _check_read_as_extracted(tmp_path, archive, f"{archive}:{folder}data.csv", data, test_archive, test)


def test_the_archive_tar_czf_makes_of_a_folder_is_read_as_its_data_file(tmp_path):
    """`tar czf data.tgz data/` (GNU tar: folder entries, ./ names with -C) reads as data.csv."""
    folder = tmp_path / "data"
    folder.mkdir()
    data = _csv(folder / "data.csv", _rows(90, 8))
    (folder / "LICENSE").write_text("CC0\n")
    subprocess.run(["tar", "czf", "data.tgz", "data/"], cwd=tmp_path, check=True)
    subprocess.run(["tar", "czf", "flat.tgz", "-C", "data", "."], cwd=tmp_path, check=True)
    tgz, flat = str(tmp_path / "data.tgz"), str(tmp_path / "flat.tgz")
    assert expand_inputs([tgz, flat]) == [f"{tgz}:data/data.csv", f"{flat}:./data.csv"]
    plain = _ingest([str(data)], tmp_path / "plain.zarr")
    assert _ingest([tgz], tmp_path / "t.zarr") == plain == _ingest([flat], tmp_path / "f.zarr")


def test_tar_archives_follow_the_zip_rule_for_several_files_formats_and_members(tmp_path):
    """The same errors as a zip's: several data files listed, a member path picks one, a missing
    member lists the files, a Parquet member refused, a .txt member read with --format csv; a
    link where the data file should be is named."""
    a, b = _csv(tmp_path / "a.csv", _rows(50, 3)), _csv(tmp_path / "b.csv", _rows(40, 4))
    archive = _tar(tmp_path / "both.tar.gz", {"a.csv": a.read_bytes(), "b.csv": b.read_bytes()})
    with pytest.raises(
        InputError, match=rf"^{archive}: holds 2 data files \(a.csv, b.csv\) \(name the one to read as {archive}:a.csv"
    ):
        expand_inputs([archive])
    assert _ingest([f"{archive}:b.csv"], tmp_path / "b.zarr") == _ingest([str(b)], tmp_path / "plain.zarr")
    with pytest.raises(
        InputError, match=rf"^{archive}:c.csv: no member 'c.csv' in {archive} \(its files: a.csv, b.csv\)"
    ):
        list(open_source(f"{archive}:c.csv", policy=BadRecordPolicy()))
    txt = _tar(tmp_path / "txt.tar", {"data.txt": a.read_bytes()})
    assert expand_inputs([txt]) == [txt] and expand_inputs([txt], "csv") == [f"{txt}:data.txt"]
    pq_tar = _tar(tmp_path / "pq.tar", {"d.parquet": b"PAR1"})
    with pytest.raises(InputError, match=rf"^{pq_tar}: holds the parquet file d.parquet, which is not read"):
        expand_inputs([pq_tar])
    linked = tmp_path / "linked.tar"
    with tarfile.open(linked, "w") as tf:
        info = tarfile.TarInfo("data.csv")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(info)
    [member] = expand_inputs([str(linked)])
    with pytest.raises(InputError, match=rf"^{linked}:data.csv: the member is a symbolic link, not a data file"):
        list(open_source(member, policy=BadRecordPolicy("skip")))


def test_folder_corpora_in_tar_archives_stay_folder_corpora_and_are_listed_no_further(tmp_path, monkeypatch):
    """Class folders (of .csv documents too, under a top folder or not), flat documents and a
    data file beside more than MAX_OTHER_FILES others are folder corpora. Deciding a corpus
    under a top folder (20 Newsgroups' layout) reads no further than its first document."""
    from streamfit.ingest.sources import archive as archive_module

    corpus = _tar(tmp_path / "corpus.tgz", {"sports/a.csv": "x,y\n", "news/b.csv": "x,y\n"})
    nested = _tar(tmp_path / "nested.tgz", {"train/sports/a": "a game", "train/news/b": "the news"})
    flat = _tar(tmp_path / "flat.tar", {"doc1": "a game", "doc2": "the news"})
    notes = {f"note{i}": "." for i in range(archive_module.MAX_OTHER_FILES + 1)}
    crowded = _tar(tmp_path / "crowded.tar", {"data.csv": "text,label\na b,x\n", **notes})
    assert expand_inputs([corpus, nested, flat, crowded]) == [corpus, nested, flat, crowded]
    with BadRecordPolicy("skip") as policy:
        labels = [y for batch in open_source(corpus, policy=policy) for y in batch.labels]
    assert sorted(labels) == ["news", "sports"]
    read = []
    names = archive_module._one_data_file

    def counted(found, format):
        return names((read.append(n) or n for n in found), format)

    monkeypatch.setattr(archive_module, "_one_data_file", counted)
    assert expand_inputs([nested]) == [nested] and read == ["train/sports/a"]


def test_a_cut_tar_archive_is_a_one_line_error(tmp_path):
    data = _csv(tmp_path / "data.csv", _rows(2000, 6)).read_bytes()
    archive = tmp_path / "data.tgz"
    _tar(archive, {"data.csv": data})
    archive.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    with pytest.raises(InputError, match=rf"^{archive}: truncated or corrupt gzip stream \(re-download"):
        expand_inputs([str(archive)])
    with pytest.raises(InputError, match=rf"^{archive}: truncated or corrupt gzip stream \(re-download"):
        list(open_source(f"{archive}:data.csv", policy=BadRecordPolicy("skip")))


def test_a_tar_behind_a_url_gives_the_store_of_the_local_file(tmp_path, s3):
    data = _csv(tmp_path / "data.csv", _rows(120, 7))
    archive = _tar(tmp_path / "data.tgz", {"data/data.csv": data.read_bytes(), "data/LICENSE": "CC0\n"}, ["data/"])
    url = "s3://streamfit-test/tar-inputs/data.tgz"
    s3.put(archive, url.removeprefix("s3://"))
    assert expand_inputs([url]) == [f"{url}:data/data.csv"]
    assert _ingest([url], tmp_path / "s3.zarr") == _ingest([str(data)], tmp_path / "plain.zarr")
