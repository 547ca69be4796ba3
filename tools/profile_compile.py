"""Where a solver's first use goes: numba compilation per dispatcher, cold and warm.

    python tools/profile_compile.py                       # every scenario, a table per scenario
    python tools/profile_compile.py ppdsparse bcd-chunks  # some of them
    python tools/profile_compile.py --json out.json ...   # also the numbers as JSON

Each scenario runs twice in a fresh Python process, both with one fresh NUMBA_CACHE_DIR: cold
(an empty cache: a first use after installation) and warm (the cache the cold run filled). A
scenario is what a user does first with a solver: the CLI in this process (`streamfit ingest` of
pipelines/data/digits.svm.gz, `streamfit train` in process, `streamfit predict --top-k 3`, one
subprocess-free `main([...])` call each), then the estimator on the same data (fit, predict).
The `hashing` scenario ingests a small generated text corpus (the hashing kernels).

Printed per scenario: each phase's wall and CPU seconds cold and warm; per dispatcher the number
of compilations, the inclusive seconds (its compile events, the callees it compiled inside
them included) and the exclusive ones (without its callees' events), from numba's
"numba:compile" events (numba.core.event), which fire only for a real compilation (a cache
load fires none); and the signatures each dispatcher of streamfit (and numba's own helpers, as
the sorts) holds at the end, so a duplicate (read-only vs writable arrays, C vs A layout,
int32 vs int64) shows as two.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DIGITS = REPO / "pipelines" / "data" / "digits.svm.gz"

# scenario -> (train solver, its -p settings (small budgets), estimator class, its keyword arguments)
SCENARIOS: dict[str, tuple[str, list[str], str, dict]] = {
    "ppdsparse": ("ppdsparse", [], "PPDSparseClassifier", {}),
    "bcd-memory": ("bcd", ["mode=memory", "max_iter=5"], "BCDClassifier", {"mode": "memory", "max_iter": 5}),
    "bcd-chunks": ("bcd", ["mode=chunks", "max_iter=2"], "BCDClassifier", {"mode": "chunks", "max_iter": 2}),
    "fbpd": ("fbpd", ["max_iter=5"], "FBPDClassifier", {"max_iter": 5}),
    "multiboost": ("multiboost", ["max_iter=5"], "MultiBoostClassifier", {"max_iter": 5}),
    "stagewise": ("stagewise", ["n_passes=1"], "StagewiseLSClassifier", {"n_passes": 1}),
    "hashing": ("", [], "", {}),
}


def _child(scenario: str, workdir: Path) -> dict:
    """One run of `scenario` in this process: phases timed, compile events and signatures."""
    import collections

    from numba.core import event

    events: list[dict] = []  # one per compilation: dispatcher name, start, end, depth
    stack: list[dict] = []

    def name_of(dispatcher) -> str:
        f = dispatcher.py_func
        return f"{f.__module__}.{f.__qualname__}"

    class Compiles(event.Listener):
        def on_start(self, ev):
            rec = {"name": name_of(ev.data["dispatcher"]), "t0": time.perf_counter(), "c0": time.process_time()}
            rec["child"] = 0.0
            rec["parent"] = stack[-1]["name"] if stack else ""
            stack.append(rec)

        def on_end(self, ev):
            rec = stack.pop()
            rec["wall"] = time.perf_counter() - rec.pop("t0")
            rec["cpu"] = time.process_time() - rec.pop("c0")
            rec["self"] = rec["wall"] - rec.pop("child")
            rec["top"] = not stack
            if stack:
                stack[-1]["child"] += rec["wall"]
            events.append(rec)

    event.register("numba:compile", Compiles())
    phases: list[dict] = []

    def phase(label: str, fn) -> None:
        first = len(events)
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        top = [e for e in events[first:] if e["top"]]
        phases.append(
            {
                "phase": label,
                "wall": time.perf_counter() - t0,
                "cpu": time.process_time() - c0,
                "compile_wall": sum(e["wall"] for e in top),
                "compile_cpu": sum(e["cpu"] for e in top),
                "compiles": len(events) - first,
                "names": sorted({e["name"] for e in events[first:]}),
            }
        )

    def cli(*args: str) -> None:
        from streamfit.cli import main

        try:
            main(["-q", *args], standalone_mode=False)
        except SystemExit as e:  # an error line was printed
            if e.code:
                raise

    store, run = workdir / "digits.zarr", workdir / "run"
    if scenario == "hashing":
        corpus = workdir / "docs.tsv"
        words = [f"w{i}" for i in range(300)]
        with open(corpus, "w") as f:
            for i in range(600):
                text = " ".join(words[(i * 7 + j * 13) % 300] for j in range(40))
                f.write(f"{i % 3}\t{text}\n")
        phase(
            "cli ingest text",
            lambda: cli(
                "ingest", str(corpus), "--no-header", "--label-field", "0", "--text-field", "1", "--out", str(store)
            ),
        )
    else:
        solver, params, estimator, kwargs = SCENARIOS[scenario]
        phase("cli ingest", lambda: cli("ingest", str(DIGITS), "--no-hash", "--out", str(store)))
        p_args = [a for kv in params for a in ("-p", kv)]
        phase("cli train", lambda: cli("train", str(store), "--solver", solver, *p_args, "--out", str(run)))
        out = workdir / "pred.csv"
        phase("cli predict", lambda: cli("predict", str(run), str(store), "--top-k", "3", "--out", str(out)))

        def fit() -> None:
            from sklearn.datasets import load_digits

            import streamfit

            X, y = load_digits(return_X_y=True)
            model = getattr(streamfit, estimator)(**kwargs).fit(X / 16.0, y)
            model.predict(X / 16.0)

        phase("estimator fit+predict", fit)

    per: dict[str, dict] = collections.defaultdict(lambda: {"n": 0, "incl": 0.0, "excl": 0.0, "cpu_top": 0.0})
    for e in events:
        d = per[e["name"]]
        d["n"] += 1
        d["incl"] += e["wall"]
        d["excl"] += e["self"]
        if e["top"]:
            d["cpu_top"] += e["cpu"]
    signatures = {}
    from numba.core.registry import CPUDispatcher

    for name, mod in list(sys.modules.items()):
        if not name.startswith("streamfit") or mod is None:
            continue
        for attr, obj in vars(mod).items():
            if isinstance(obj, CPUDispatcher) and getattr(obj.py_func, "__module__", None) == name:
                if obj.signatures:
                    signatures[f"{name}.{attr}"] = [str(s) for s in obj.signatures]
    # numba's own functions (sorts, str formatting of error messages) compiled outside another of
    # numba's own: what they cost and which of our kernels pulled them in
    helpers = [
        (e["name"], e["parent"], e["wall"])
        for e in events
        if e["parent"].startswith("streamfit") and not e["name"].startswith("streamfit")
    ]
    return {"phases": phases, "dispatchers": dict(per), "signatures": signatures, "helpers": helpers}


def run_scenario(scenario: str, python: str = sys.executable) -> dict:
    """Cold then warm, each in a fresh process sharing one fresh NUMBA_CACHE_DIR."""
    with tempfile.TemporaryDirectory(prefix="profile-compile-") as tmp:
        env = dict(os.environ, NUMBA_CACHE_DIR=str(Path(tmp) / "numba-cache"))
        out = {}
        for kind in ("cold", "warm"):
            work = Path(tmp) / kind
            work.mkdir()
            res = subprocess.run(
                [python, __file__, "--child", scenario, str(work)],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            if res.returncode != 0:
                sys.exit(f"{scenario} ({kind}) failed:\n{res.stderr[-3000:]}")
            out[kind] = json.loads(res.stdout.strip().splitlines()[-1])
        return out


def report(scenario: str, res: dict, top: int) -> None:
    cold, warm = res["cold"], res["warm"]
    print(f"\n## {scenario}")
    print(
        "| phase | cold wall s | cold CPU s | of it compiling (wall, CPU) | compilations | warm wall s | warm CPU s |"
    )
    print("|---|---|---|---|---|---|---|")
    for c, w in zip(cold["phases"], warm["phases"], strict=True):
        print(
            f"| {c['phase']} | {c['wall']:.1f} | {c['cpu']:.1f} | {c['compile_wall']:.1f}, {c['compile_cpu']:.1f} | "
            f"{c['compiles']} | {w['wall']:.2f} | {w['cpu']:.2f} |"
        )
    warm_compiles = sum(p["compiles"] for p in warm["phases"])
    print(f"warm compilations: {warm_compiles}")
    print("| dispatcher | compilations | inclusive s | exclusive s |")
    print("|---|---|---|---|")
    rows = sorted(cold["dispatchers"].items(), key=lambda kv: -kv[1]["incl"])
    for name, d in rows[:top]:
        print(f"| {name} | {d['n']} | {d['incl']:.1f} | {d['excl']:.1f} |")
    helpers: dict[tuple[str, str], float] = {}
    for name, under, incl in cold["helpers"]:
        helpers[name, under] = helpers.get((name, under), 0.0) + incl
    print("numba's own helpers compiled at the top of their tree (inclusive s), under which kernel:")
    for (name, under), incl in sorted(helpers.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {incl:5.1f} {name} <- {under}")
    if warm_compiles:
        print("compiled again in the warm run:", sorted({e for p in warm["phases"] for e in p["names"]}))
    multi = {k: v for k, v in cold["signatures"].items() if len(v) > 1}
    print(f"dispatchers with signatures: {len(cold['signatures'])}; with more than one: {len(multi)}")
    for name, sigs in sorted(multi.items()):
        print(f"  {name}: {len(sigs)}")
        for s in sigs:
            print(f"    {s}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(_child(sys.argv[2], Path(sys.argv[3]))))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenarios", nargs="*", help=f"of {', '.join(SCENARIOS)} (default: all)")
    ap.add_argument("--top", type=int, default=15, help="dispatchers listed per scenario")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = ap.parse_args()
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown:
        ap.error(f"unknown scenario {sorted(unknown)}; choose from {', '.join(SCENARIOS)}")
    results = {}
    for scenario in args.scenarios or list(SCENARIOS):
        results[scenario] = run_scenario(scenario)
        report(scenario, results[scenario], args.top)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
