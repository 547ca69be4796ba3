"""ARFF files (Weka's Attribute-Relation File Format), dense or sparse, single- or multilabel
as Mulan and Meka write them (medical, yeast, bibtex, delicious ship so).

Layout: a header of `@relation NAME`, `@attribute NAME TYPE` lines (TYPE numeric, real,
integer, or a nominal {v1,v2,...}) and `@data`; then one instance per line, dense
(`v1,v2,...`, one value per attribute) or sparse (`{i v,j v,...}`, i the attribute counted from
0, absent attributes 0). `%` starts a comment line; names and values may be quoted with ' or ".

Which attributes are labels (no default: an ARFF file does not say, and a wrong guess would
train on the labels):
- n_labels=L: the last L attributes are binary labels (Mulan's layout; its XML file names them).
- labels_xml=FILE: Mulan's XML label file; every `<label name="...">` (at any depth) is a label.
- a Meka header, `@relation 'NAME: -C L'`: the first L attributes (L < 0: the last -L).
- class_attribute=NAME: one nominal attribute is the class (Weka's single-label files).
A binary label is on for the value 1 and off for 0 (a sparse instance omits it); a multilabel
record's labels are the names of its label attributes that are on, in attribute order. The
header declares the classes (ArffSource.declared): the label attributes, or the class
attribute's values, in header order; ingest takes them as the store's unless --classes is given,
so a label never on in the rows is a class too.
With n_labels=1 and a last attribute that is nominal with values other than 0 and 1 (a Weka
class such as {yes,no}), that attribute is read as the class (class_attribute): a Mulan label is
binary. With n_labels > 1 such a label attribute is an InputError at its @attribute line.
Every other attribute is a feature, in attribute order: a numeric one (or a nominal one whose
values are all numbers, bibtex's {0,1}) is one column holding its value; a nominal one with
other values, `@attribute colour {red,green,blue}`, is one-hot: one column per declared value,
in declared order (the features `colour=red`, `colour=green`, `colour=blue`), 1 for the
instance's value, all 0 for a missing value `?`. So X has one column per numeric feature
attribute plus one per declared value of each one-hot attribute. Hashed (the default), those
column numbers are hashed as a LIBSVM file's indices are.

Train/test headers: ingest records what decides the columns, the feature attributes in order
with each one-hot attribute's values in order (feature_header: the list and its SHA-256), in the
store's format options as `arff_header`; the model carries it. A file read with that option
(the other ARFF inputs of the ingest, `ingest --like`, `predict` on raw ARFF) whose header is the
same is read as before; one that declares the same feature attributes and values by name, in
another order, has its columns mapped to the recorded ones (its rows are the training file's
columns, so the scores are right); any other difference (an attribute missing or added, another
kind, another set of values) is an InputError naming the file, the first differing attribute
and the fix. Label attributes are not compared (labels are matched by name). A store from before
session 21 records none: its files are read by their own headers, as then. String, date and relational features are an InputError at their
@attribute line (encode them as numbers or nominal values first). A sparse instance omits a
nominal attribute at its first value (Weka's rule): a one-hot attribute omitted is its first
value; a numeric nominal feature or a binary label must list 0 first (bibtex's {0,1} do), else
InputError.

Bad records (a location `path:line`): a wrong number of values, a value that is not a number
or is missing (`?`) in a numeric feature, a value a one-hot feature does not declare, a sparse
index out of range or repeated, a label value other than 0/1 or than one of the class's values. Values must be finite in float32. A line longer
than limits.record_bytes is a bad record (never held whole).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import xml.etree.ElementTree as ET

import numpy as np

from streamfit.errors import ConfigError, InputError
from streamfit.ingest.limits import DEFAULT_BATCH_SIZE, DEFAULT_LIMITS, ReadLimits
from streamfit.ingest.sources._util import (
    bounded_lines,
    check_batch_size,
    check_encoding,
    csr_int64,
    fits_float32,
    open_binary,
    require_path,
    too_long,
)
from streamfit.ingest.sources.batches import SparseBatch
from streamfit.ingest.sources.policy import BadRecordPolicy

_NUMERIC = {"numeric", "real", "integer"}
_MEKA_LABELS = re.compile(r"-C\s+(-?\d+)")
_LABELS_HINT = (
    "name the label attributes: --option n_labels=L (Mulan: the last L attributes), "
    "--option labels_xml=FILE (Mulan's XML), or --option class_attribute=NAME (one class attribute)"
)


def _split(text: str, sep: str = ",") -> list[str]:
    """`text` split at `sep` outside ' or " quotes; pieces stripped, quotes removed."""
    out: list[str] = []
    cur: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and i + 1 < len(text):
                cur.append(text[i + 1])
                i += 1
            elif ch == quote:
                quote = None
            else:
                cur.append(ch)
        elif ch in "'\"":
            quote = ch
        elif ch == sep:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
        i += 1
    if quote:
        raise ValueError(f"a {quote} quote is not closed")
    out.append("".join(cur).strip())
    return out


