"""Class-folder reader: directories (local and behind a URL), tar and zip archives (20 Newsgroups layout)."""

import io
import os
import re
import signal
import socket
import tarfile
import tracemalloc
import zipfile

import pytest
from click.testing import CliRunner

from streamfit.cli import main
from streamfit.errors import InputError
from streamfit.ingest.sources import BadRecordPolicy, ReadLimits, open_source

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


def make_zip(path, files):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in files.items():
            zf.writestr(name, text.encode("latin-1") if isinstance(text, str) else text)
    return str(path)


def make_memory_tree(url, files):
    """The files written under a memory:// URL (fsspec's in-process filesystem), as make_tree does."""
    import fsspec

    fs = fsspec.filesystem("memory")
    if fs.exists(url):
        fs.rm(url, recursive=True)
    for name, text in files.items():
        fs.pipe(f"{url}/{name}", text.encode("latin-1") if isinstance(text, str) else text)
    return url


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


@pytest.mark.parametrize("name, mode", [("n.tar.gz", "w:gz"), ("n.tar", "w"), ("n.tar.pax", "w:pax")])
def test_the_parts_of_an_archive_read_as_the_whole(read, tmp_path, name, mode):
    """folder_parts cuts a tar archive at member headers (a long name's header included); its parts read one
    after the other give the whole archive's documents, locations and bad records. A global pax
    header keeps the archive whole."""
    from streamfit.ingest.sources import folder_parts

    files = {**NEWS, f"20news-bydate-train/sci.space/{'long' * 40}": "Long name.\n"}
    files |= {f"20news-bydate-train/c{i % 3}/{i}": "w " * (30 + i) for i in range(40)}
    files["20news-bydate-train/c1/bad"] = b"\xff\xfe not utf-8"
    pax = {"comment": "a global header"} if mode.endswith("pax") else None
    tar = tarfile.open(tmp_path / name.replace(".pax", ""), mode.replace(":pax", ""), pax_headers=pax)
    with tar:
        for member, text in files.items():
            data = text.encode("latin-1") if isinstance(text, str) else text
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path = tar.name
    opts = {"subset": "20news-bydate-train"}
    parts = folder_parts(path, 256, **opts)

    def documents(policy, **part):
        batches = list(open_source(path, policy=policy, **opts, **part))
        return read.labels(batches), read.locations(batches), read.texts(batches)

    whole_policy, parts_policy = BadRecordPolicy("skip"), BadRecordPolicy("skip")
    whole = documents(whole_policy)
    assert len(whole[0]) == 44 and whole_policy.n_skipped == 2  # 60156 and bad are not UTF-8
    if mode.endswith("pax"):
        assert len(parts) == 1
        return
    assert len(parts) > 10 and parts[0].start == 0 and parts[-1].stop is None
    assert all(a.stop == b.start for a, b in zip(parts, parts[1:]))
    assert all(p.prefix == ("20news-bydate-train",) for p in parts)
    pieces = [documents(parts_policy, folder_part=p) for p in parts]
    assert tuple(sum((piece[k] for piece in pieces), []) for k in range(3)) == whole
    assert parts_policy.n_skipped == 2


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
    # a folder named by bytes that are not UTF-8 (b"x\xff"), as the system hands it to Python
    "bad-utf8-class": ({"a/1": "ok", "x\udcff/2": "bad", "b/3": "fine"}, "x\udcff/2", "name is not valid UTF-8"),
}


# zip member names are UTF-8: no zip holds a class folder named by other bytes
BAD_IN = [(case, c) for case in BAD for c in ("dir", "tar", "zip") if (case, c) != ("bad-utf8-class", "zip")]


def make_container(tmp_path, container, files):
    if container == "zip":
        return make_zip(tmp_path / "d.zip", files)
    return make_tree(tmp_path / "d", files) if container == "dir" else make_tar(tmp_path / "d.tar.gz", files)


