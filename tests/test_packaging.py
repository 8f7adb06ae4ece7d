"""Packaging: every import is declared, the optional plot extra fails clearly, the license and
the typing marker ship."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]

#: imports that an optional extra provides, and the extra
OPTIONAL = {"matplotlib": "plot", "apprise": "notify"}


def _requirement_name(spec: str) -> str:
    return re.split(r"[\s\[<>=!~;]", spec, maxsplit=1)[0].lower().replace("_", "-")


#: the fields of a node that hold statements (a body, an else, a finally, the handlers of a
#: try, the cases of a match); every other field holds expressions, names or operators
_STATEMENT_FIELDS = ("body", "orelse", "finalbody", "handlers", "cases")


def _import_statements(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement of a module, however deeply nested (in a function, a class,
    a try, an if, a with, a loop or a match case). An import is a statement, so only the
    statement fields are followed: ``ast.walk`` also visits every expression, eleven times
    as many nodes, which cost about as much CPU as parsing the package."""
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
            continue
        for field in _STATEMENT_FIELDS:
            todo.extend(getattr(node, field, ()))


def _third_party_imports() -> dict[str, set[str]]:
    """Top-level names imported by crawler/ that are neither the stdlib nor the project."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "crawler").rglob("*.py")):
        for node in _import_statements(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top != "crawler" and top not in sys.stdlib_module_names:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_import_is_a_declared_dependency() -> None:
    declared = {_requirement_name(spec) for spec in PROJECT["dependencies"]}
    extras = {
        extra: {_requirement_name(spec) for spec in specs}
        for extra, specs in PROJECT["optional-dependencies"].items()
    }
    providers = packages_distributions()
    undeclared = []
    for module, where in sorted(_third_party_imports().items()):
        dists = {d.lower().replace("_", "-") for d in providers.get(module, [module])}
        if module in OPTIONAL:
            assert dists & extras[OPTIONAL[module]], (
                f"{module} is not in the {OPTIONAL[module]!r} extra"
            )
            assert not dists & declared, f"{module} must stay optional"
        elif not dists & declared:
            undeclared.append(f"{module} ({', '.join(sorted(where))})")
    assert not undeclared, f"imported but not in [project] dependencies: {undeclared}"


def test_the_test_extra_can_run_every_test() -> None:
    test_extra = {_requirement_name(spec) for spec in PROJECT["optional-dependencies"]["test"]}
    for extra in OPTIONAL.values():
        for spec in PROJECT["optional-dependencies"][extra]:
            assert _requirement_name(spec) in test_extra
    assert "import-linter" in test_extra


def test_license_and_typing_marker_ship() -> None:
    assert PROJECT["license"] == "MIT"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License") and "the crawler authors" in text
    assert (ROOT / "crawler" / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["crawler"]


def test_plot_without_matplotlib_fails_at_once_with_the_install_hint(tmp_path: Path) -> None:
    # A run that would take minutes: the refusal must come before it, not after.
    blocked = (
        "import sys; sys.modules['matplotlib'] = None; "
        "from crawler.cli import main; "
        "sys.argv = ['crawler', 'simulate', '--env', 'A', '--slots', '400000', "
        f"'-s', 'lakg', '--plot', {str(tmp_path / 'out.png')!r}]; main()"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", blocked], capture_output=True, text=True, env=env, timeout=120
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    assert "pip install 'crawler[plot]'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out.png").exists()
    assert elapsed < 30  # 400,000 slots of LAKG would take minutes


def test_plot_ratios_itself_refuses_without_matplotlib() -> None:
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from crawler.sim.plot import PlotUnavailableError, plot_ratios\n"
        "try:\n    plot_ratios([], 'x.png')\n"
        "except PlotUnavailableError as exc:\n    print(exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'crawler[plot]'" in done.stdout
