"""Text that a source decoded and that is not what its file's writer meant: the checks of every
text batch that ingest stores (its _batch) and predict scores (its raw batches), `check_batch`.

- A NUL character (U+0000) in a record's text: text files do not hold one; a binary file does,
  and so does UTF-16 or UTF-32 text read as an 8-bit encoding (every other byte of English text
  in UTF-16 is a NUL, and UTF-8 decodes it without an error). Tokenized, each NUL was a word
  break: the record's words were cut apart without a word. It is a bad record (`nul_problem`),
  under ingest's --on-bad-record like any other: by default one error naming FILE:LINE; predict,
  which scores every record or none, stops there. The fix it names depends on the format: one
  that decodes bytes with its `encoding` option (CSV, TSV, folder corpora, ARFF) may have been
  given the wrong one; in a format that stores text as text (a Parquet string or list<string>
  column, a JSON string: UTF-8 by definition, `decoded_with` None) the NUL is in the text as its
  writer wrote it, and no option of ours reads it otherwise.
- C1 control characters (U+0080–U+009F) in text read as latin-1: latin-1 text does not use them,
  but latin-1 decodes every byte, so Windows text in cp1252 read as latin-1 turns its quotes,
  dashes and € into them, without an error. The records are kept; the command ends with one
  warning counting them and naming cp1252 (`c1_rows`, `c1_warning`).
"""

from __future__ import annotations

import codecs
import re

NUL = "\x00"
C1_CONTROLS = re.compile("[\x80-\x9f]")
LATIN_1 = codecs.lookup("latin-1").name  # the codec's name for every spelling (latin-1, iso-8859-1, l1, …)

# what each command that checks text says to do, in its own options: for a NUL in text decoded
# from bytes (its format's `encoding` option) and in text its format stores as text, and for C1 controls
NUL_FIXES = {
    ("ingest", True): "pass --encoding utf-16 (or utf-32) for such text; else convert or drop the file, or skip such "
    "records with --on-bad-record skip",
    ("ingest", False): "remove the NULs where the file is written, or skip such records with --on-bad-record skip, "
    "or keep them aside with --on-bad-record quarantine",
    ("predict", True): "pass --option encoding=utf-16 (or utf-32) for such text; else convert the file, or drop such "
    "records",
    ("predict", False): "remove the NULs, or such records, where the file is written: predict scores every record "
    "or none",
}
C1_FIXES = {
    "ingest": "ingest it again with --encoding cp1252",
    "predict": "score it with --option encoding=cp1252 (and if the training data is such text too, ingest it again "
    "with --encoding cp1252 and train again)",
}


def decoded_with(source) -> str | None:
    """The encoding a source decodes its text from bytes with (its `encoding` option: CSV, TSV,
    folder corpora, ARFF); None for a format that stores text as text (Parquet, JSONL)."""
    return getattr(source, "encoding", None)


def check_batch(batch, encoding: str | None, policy, command: str) -> tuple[list[int], list[int]]:
    """A TextBatch's records read as `encoding` (None: stored as text, `decoded_with`), checked:
    each whose text holds a NUL goes to `policy` (a BadRecordPolicy: raised in its error mode,
    else counted) as a bad record at its location, with `command`'s fix (NUL_FIXES). Returns
    (those rows, the rows whose text holds C1 controls where `encoding` is latin-1, else none).
    A batch without either costs one search of each field's joined text."""
    bad = []
    fields = list(batch.texts.values())
    if any(_may_hold(field, lambda text: NUL in text) for field in fields):
        for r in range(len(batch.locations)):
            found = nul_problem([_text(field[r]) for field in fields], encoding, command)
            if found is not None:
                bad.append(r)
                policy.bad(batch.locations[r], found[0], hint=found[1])
    return bad, c1_rows(batch.texts) if reads_c1(encoding) else []


def _text(value) -> str:
    """A record's text field as one string: a string as it is, a list of tokens (Parquet's
    list<string>) joined by spaces, so a NUL or a C1 control inside a token is found."""
    return value if isinstance(value, str) else " ".join(value)


def _may_hold(field: list, found) -> bool:
    """Whether `found` finds something in a text field's records joined (one search for a batch);
    True for a field of token lists (Parquet's list<string>), which is looked at record by record."""
    try:
        return bool(found("".join(field)))
    except TypeError:
        return True


def nul_problem(texts: list[str], encoding: str | None, command: str) -> tuple[str, str] | None:
    """(problem, hint) for a record whose texts (one per text field) hold a NUL, else None;
    `encoding` as check_batch's."""
    if not any(NUL in text for text in texts):
        return None
    if encoding is None:
        return "a NUL character (U+0000) in the text as the file stores it", NUL_FIXES[command, False]
    share = sum(text.count(NUL) for text in texts) / max(sum(len(text) for text in texts), 1)
    likely = "UTF-16 text" if share >= 0.25 else "a binary file, or UTF-16 or UTF-32 text"
    return f"a NUL character in the text (read as {encoding}): likely {likely}", NUL_FIXES[command, True]


def reads_c1(encoding: str | None) -> bool:
    """Whether text in `encoding` is checked for C1 controls (latin-1 only: the codec that reads
    cp1252's characters as them; never text stored as text)."""
    return encoding is not None and codecs.lookup(encoding).name == LATIN_1


def c1_rows(texts: dict[str, list[str]]) -> list[int]:
    """The records (row numbers) whose text in any field holds a C1 control character."""
    fields = list(texts.values())
    if not any(_may_hold(field, C1_CONTROLS.search) for field in fields):
        return []
    n = len(fields[0]) if fields else 0
    return [r for r in range(n) if any(C1_CONTROLS.search(_text(field[r])) for field in fields)]


def c1_warning(count: int, first: str, command: str) -> str:
    """`command`'s warning on `count` records with C1 controls (the first at `first`)."""
    return (
        f"{count} records read as latin-1 hold C1 control characters (U+0080–U+009F; the first: {first}), which "
        "latin-1 text does not use and Windows text in cp1252 becomes when read as latin-1 (its quotes, dashes "
        f"and €): if the input is such text, {C1_FIXES[command]}"
    )