@pytest.mark.parametrize("case, container", BAD_IN)
def test_bad_record_error_mode(tmp_path, case, container):
    files, bad, problem = BAD[case]
    path = make_container(tmp_path, container, files)
    with pytest.raises(InputError) as e:
        list(open_source(path, policy=BadRecordPolicy()))
    location = os.path.join(path, *bad.split("/")) if container == "dir" else f"{path}:{bad}"
    assert e.value.location == location and problem in e.value.problem


@pytest.mark.parametrize("case, container", BAD_IN)
def test_bad_record_skip_and_quarantine(read, tmp_path, quarantine, case, container):
    files, bad, problem = BAD[case]
    path = make_container(tmp_path, container, files)
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


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_word(read, tmp_path):
    """qa32: a UTF-8 document that starts with a byte order mark (Windows Notepad writes one) kept
    it as U+FEFF before its first word, which hashed as another feature than the same word without
    it (the store of 12 such documents differed from the plain one in every row, through the IDF).
    It is dropped, as CSV and JSONL readers drop it; only at the start, and only for UTF-8."""
    docs = {
        "a/1": "caf\u00e9 au lait".encode("utf-8-sig"),
        "a/2": b"plain words",
        "b/3": "x \ufeffmid".encode("utf-8-sig"),
    }
    root = make_tree(tmp_path / "d", docs)
    texts = read.texts(read.batches(open_source(root, policy=BadRecordPolicy())))
    assert texts == ["caf\u00e9 au lait", "plain words", "x \ufeffmid"]
    latin = make_tree(tmp_path / "l", {"a/1": b"\xef\xbb\xbfcaf\xe9"})
    assert read.texts(read.batches(open_source(latin, policy=BadRecordPolicy(), encoding="latin-1"))) == [
        "\u00ef\u00bb\u00bfcaf\u00e9"
    ]


def test_empty_directory(read, tmp_path):
    source = open_source(str(tmp_path), "folder", policy=BadRecordPolicy())
    assert read.batches(source) == [] and source.n_read == 0