def _name_and_rest(text: str) -> tuple[str, str]:
    """An attribute's (name, type text) from what follows `@attribute`."""
    text = text.strip()
    if text[:1] in "'\"":
        end = text.find(text[0], 1)
        if end < 0:
            raise ValueError("the quoted name is not closed")
        return text[1:end], text[end + 1 :].strip()
    name, _, rest = text.partition(" ") if " " in text else text.partition("\t")
    rest = rest.strip() if rest else ""
    if "\t" in name:
        name, _, more = name.partition("\t")
        rest = (more + " " + rest).strip()
    return name, rest


class _Attribute:
    """One @attribute: its name, whether numeric, its nominal values (None if numeric) and line."""

    def __init__(self, name: str, type_text: str, line: int):
        self.name, self.line = name, line
        self.values: list[str] | None  # the nominal values; None: numeric; []: string, date, relational
        if type_text.startswith("{") and type_text.endswith("}"):
            self.values = _split(type_text[1:-1])
        elif type_text.split() and type_text.split()[0].lower() in _NUMERIC:
            self.values = None
        else:
            self.values = []

    def one_hot(self) -> bool:
        """Whether a feature of this type is one-hot: nominal, with a value that is not a number."""
        return bool(self.values) and not self.numeric_values()

    def binary(self) -> bool:
        """Whether a label of this type can be a Mulan label: numeric, or nominal 0/1 values."""
        return self.values is None or {float_or_none(v) for v in self.values} <= {0.0, 1.0}

    def numeric_values(self) -> bool:
        """Whether a feature of this type reads as numbers (numeric, or nominal numbers)."""
        if self.values is None:
            return True
        try:
            [float(v) for v in self.values]
        except ValueError:
            return False
        return bool(self.values)


