"""The small inputs of docs/walkthrough.md, written to tests/data/walkthrough/ (committed; run this
again only to change them). Synthetic documents: each class draws most of its words from its own
vocabulary and some from a shared one, with a fixed seed.

- news-train.txt.gz, news-test.txt.gz: headerless `label<TAB>id<TAB>text` lines, as R8 ships
  (plus an id column), 3 classes, 240 / 90 documents.
- clinic.tar.gz: a folder-corpus archive with a top folder, clinic/{training,test}/<class>/<id>
  as OHSUMED-23 ships, 3 classes, 180 / 60 documents.

    python tools/make_walkthrough_data.py [--out tests/data/walkthrough]
"""

from __future__ import annotations

import argparse
import gzip
import io
import tarfile
from pathlib import Path

import numpy as np

SHARED = "the of and a to in is for on with that this from by was were are be as at".split()
NEWS = {
    "space": "rocket orbit launch shuttle nasa moon satellite mars astronaut payload booster".split(),
    "autos": "engine car wheel brake dealer sedan gearbox tyre mileage horsepower clutch".split(),
    "finance": "stock market shares profit dividend earnings bank bond investor quarter trading".split(),
}
CLINIC = {
    "C01": "bacterial infection antibiotic sepsis viral fever pathogen culture strain".split(),
    "C04": "tumor carcinoma neoplasm metastasis chemotherapy malignant biopsy oncology".split(),
    "C14": "cardiac artery hypertension myocardial heart valve coronary arrhythmia".split(),
}


def document(rng: np.random.Generator, words: list[str], n_words: int = 20, own_share: float = 0.1) -> str:
    """n_words words, each from the class's words with probability own_share, else shared or
    another class's words (noise), joined by spaces."""
    pool = [w for v in (NEWS | CLINIC).values() for w in v]
    out = []
    for _ in range(n_words):
        u = rng.random()
        source = words if u < own_share else SHARED if u < 0.85 else pool
        out.append(source[rng.integers(len(source))])
    return " ".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("tests/data/walkthrough"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20)
    for part, per_class in (("train", 80), ("test", 30)):
        lines = [
            f"{label}\t{part}-{label}-{i}\t{document(rng, words)}\n"
            for i in range(per_class)
            for label, words in NEWS.items()
        ]
        with gzip.GzipFile(args.out / f"news-{part}.txt.gz", "wb", mtime=0) as f:
            f.write("".join(lines).encode())
    with tarfile.open(args.out / "clinic.tar.gz", "w:gz") as tar:
        for part, per_class in (("training", 60), ("test", 20)):
            for label, words in CLINIC.items():
                for i in range(per_class):
                    data = document(rng, words).encode()
                    info = tarfile.TarInfo(f"clinic/{part}/{label}/{part[:2]}{i:04d}")
                    info.size, info.mtime = len(data), 0
                    tar.addfile(info, io.BytesIO(data))


if __name__ == "__main__":
    main()
