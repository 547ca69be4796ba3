"""Candidates for tests that cannot fail, found by walking the tests' syntax trees.

    python tools/scan_tests.py [tests]

Prints, per kind, the places to read (a candidate is not a verdict; docs/benchmarks.md, "Code
review", says what was found by reading them):

- no-check: a test function with no assert, pytest.raises/warns/fail/approx and no call of a
  helper named assert*/check*/expect* (its checks may sit in a subprocess or in a helper);
- only-nested: every assert of a test inside a for/while/if, which may run zero times;
- zip-all: `all(... zip(...))` without strict=True, true for lists of unequal or no length;
- skip: pytest.skip/xfail/importorskip and skip/xfail marks;
- broad-except: a bare `except`, `except Exception` or `except BaseException`;
- self-compare: a comparison or array check of an expression with itself;
- sleep: time.sleep (a timing the test may depend on).
"""

from __future__ import annotations

import argparse
import ast
import pathlib

CHECK_ATTRIBUTES = {"raises", "warns", "fail", "approx", "deprecated_call"}
CHECK_PREFIXES = ("assert", "_assert", "check", "_check", "expect", "_expect")
ARRAY_CHECKS = {"array_equal", "assert_array_equal", "assert_allclose", "allclose", "assert_equal"}
LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.If)


def _name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _has_check(test: ast.AST) -> bool:
    for n in ast.walk(test):
        if isinstance(n, ast.Assert) or (isinstance(n, ast.Attribute) and n.attr in CHECK_ATTRIBUTES):
            return True
        if isinstance(n, ast.Call) and _name(n).startswith(CHECK_PREFIXES):
            return True
    return False


def _assert_depths(node: ast.AST, depth: int = 0):
    """The number of loops and branches around each assert of a function, not of nested ones."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Assert):
            yield depth
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield from _assert_depths(child, depth + isinstance(child, LOOPS))


def scan(root: pathlib.Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {
        k: [] for k in ("no-check", "only-nested", "zip-all", "skip", "broad-except", "self-compare", "sleep")
    }
    for path in sorted(root.rglob("*.py")):
        for n in ast.walk(ast.parse(path.read_text())):
            where = f"{path}:{getattr(n, 'lineno', 0)}"
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test"):
                if not _has_check(n):
                    found["no-check"].append(f"{where} {n.name}")
                depths = list(_assert_depths(n))
                if depths and min(depths) > 0:
                    found["only-nested"].append(f"{where} {n.name}")
            elif isinstance(n, ast.Call):
                name = _name(n)
                if name == "all" and n.args and isinstance(n.args[0], ast.GeneratorExp):
                    for gen in n.args[0].generators:
                        it = gen.iter
                        if isinstance(it, ast.Call) and _name(it) == "zip":
                            if not any(k.arg == "strict" for k in it.keywords):
                                found["zip-all"].append(f"{where} {ast.unparse(n)[:100]}")
                if name in ("skip", "xfail", "importorskip", "skipif"):
                    found["skip"].append(f"{where} {ast.unparse(n)[:100]}")
                if name == "sleep":
                    found["sleep"].append(f"{where} {ast.unparse(n)[:100]}")
                if name in ARRAY_CHECKS and len(n.args) >= 2 and ast.dump(n.args[0]) == ast.dump(n.args[1]):
                    found["self-compare"].append(f"{where} {ast.unparse(n)[:100]}")
            elif isinstance(n, ast.Attribute) and n.attr in ("skip", "xfail", "skipif"):
                if isinstance(n.value, ast.Attribute) and n.value.attr == "mark":
                    found["skip"].append(f"{where} mark.{n.attr}")
            elif isinstance(n, ast.ExceptHandler):
                if n.type is None or (isinstance(n.type, ast.Name) and n.type.id in ("Exception", "BaseException")):
                    found["broad-except"].append(f"{where} {ast.unparse(n).splitlines()[0]}")
            elif isinstance(n, ast.Compare) and len(n.ops) == 1:
                if ast.dump(n.left) == ast.dump(n.comparators[0]):
                    found["self-compare"].append(f"{where} {ast.unparse(n)[:100]}")
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default="tests", type=pathlib.Path)
    for kind, places in scan(ap.parse_args().root).items():
        print(f"== {kind}: {len(places)}")
        for place in places:
            print(f"   {place}")


if __name__ == "__main__":
    main()