def test_a_plain_file_is_not_a_folder(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("a")
    with pytest.raises(InputError, match="not a directory or an archive"):
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


# ---- hostile folders and archives (issue 22, class 3) ----

GOOD = {"a/1": "alpha beta\n", "b/2": "gamma delta\n"}


def hostile_tree(tmp_path, kind: str) -> tuple[str, str]:
    """A class-folder corpus of GOOD plus one entry `kind` at b/x: (the corpus, the entry's path)."""
    root = make_tree(tmp_path / "corpus", GOOD)
    entry = os.path.join(root, "b", "x")
    if kind == "link to /dev/zero":
        os.symlink("/dev/zero", entry)
    elif kind == "FIFO":
        os.mkfifo(entry)
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(entry)
        server.close()
    elif kind == "link out of the corpus":
        (tmp_path / "secret.txt").write_text("not a document\n")
        os.symlink(os.path.join(os.pardir, os.pardir, "secret.txt"), entry)
    elif kind == "broken link":
        os.symlink("missing", entry)
    elif kind == "link to a folder":
        os.symlink(os.path.join(root, "a"), entry)
    return root, entry


HOSTILE = {
    "link to /dev/zero": "a link to /dev/zero, outside the folder",
    "FIFO": "a FIFO, not a regular file",
    "socket": "a socket, not a regular file",
    "link out of the corpus": "a link to .*secret.txt, outside the folder",
    "broken link": r"a broken link \(to .*missing\)",
    "link to a folder": r"a link to a folder \(links to folders are not followed\)",
}


@pytest.fixture(scope="module")
def ingest_compiled(tmp_path_factory):
    """One ingest of a good corpus through the CLI, so every kernel of the path is compiled (or
    loaded from numba's cache) before a test arms an alarm."""
    root = tmp_path_factory.mktemp("warm")
    result = CliRunner().invoke(main, ["-q", "ingest", make_tree(root / "corpus", GOOD), "--out", str(root / "s.zarr")])
    assert result.exit_code == 0, result.output


@pytest.fixture
def alarm(ingest_compiled):
    """Fails a test that blocks (on a FIFO, say) instead of hanging the suite. The kernels are
    compiled first (ingest_compiled): an alarm that interrupts numba's first compilation leaves
    numba broken for the rest of the process."""

    def hang(*_):
        raise TimeoutError("the read blocked")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("kind", HOSTILE)
def test_only_regular_files_inside_the_folder_are_documents(read, tmp_path, alarm, kind):
    """Error mode names the entry; skip mode counts it and reads the documents around it."""
    root, entry = hostile_tree(tmp_path, kind)
    with pytest.raises(InputError, match=f"^{re.escape(entry)}: {HOSTILE[kind]}") as e:
        list(open_source(root, policy=BadRecordPolicy()))
    assert "\n" not in str(e.value)
    policy = BadRecordPolicy("skip")
    source = open_source(root, policy=policy)
    batches = read.batches(source)
    assert read.texts(batches) == ["alpha beta\n", "gamma delta\n"] and read.labels(batches) == ["a", "b"]
    assert (source.n_read, policy.n_skipped) == (3, 1)


def test_a_link_to_a_file_inside_the_folder_is_read(read, tmp_path):
    root = make_tree(tmp_path / "corpus", GOOD)
    os.symlink(os.path.join(os.pardir, "a", "1"), os.path.join(root, "b", "copy"))
    batches = read.batches(open_source(root, policy=BadRecordPolicy()))
    assert read.labels(batches) == ["a", "b", "b"]
    assert read.texts(batches) == ["alpha beta\n", "gamma delta\n", "alpha beta\n"]


def test_a_document_over_max_record_bytes_is_a_bad_record(read, tmp_path):
    root = make_tree(tmp_path / "corpus", {**GOOD, "b/big": b"x" * 1025})
    limits = ReadLimits(record_bytes=1024)
    with pytest.raises(InputError, match=r"b/big: the document is longer than 1 KiB \(raise --max-record-bytes"):
        list(open_source(root, policy=BadRecordPolicy(), limits=limits))
    policy = BadRecordPolicy("skip")
    assert len(read.labels(read.batches(open_source(root, policy=policy, limits=limits)))) == 2
    assert policy.n_skipped == 1


def test_a_document_that_grows_while_it_is_read_is_read_on_to_one_byte_over_the_bound(tmp_path):
    """The read asks for the size fstat gave plus one byte, then reads on when the file has
    grown since: the whole grown document within the bound, one byte over it past the bound
    (a bad record then, as a file found too long)."""
    root = make_tree(tmp_path / "corpus", GOOD)
    path = os.path.join(root, "a", "1")
    for limits, expected in ((ReadLimits(), 11 + 2000), (ReadLimits(record_bytes=1024), 1025)):
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            with open(path, "ab") as grow:
                grow.write(b"y" * 2000)
            data = open_source(root, policy=BadRecordPolicy(), limits=limits)._read_open(f.fileno(), size)
        assert data == (b"alpha beta\n" + b"y" * 2000)[:expected]
        with open(path, "wb") as f:
            f.write(b"alpha beta\n")


def test_a_folder_over_max_input_bytes_stops_the_read(tmp_path):
    root = make_tree(tmp_path / "corpus", GOOD)
    limits = ReadLimits(input_bytes=len("alpha beta\n") + 5)
    with pytest.raises(InputError, match=r"corpus: holds more than 16 bytes of documents \(raise --max-input-bytes"):
        list(open_source(root, policy=BadRecordPolicy("skip"), limits=limits))


def bomb_tar(path, size: int) -> str:
    """A .tar.gz of GOOD plus a/big: `size` zero bytes, streamed (never held in memory)."""
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        info = tarfile.TarInfo("a/big")
        info.size = size
        with open("/dev/zero", "rb") as zeros:
            tar.addfile(info, zeros)
        for name, text in GOOD.items():
            info = tarfile.TarInfo(name)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text.encode()))
    return str(path)