class ArffSource:
    """Streaming reader of a dense or sparse ARFF file (see the module docstring)."""

    kind = "sparse"

    def __init__(
        self,
        path: str,
        *,
        policy: BadRecordPolicy,
        batch_size: int = DEFAULT_BATCH_SIZE,
        n_labels: int | None = None,
        labels_xml: str | None = None,
        class_attribute: str | None = None,
        encoding: str = "utf-8",
        arff_header: dict | None = None,
        limits: ReadLimits = DEFAULT_LIMITS,
    ):
        self.path = os.fspath(path)
        self.url_info = require_path(self.path)  # a URL's look-up, for its open
        given = [name for name, v in (("n_labels", n_labels), ("labels_xml", labels_xml)) if v is not None]
        if class_attribute is not None:
            given.append("class_attribute")
        if len(given) > 1:
            raise InputError(self.path, f"{' and '.join(given)} both name the labels", "give one of them")
        if n_labels is not None and n_labels < 1:
            raise InputError(self.path, f"n_labels={n_labels}", "the number of label attributes is 1 or more")
        self.policy = policy
        self.batch_size = check_batch_size(batch_size)
        self.n_labels, self.labels_xml, self.class_attribute = n_labels, labels_xml, class_attribute
        self.encoding = check_encoding(encoding)
        self.limits = limits
        features = arff_header.get("features") if isinstance(arff_header, dict) else None
        if arff_header is not None and (not isinstance(features, list) or header_record(features) != arff_header):
            raise ConfigError(
                "format option arff_header: not a feature header as ingest records it (ArffSource.feature_header); "
                "drop it: ingest records the training file's, and --like and predict read it from the store"
            )
        self.header = arff_header  # the training file's feature_header(): the columns to read into
        self.multilabel: bool | None = class_attribute is None if given else None
        self.n_read = 0

    def _label_names(self) -> set[str]:
        try:
            root = ET.parse(str(self.labels_xml)).getroot()
        except (OSError, ET.ParseError) as e:
            raise InputError(str(self.labels_xml), f"cannot read the label XML ({e})") from None
        names = {el.get("name") for el in root.iter() if el.tag.rsplit("}", 1)[-1] == "label"}
        names.discard(None)
        if not names:
            raise InputError(str(self.labels_xml), "names no labels", 'Mulan lists them as <label name="...">')
        return {str(n) for n in names}

    def _labels(self, attributes: list[_Attribute], relation: str) -> list[int]:
        """The positions of the label attributes."""
        n = len(attributes)
        if self.n_labels is not None:
            if self.n_labels >= n:
                raise InputError(self.path, f"n_labels={self.n_labels} but there are {n} attributes", _LABELS_HINT)
            at = list(range(n - self.n_labels, n))
            if self.n_labels == 1 and attributes[-1].values and not attributes[-1].binary():
                self.multilabel = False  # one nominal class attribute, Weka's layout: read it as the class
                return at
            for i in at:
                if not attributes[i].binary():
                    a = attributes[i]
                    raise InputError(
                        f"{self.path}:{a.line}",
                        f"label attribute {a.name!r} has the values {{{','.join(a.values or [])}}}, "
                        f"not 0 and 1 (n_labels={self.n_labels} reads the last {self.n_labels} attributes as "
                        "Mulan's binary labels)",
                        f"for one class attribute pass --option class_attribute={a.name} instead of n_labels",
                    )
            return at
        if self.labels_xml is not None:
            names = self._label_names()
            found = [i for i, a in enumerate(attributes) if a.name in names]
            missing = sorted(names - {attributes[i].name for i in found})
            if missing:
                raise InputError(self.path, f"no attribute for the label(s) {', '.join(missing[:5])} of the XML")
            return found
        if self.class_attribute is not None:
            found = [i for i, a in enumerate(attributes) if a.name == self.class_attribute]
            if not found or attributes[found[0]].values in (None, []):
                raise InputError(
                    self.path, f"no nominal attribute {self.class_attribute!r}", "name a nominal attribute"
                )
            return found
        meka = _MEKA_LABELS.search(relation)
        if meka and int(meka[1]) != 0 and abs(int(meka[1])) < n:
            c = int(meka[1])
            self.multilabel = True
            return list(range(c)) if c > 0 else list(range(n + c, n))
        raise InputError(self.path, "the file does not say which attributes are the labels", _LABELS_HINT)

    def _header(self, lines) -> tuple[list[_Attribute], str, int]:
        """(attributes, relation name, line number of @data), reading up to @data."""
        attributes: list[_Attribute] = []
        relation = ""
        for line_no, raw in enumerate(lines, 1):
            if raw is None:
                problem, hint = too_long(self.limits)
                raise InputError(f"{self.path}:{line_no}", f"the header line is {problem}", hint)
            text = self._decode(raw, line_no).strip()
            if not text or text.startswith("%"):
                continue
            word, _, rest = text.partition(" ") if " " in text else text.partition("\t")
            word = word.lower()
            if word == "@relation":
                relation = rest.strip()
            elif word == "@attribute":
                try:
                    attributes.append(_Attribute(*_name_and_rest(rest), line_no))
                except (ValueError, IndexError) as e:
                    raise InputError(f"{self.path}:{line_no}", f"bad @attribute line ({e})") from None
            elif word == "@data":
                if not attributes:
                    raise InputError(f"{self.path}:{line_no}", "@data before any @attribute")
                return attributes, relation, line_no
            else:
                raise InputError(f"{self.path}:{line_no}", f"expected @relation, @attribute or @data, not {word!r}")
        raise InputError(self.path, "no @data line: not an ARFF file")

    def _decode(self, raw: bytes, line_no: int) -> str:
        try:
            return raw.decode(self.encoding)
        except UnicodeDecodeError:
            raise InputError(f"{self.path}:{line_no}", f"not valid {self.encoding} text", "pass --encoding") from None

    def _read_header(self, lines) -> tuple[list[_Attribute], list[int], np.ndarray, int]:
        """(attributes, label positions, is_label mask, line number of @data), the attributes checked."""
        attributes, relation, data_line = self._header(lines)
        label_at = self._labels(attributes, relation)
        if self.multilabel is None:
            self.multilabel = True  # n_labels, labels_xml or Meka's -C
        is_label = np.zeros(len(attributes), dtype=bool)
        is_label[label_at] = True
        for i, a in enumerate(attributes):
            if not is_label[i] and a.values == []:
                raise InputError(
                    f"{self.path}:{a.line}",
                    f"feature attribute {a.name!r} is not numeric or nominal (a string, date or relational one)",
                    "encode it as numbers or nominal values first, or name it as a label attribute",
                )
        if not self.multilabel:
            for i in label_at:
                if attributes[i].values is None:
                    raise InputError(f"{self.path}:{attributes[i].line}", "the class attribute is numeric")
        return attributes, label_at, is_label, data_line

    def feature_header(self) -> dict:
        """What decides this file's columns, as ingest records it (the `arff_header` option of the
        files read like it): {"features": [[name, values], ...], "sha256": digest of the list},
        one entry per feature attribute in attribute order, values the declared values of a
        one-hot attribute in declared order, None for a one-column (numeric) attribute."""
        return self.declared()[0]

    def declared(self) -> tuple[dict, list[str]]:
        """(feature_header(), the classes the header declares), from one read of the header. The
        classes: a multilabel file's label attributes, in attribute order (a label never on in
        any instance is one of them); a single-label file's class attribute's declared values, in
        declared order. Ingest takes them as the store's classes unless --classes is given."""
        with open_binary(self.path, info=self.url_info, max_bytes=self.limits.input_bytes) as f:
            attributes, label_at, is_label, _ = self._read_header(bounded_lines(f, self.limits.record_bytes))
        if self.multilabel:
            classes = [attributes[i].name for i in label_at]
        else:
            classes = list(attributes[label_at[0]].values or [])
        return header_record(_features(attributes, is_label)), list(dict.fromkeys(classes))

    def _columns(self, attributes: list[_Attribute], is_label: np.ndarray) -> tuple[list[list[int]], int]:
        """(each attribute's columns, the width): a feature's one column, or a one-hot feature's
        column per declared value in the file's order; [] for a label. Numbered from this file's
        header, or with a `header` that differs, from it by attribute name and value (InputError
        unless both declare the same feature attributes and values, in whatever order)."""
        mine = _features(attributes, is_label)
        if self.header is None or mine == self.header["features"]:
            layout = mine
        else:
            layout = self.header["features"]
            self._check_same_features(attributes, is_label, layout)
            logging.getLogger(__name__).info(
                "%s: the feature attributes or their values are declared in another order than the training "
                "file's: its columns are mapped to the training file's by name",
                self.path,
            )
        start, first, value_at = 0, {}, {}  # a column by attribute name; a one-hot one's by value too
        for name, values in layout:
            first[name] = start
            if values is not None:
                value_at[name] = {v: start + k for k, v in enumerate(values)}
            start += len(values) if values is not None else 1
        columns = [
            [] if is_label[i] else [value_at[a.name][v] for v in a.values or []] if a.one_hot() else [first[a.name]]
            for i, a in enumerate(attributes)
        ]
        return columns, start

    def _check_same_features(self, attributes: list[_Attribute], is_label: np.ndarray, layout: list) -> None:
        """InputError naming the first feature attribute (in this file's order) that the training
        header `layout` lacks or declares otherwise, else the first one of it this file lacks."""
        theirs = {name: values for name, values in layout}
        hint = (
            "give this file the training file's feature @attribute lines (the same names and nominal values; "
            "their order may differ)"
        )
        seen: set[str] = set()
        for i, a in enumerate(attributes):
            if is_label[i]:
                continue
            where = f"{self.path}:{a.line}"
            if a.name in seen:
                raise InputError(where, f"feature attribute {a.name!r} is declared twice", hint)
            seen.add(a.name)
            if a.name not in theirs:
                raise InputError(where, f"feature attribute {a.name!r} is not in the training file's header", hint)
            values = a.values if a.one_hot() else None
            expected = theirs[a.name]
            if (values is None) != (expected is None) or (values is not None and sorted(values) != sorted(expected)):

                def kind(v):
                    return "numeric" if v is None else "nominal {" + ",".join(v) + "}"

                raise InputError(
                    where,
                    f"feature attribute {a.name!r} is {kind(values)}, in the training file's header {kind(expected)}",
                    hint,
                )
        missing = [name for name, _ in layout if name not in seen]
        if missing:
            raise InputError(self.path, f"the training file's feature attribute {missing[0]!r} is missing", hint)

    def __iter__(self):
        self.n_read = 0
        with open_binary(self.path, info=self.url_info, max_bytes=self.limits.input_bytes) as f:
            lines = bounded_lines(f, self.limits.record_bytes)
            attributes, label_at, is_label, data_line = self._read_header(lines)
            columns, width = self._columns(attributes, is_label)
            rows = _Rows(self, attributes, label_at, columns, width)
            for line_no, raw in enumerate(lines, data_line + 1):
                location = f"{self.path}:{line_no}"
                if raw is None:
                    self.n_read += 1
                    problem, hint = too_long(self.limits)
                    self.policy.bad(location, f"the line is {problem}", hint=hint)
                    continue
                text = self._decode(raw, line_no).strip()
                if not text or text.startswith("%"):
                    continue
                self.n_read += 1
                rows.add(text, location)
                if len(rows) == self.batch_size:
                    yield rows.take()
            if len(rows):
                yield rows.take()


