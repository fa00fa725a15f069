"""The package layout the README describes: stages as folders, short modules, and one import path
per public name (a name is imported from the module that defines it; only `elsi_lib` itself
re-exports, as the public API)."""

import ast
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "elsi_lib"
STAGES = ("inputs", "hidden", "selection", "draft", "study", "common")
# the study: the paper's figures and tables, the accepted-token experiments and their records; it imports
# the core (everything else) and is never imported by it
STUDY = "elsi_lib.study"
MAX_LINES = 800  # a backstop well above every module today: modules are split by concept, never to fit it


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _defined(tree: ast.Module) -> set[str]:
    """Top-level names a module defines itself (not the ones it imports)."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def _sources() -> list[tuple[str, str, str]]:
    """(where, module name or '' outside the package, source) of every Python file and notebook cell."""
    out = []
    for folder in ("elsi_lib", "tests", "bench", "engines"):
        for path in (ROOT / folder).rglob("*.py"):
            module = _module_name(path) if folder == "elsi_lib" else ""
            out.append((str(path.relative_to(ROOT)), module, path.read_text()))
    for path in (ROOT / "notebooks").glob("*.ipynb"):
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            if cell["cell_type"] == "code":
                source = "\n".join(
                    line for line in "".join(cell["source"]).splitlines() if not line.lstrip().startswith(("%", "!"))
                )
                out.append((f"{path.relative_to(ROOT)} cell {i}", "", source))
    return out


def _imports(module: str, source: str, is_package: bool):
    """(absolute module, imported name) of every `from ... import name` into elsi_lib."""
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        if target == "elsi_lib" or target.startswith("elsi_lib."):
            for alias in node.names:
                yield target, alias.name


def test_stages_are_folders():
    folders = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert folders == sorted(STAGES)
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert loose == ["__init__.py", "__main__.py", "cli.py", "cli_args.py", "cli_select.py"]


def test_no_module_over_400_lines():
    long = {name: n for name, path in _modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_one_import_path_per_public_name():
    modules = _modules()
    trees = {name: ast.parse(path.read_text()) for name, path in modules.items()}
    defined = {name: _defined(tree) for name, tree in trees.items()}
    wrong = []
    for where, module, source in _sources():
        is_package = module != "" and modules[module].name == "__init__.py"
        for target, name in _imports(module, source, is_package):
            if target == "elsi_lib" and module != "elsi_lib":
                continue  # the public API re-exports on purpose
            if f"{target}.{name}" in modules:
                continue  # a submodule
            if target not in defined:
                wrong.append(f"{where}: from {target} import {name} (no such module)")
            elif name not in defined[target] and target != "elsi_lib":
                wrong.append(f"{where}: {name} is not defined in {target}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_says_what_it_holds(stage):
    doc = ast.get_docstring(ast.parse((PACKAGE / stage / "__init__.py").read_text()))
    assert doc, f"elsi_lib/{stage}/__init__.py has no docstring"


@pytest.mark.parametrize("stage", STAGES)
def test_stage_packages_do_not_re_export(stage):
    """Only `elsi_lib` itself gathers public names; a stage's names live in its modules."""
    tree = ast.parse((PACKAGE / stage / "__init__.py").read_text())
    assert not [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]


def _imported_modules(module: str, source: str, is_package: bool):
    """Every elsi_lib module `source` imports (absolute or relative, at module level or inside a function)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("elsi_lib"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".") if is_package else module.split(".")[:-1]
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base.startswith("elsi_lib"):
                yield base
                yield from (f"{base}.{a.name}" for a in node.names)


def test_the_core_never_imports_the_study():
    """The command and the Python API stand on the core; the study imports the core, never the reverse."""
    arrows = [
        f"{name} -> {target}"
        for name, path in _modules().items()
        if not name.startswith(STUDY)
        for target in _imported_modules(name, path.read_text(), path.name == "__init__.py")
        if target == STUDY or target.startswith(STUDY + ".")
    ]
    assert not arrows, arrows


def test_no_core_module_names_a_notebook():
    named = [
        name
        for name, path in _modules().items()
        if not name.startswith(STUDY)
        and any(
            f"notebook {n:02d}" in path.read_text().lower() or f"{n:02d}_" in path.read_text() for n in range(1, 10)
        )
    ]
    assert not named, named