def test_a_tar_bomb_member_is_refused_in_bounded_memory(read, tmp_path):
    """A 100 MiB member of zeros in a ~100 KiB .tar.gz, with the default bound (64 MiB): a bad
    record named by archive and member, refused from its header without being read; skipped,
    the documents after it are read with memory far below the member's size."""
    path = bomb_tar(tmp_path / "bomb.tar.gz", 100 << 20)
    assert os.path.getsize(path) < 1 << 20
    with pytest.raises(InputError, match=r"bomb.tar.gz:a/big: the document is longer than 64 MiB"):
        list(open_source(path, policy=BadRecordPolicy()))
    policy = BadRecordPolicy("skip")
    tracemalloc.start()
    try:
        batches = read.batches(open_source(path, policy=policy))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert read.labels(batches) == ["a", "b"] and policy.n_skipped == 1
    assert peak < 16 << 20, f"peak {peak / 2**20:.0f} MiB"


def test_a_tar_over_max_input_bytes_stops_the_read(tmp_path):
    path = bomb_tar(tmp_path / "bomb.tar.gz", 8 << 20)
    with pytest.raises(InputError, match=r"bomb.tar.gz: holds more than 4 MiB after decompression"):
        list(open_source(path, policy=BadRecordPolicy("skip"), limits=ReadLimits(input_bytes=4 << 20)))


def _member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info


TAR_HOSTILE = {
    "symlink": (_member("b/x", tarfile.SYMTYPE, "/etc/passwd"), r"a symbolic link to '/etc/passwd', not a document"),
    "hardlink": (_member("b/x", tarfile.LNKTYPE, "a/1"), r"a hard link to 'a/1', not a document"),
    "device": (_member("b/x", tarfile.CHRTYPE), "the member is a device, not a regular file"),
    "fifo": (_member("b/x", tarfile.FIFOTYPE), "the member is a FIFO, not a regular file"),
    "absolute name": (_member("/b/x"), r"the member name is absolute or holds '\.\.'"),
    "dot-dot name": (_member("b/../../x"), r"the member name is absolute or holds '\.\.'"),
    "hidden dot-dot name": (_member("../.x"), r"the member name is absolute or holds '\.\.'"),
}


@pytest.mark.parametrize("kind", TAR_HOSTILE)
def test_archive_members_that_are_not_safe_regular_files_are_bad_records(read, tmp_path, kind):
    member, problem = TAR_HOSTILE[kind]
    path = str(tmp_path / "hostile.tar")
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for name, text in GOOD.items():
            info = tarfile.TarInfo(name)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text.encode()))
        tar.addfile(member, io.BytesIO(b"x") if member.isfile() else None)
        if member.isfile():
            member.size = 1
    with pytest.raises(InputError, match=f"^{re.escape(path)}:{re.escape(member.name)}: {problem}"):
        list(open_source(path, policy=BadRecordPolicy()))
    policy = BadRecordPolicy("skip")
    source = open_source(path, policy=policy)
    assert read.labels(read.batches(source)) == ["a", "b"]
    assert (source.n_read, policy.n_skipped) == (3, 1)


@pytest.mark.parametrize("kind", ["link out of the corpus", "FIFO"])
def test_cli_ingest_of_a_hostile_folder_is_one_line_exit_2(tmp_path, alarm, kind):
    root, entry = hostile_tree(tmp_path, kind)
    result = CliRunner().invoke(main, ["-q", "ingest", root, "--out", str(tmp_path / "s.zarr")])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {entry}: ") and "Traceback" not in result.output
    ok = CliRunner().invoke(main, ["-q", "ingest", root, "--out", str(tmp_path / "t.zarr"), "--on-bad-record", "skip"])
    assert ok.exit_code == 0 and "records read 3, written 2, skipped 1" in ok.output


def test_cli_max_record_bytes_takes_a_size(tmp_path):
    root = make_tree(tmp_path / "corpus", {**GOOD, "b/big": b"x" * 2048})
    args = ["-q", "ingest", root, "--out", str(tmp_path / "s.zarr"), "--max-record-bytes"]
    result = CliRunner().invoke(main, [*args, "1KiB"])
    assert result.exit_code == 2 and "b/big: the document is longer than 1 KiB" in result.output
    assert CliRunner().invoke(main, [*args, "2k"]).exit_code == 0
    bad = CliRunner().invoke(main, [*args, "lots"])
    assert bad.exit_code == 2 and "--max-record-bytes 'lots': expected a positive size" in bad.output