def _features(attributes: list[_Attribute], is_label: np.ndarray) -> list[list]:
    """[name, values] of each feature attribute in order: a one-hot one's declared values, None
    for a one-column one (numeric, or nominal numbers)."""
    return [
        [a.name, list(a.values or []) if a.one_hot() else None] for a, label in zip(attributes, is_label) if not label
    ]


def header_record(features: list[list]) -> dict:
    """The recorded feature header: the list and the SHA-256 of its compact JSON."""
    text = json.dumps(features, separators=(",", ":"), ensure_ascii=False)
    return {"sha256": hashlib.sha256(text.encode()).hexdigest(), "features": features}


def header_width(header: dict) -> int:
    """The columns of a recorded feature header (header_record): one per numeric attribute, one per
    declared value of a one-hot one (what ArffSource._columns numbers)."""
    return sum(1 if values is None else len(values) for _, values in header["features"])


def float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


class _Rows:
    """Parses instance lines into a batch: CSR pieces, labels, locations."""

    def __init__(
        self,
        source: ArffSource,
        attributes: list[_Attribute],
        label_at: list[int],
        columns: list[list[int]],
        n_cols: int,
    ):
        self.source, self.attributes, self.label_at, self.n_cols = source, attributes, label_at, n_cols
        self.label_set = set(label_at)
        # a one-column feature's column (ArffSource._columns)
        self.column = [c[0] if len(c) == 1 else -1 for c in columns]
        # one-hot feature attributes: position -> {value: column}
        self.one_hot = {
            i: dict(zip(a.values or [], columns[i]))
            for i, a in enumerate(attributes)
            if i not in self.label_set and a.one_hot()
        }
        # columns numbered from another header than the file's: a row's columns need sorting
        flat = [c for cs in columns for c in cs]
        self.reordered = flat != sorted(flat)
        # a sparse instance omits a nominal attribute at its first value (Weka's rule): read as 0 /
        # off only when that value is 0 (a single-label class may have any first value; a one-hot
        # feature turns on its first value's column)
        self.not_zero_first = [
            a.name
            for i, a in enumerate(attributes)
            if a.values
            and float_or_none(a.values[0]) != 0
            and i not in self.one_hot
            and (source.multilabel or i not in self.label_set)
        ]
        self._reset()

    def _reset(self) -> None:
        self.values: list[float] = []
        self.indices: list[int] = []
        self.indptr = [0]
        self.labels: list = []
        self.locations: list[str] = []

    def __len__(self) -> int:
        return len(self.labels)

    def _pairs(self, text: str) -> list[tuple[int, str]]:
        """(attribute position, value text) of an instance line; ValueError naming the problem."""
        n = len(self.attributes)
        if text.startswith("{"):
            if self.not_zero_first:
                raise InputError(
                    self.source.path,
                    f"sparse instances omit nominal attributes at their first value, which for "
                    f"{self.not_zero_first[0]!r} is not 0",
                    "list 0 first among its values in the @attribute line, or write dense instances",
                )
            if not text.endswith("}"):
                raise ValueError("a sparse instance must end with '}'")
            body = text[1:-1].strip()
            pairs = []
            for piece in _split(body) if body else []:
                index, _, value = piece.partition(" ") if " " in piece else piece.partition("\t")
                if not index.isdigit() or int(index) >= n:
                    raise ValueError(f"sparse index {index!r} is not an attribute number from 0 to {n - 1}")
                pairs.append((int(index), value.strip()))
            seen = [i for i, _ in pairs]
            if len(set(seen)) != len(seen):
                raise ValueError("an attribute is given twice")
            return sorted(pairs)
        cells = _split(text)
        if len(cells) != n:
            raise ValueError(f"expected {n} values, found {len(cells)}")
        return list(enumerate(cells))

    def add(self, text: str, location: str) -> None:
        source = self.source
        try:
            pairs = self._pairs(text)
        except ValueError as e:
            source.policy.bad(location, str(e), text, "write one value per attribute, or {index value, ...}")
            return
        on = set()
        cls = None
        cols, vals = [], []
        if self.one_hot and text.startswith("{"):  # omitted one-hot attributes are at their first value
            given = {i for i, _ in pairs}
            for i in self.one_hot.keys() - given:
                cols.append(self.one_hot[i][(self.attributes[i].values or [""])[0]])
                vals.append(1.0)
        for i, value in pairs:
            a = self.attributes[i]
            if i in self.one_hot:
                if value == "?":
                    continue  # missing: no column on
                col = self.one_hot[i].get(value)
                if col is None:
                    source.policy.bad(
                        location,
                        f"attribute {a.name!r}: the value {value!r} is not one of its values {{{','.join(a.values or [])}}}",
                        text,
                        "declare the value in its @attribute line",
                    )
                    return
                cols.append(col)
                vals.append(1.0)
                continue
            if i in self.label_set:
                if not source.multilabel:
                    if value not in (a.values or []):
                        source.policy.bad(location, f"class {value!r} is not one of the values of {a.name!r}", text)
                        return
                    cls = value
                elif value in ("1", "1.0"):
                    on.add(i)
                elif value not in ("0", "0.0"):
                    source.policy.bad(location, f"label {a.name!r} has the value {value!r}, not 0 or 1", text)
                    return
                continue
            try:
                number = float(value)
            except ValueError:
                problem = "a missing value (?)" if value == "?" else f"the value {value!r} is not a number"
                source.policy.bad(location, f"attribute {a.name!r}: {problem}", text, "features are numbers")
                return
            cols.append(self.column[i])
            vals.append(number)
        if self.one_hot or self.reordered:  # keep each row's columns in increasing order
            order = np.argsort(cols, kind="stable")
            cols, vals = [cols[k] for k in order], [vals[k] for k in order]
        if not fits_float32(vals).all():
            source.policy.bad(location, "a value is not finite in float32", text, "scale the features")
            return
        if not source.multilabel and cls is None:
            a = self.attributes[self.label_at[0]]
            cls = (a.values or [""])[0]  # a sparse instance omits the class's first value (index 0)
        self.indices += cols
        self.values += vals
        self.indptr.append(len(self.indices))
        self.labels.append([self.attributes[i].name for i in self.label_at if i in on] if source.multilabel else cls)
        self.locations.append(location)

    def take(self) -> SparseBatch:
        X = csr_int64(
            np.asarray(self.values, dtype=np.float64),
            np.asarray(self.indices, dtype=np.int64),
            np.asarray(self.indptr, dtype=np.int64),
            self.n_cols,
        )
        batch = SparseBatch(X, self.labels, self.locations)
        self._reset()
        return batch