# OHSUMED-23 layout: one top folder holding the subsets (issue 20, item 5)
OHSUMED = {
    "ohsumed_single_23/training/C01/0001": "bacterial infection",
    "ohsumed_single_23/training/C04/0002": "neoplasm tumour",
    "ohsumed_single_23/training/C04/0003": "carcinoma",
    "ohsumed_single_23/test/C01/0004": "viral infection",
}


@pytest.mark.parametrize("kind", ["folder", "archive"])
@pytest.mark.parametrize("subset", ["training", "ohsumed_single_23/training"])
def test_nested_subsets(read, tmp_path, kind, subset):
    root = make_tree(tmp_path / "ohsumed", OHSUMED) if kind == "folder" else make_tar(tmp_path / "o.tgz", OHSUMED)
    batches = read.batches(open_source(root, policy=BadRecordPolicy(), subset=subset))
    assert sorted(read.labels(batches)) == ["C01", "C04", "C04"]
    test = read.batches(open_source(root, policy=BadRecordPolicy(), subset=subset.replace("training", "test")))
    assert read.texts(test) == ["viral infection"]


def test_nested_subsets_are_listed_when_none_is_chosen(tmp_path):
    for root in (make_tree(tmp_path / "ohsumed", OHSUMED), make_tar(tmp_path / "o.tgz", OHSUMED)):
        with pytest.raises(InputError) as e:
            open_source(root, policy=BadRecordPolicy())
        assert "ohsumed_single_23/test, ohsumed_single_23/training" in str(e.value) and "--subset" in e.value.hint


def test_a_subset_matching_two_folders_is_refused(tmp_path):
    files = {**OHSUMED, "other/training/C01/0005": "x"}
    with pytest.raises(InputError, match="matches several folders: ohsumed_single_23/training, other/training"):
        open_source(make_tree(tmp_path / "o", files), policy=BadRecordPolicy(), subset="training")
    with pytest.raises(InputError, match="matches both other/training and ohsumed_single_23/training"):
        list(
            open_source(
                make_tar(tmp_path / "o.tar", {"other/training/C01/0005": "x", **OHSUMED}, "w"),
                policy=BadRecordPolicy(),
                subset="training",
            )
        )


# ---- zip archives, folders behind a URL, and the parts of each (issue 18) ----


@pytest.mark.parametrize("kind", ["directory", "file://", "memory://", "zip", "memory:// zip"])
def test_a_zip_and_a_folder_behind_a_url_read_as_the_local_folder(read, tmp_path, kind):
    """The same documents and labels as the local folder, in its order (a zip's members in the
    folder's order); locations name the URL's files and the archive's members."""
    files = {**NEWS, "20news-bydate-train/.hidden/1": "x", "20news-bydate-train/rec.autos/.DS_Store": b"\x00"}
    files = dict(sorted(files.items(), key=lambda item: item[0].replace("/", "\x00")))  # the folder's order
    opts = {"subset": "20news-bydate-train", "encoding": "latin-1", "batch_size": 2}
    expected = read.batches(open_source(make_tree(tmp_path / "news", files), policy=BadRecordPolicy(), **opts))
    url = f"memory://streamfit-tests/{tmp_path.name}"
    path = {
        "directory": str(tmp_path / "news"),
        "file://": f"file://{tmp_path / 'news'}",
        "memory://": make_memory_tree(f"{url}/news", files),
        "zip": make_zip(tmp_path / "news.zip", files),
        "memory:// zip": f"{url}/news.zip",
    }[kind]
    if kind == "memory:// zip":
        make_memory_tree(url, {"news.zip": open(make_zip(tmp_path / "z.zip", files), "rb").read()})
    source = open_source(path, policy=BadRecordPolicy(), **opts)
    batches = read.batches(source, 2)
    assert read.labels(batches) == read.labels(expected) == ["alt.atheism", "rec.autos", "sci.space", "sci.space"]
    assert read.texts(batches) == read.texts(expected) and source.n_read == 4
    first = "20news-bydate-train/alt.atheism/49960"
    assert read.locations(batches)[0] == (f"{path}:{first}" if "zip" in kind else f"{path}/{first}").replace(
        "file://",
        "",  # a file:// URL is read from its local path
    )


@pytest.mark.parametrize("kind", ["directory", "memory://", "zip"])
def test_the_parts_of_a_folder_or_zip_read_as_the_whole(read, tmp_path, kind):
    """folder_parts cuts a directory (local or behind a URL) into runs of its files and a zip
    archive into runs of its members, by size; the parts read one after the other give the whole
    input's documents, locations and bad records."""
    from streamfit.ingest.sources import folder_parts

    files = {**NEWS, **{f"20news-bydate-train/c{i % 3}/{i:02d}": "w " * (30 + i) for i in range(40)}}
    files["20news-bydate-train/c1/bad"] = b"\xff\xfe not utf-8"
    path = {
        "directory": lambda: make_tree(tmp_path / "news", files),
        "memory://": lambda: make_memory_tree(f"memory://streamfit-tests/{tmp_path.name}/news", files),
        "zip": lambda: make_zip(tmp_path / "news.zip", files),
    }[kind]()
    opts = {"subset": "20news-bydate-train"}
    parts = folder_parts(path, 256, **opts)

    def documents(policy, **part):
        batches = list(open_source(path, policy=policy, **opts, **part))
        return read.labels(batches), read.locations(batches), read.texts(batches)

    whole_policy, parts_policy = BadRecordPolicy("skip"), BadRecordPolicy("skip")
    whole = documents(whole_policy)
    assert len(whole[0]) == 43 and whole_policy.n_skipped == 2  # 60156 and bad are not UTF-8
    assert 10 < len(parts) < 40 and all(p.prefix == ("20news-bydate-train",) for p in parts)
    if kind == "zip":  # runs of the central directory's members, every one in one part
        assert parts[0].start == 0 and parts[-1].stop == len(files)
        assert all(a.stop == b.start for a, b in zip(parts, parts[1:]))
    else:  # every file once, in reading order, with its size
        listed = [f for p in parts for f in p.files]
        assert len(listed) == len(files) and sorted(size for _, size in listed)[-1] == 2 * 69
    pieces = [documents(parts_policy, folder_part=p) for p in parts]
    assert tuple(sum((piece[k] for piece in pieces), []) for k in range(3)) == whole
    assert parts_policy.n_skipped == 2


def _zip_member(zf, name, data=b"x", mode=None):
    info = zipfile.ZipInfo(name)
    if mode is not None:
        info.create_system, info.external_attr = 3, mode << 16
    zf.writestr(info, data)


def _patch_last_member(path, name, kind):
    """Mark the last member, named `name`, in its local header and its central directory entry
    (ZipFile writes neither): kind "encrypted" sets its flag bit 0, "method 99" its compression
    method (AES, which zipfile cannot read)."""
    data = bytearray(open(path, "rb").read())
    for signature, flags_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.rindex(signature, 0, data.rindex(name.encode()))
        if kind == "encrypted":
            data[at + flags_at] |= 0x1
        else:
            data[at + flags_at + 2] = 99
    open(path, "wb").write(bytes(data))


ZIP_HOSTILE = {
    "symlink": ({"mode": 0o120777, "data": b"/etc/passwd"}, "the member is a symbolic link, not a regular file"),
    "fifo": ({"mode": 0o010644}, "the member is a FIFO, not a regular file"),
    "encrypted": ({}, "the member is encrypted"),
    "method 99": ({}, r"the member cannot be read \(That compression method is not supported\)"),
    "absolute name": ({"name": "/b/x"}, r"the member name is absolute or holds '\.\.'"),
    "dot-dot name": ({"name": "b/../../x"}, r"the member name is absolute or holds '\.\.'"),
}


@pytest.mark.parametrize("kind", ZIP_HOSTILE)
def test_zip_members_that_are_not_safe_regular_files_are_bad_records(read, tmp_path, kind):
    options, problem = ZIP_HOSTILE[kind]
    path = str(tmp_path / "hostile.zip")
    name = options.pop("name", "b/x")
    with zipfile.ZipFile(path, "w") as zf:
        for member, text in GOOD.items():
            zf.writestr(member, text)
        _zip_member(zf, name, **options)
    if kind in ("encrypted", "method 99"):
        _patch_last_member(path, name, kind)
    with pytest.raises(InputError, match=f"^{re.escape(path)}:{re.escape(name)}: {problem}"):
        list(open_source(path, policy=BadRecordPolicy()))
    policy = BadRecordPolicy("skip")
    source = open_source(path, policy=policy)
    assert read.labels(read.batches(source)) == ["a", "b"]
    assert (source.n_read, policy.n_skipped) == (3, 1)


def test_a_zip_bomb_member_is_a_bad_record_and_a_damaged_zip_an_error(read, tmp_path):
    """A member of 100 MiB of zeros (deflated to ~100 KiB) over --max-record-bytes is refused by
    its declared size; a member whose bytes fail their CRC-32, and a truncated zip, stop the read
    with one line naming the archive."""
    path = str(tmp_path / "bomb.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("a/big", bytes(100 << 20))
        for member, text in GOOD.items():
            zf.writestr(member, text)
    assert os.path.getsize(path) < 1 << 20
    with pytest.raises(InputError, match=r"bomb.zip:a/big: the document is longer than 64 MiB"):
        list(open_source(path, policy=BadRecordPolicy()))
    policy = BadRecordPolicy("skip")
    assert read.labels(read.batches(open_source(path, policy=policy))) == ["a", "b"] and policy.n_skipped == 1
    with pytest.raises(InputError, match=r"bomb.zip: holds more than 16 bytes of documents"):
        list(open_source(path, policy=BadRecordPolicy("skip"), limits=ReadLimits(input_bytes=16)))
    damaged = str(tmp_path / "damaged.zip")
    with zipfile.ZipFile(damaged, "w") as zf:  # stored: the document's bytes are in the file as they are
        zf.writestr("a/1", "alpha beta gamma")
    data = open(damaged, "rb").read()
    open(damaged, "wb").write(data.replace(b"beta", b"BETA"))
    with pytest.raises(InputError, match=r"damaged.zip: truncated or corrupt archive \(Bad CRC-32"):
        list(open_source(damaged, policy=BadRecordPolicy("skip")))
    open(damaged, "wb").write(data[: len(data) // 2])
    with pytest.raises(InputError, match=r"damaged.zip: truncated or corrupt archive \(File is not a zip file"):
        open_source(damaged, policy=BadRecordPolicy("skip"))


def test_a_local_folder_is_listed_once_and_read_without_fsspec(tmp_path):
    """The layout's listing is kept for the read (one scandir per folder, counted), and a local
    folder's look-up is a stat: neither imports fsspec, nor asyncio with it (~0.05-0.1 s a
    process)."""
    import subprocess
    import sys

    root = make_tree(tmp_path / "corpus", NEWS)
    code = (
        "import os, sys\n"
        "from streamfit.ingest.sources import BadRecordPolicy, open_source\n"
        "listed = []\n"
        "scandir = os.scandir\n"
        "os.scandir = lambda path: listed.append(path) or scandir(path)\n"
        f"source = open_source({root!r}, policy=BadRecordPolicy(), subset='20news-bydate-train', encoding='latin-1')\n"
        "n = sum(len(batch.labels) for batch in source)\n"
        "print(n, len(listed), [m for m in ('fsspec', 'asyncio') if m in sys.modules])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    # 4 training documents; the top folder, its 2 subsets, their 5 class folders: 8 listings
    assert result.stdout.split("\n")[0] == "4 8 []", result.stdout


def test_a_zip_of_one_data_file_names_the_fix(tmp_path):
    """A zip holding one CSV (as data is often sent) is a folder corpus by its name: the error
    says the member is a CSV file to extract and ingest itself (before: only "documents go in
    <class>/<file>")."""
    path = tmp_path / "data.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("reviews.csv", "label,text\npos,good\nneg,bad\n")
    with pytest.raises(InputError, match="not in a class folder") as e:
        list(open_source(str(path), policy=BadRecordPolicy()))
    assert "reviews.csv is a csv file, to ingest it extract it and name the file itself" in e.value.hint
