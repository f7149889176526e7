"""The package's three layers (docs/design.md#11-three-layers): the mathematics (cem_core.nn), the
experiments (cem_core.experiments) and the app's support code (cem_core.ui). A lower layer never
imports a higher one, the mathematics imports nothing beyond torch, numpy and the standard
library, nothing imports Streamlit, no module imports another's private names, and no library
module works out repository paths from its own location."""
import ast
import re
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "cem_core"
RANK = {"nn": 0, "experiments": 1, "ui": 2, "cli": 3}                # the package root and __main__ sit on top
THIRD_PARTY = {"nn": {"torch", "numpy"}}                     # what a layer may import besides the standard library


def _modules():
    return sorted(p for p in PACKAGE.rglob("*.py"))


def _layer(path: Path) -> str | None:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else None


def _imports(path: Path):
    """(module, names) of every import in the file, relative imports resolved to absolute names."""
    package = ".".join(("cem_core", *path.relative_to(PACKAGE).parts[:-1]))
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            yield base, [alias.name for alias in node.names]


def _target_layer(module: str, names: list[str]) -> set:
    parts = module.split(".")
    if parts[0] != "cem_core":
        return set()
    if len(parts) > 1 and parts[1] in RANK:
        return {parts[1]}
    return {name for name in names if name in RANK} or {"top"}


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_module_imports_only_its_own_layer_and_those_below(path):
    layer = _layer(path)
    if layer is None:
        return                                                # cem_core/__init__.py and __main__.py: the top
    for module, names in _imports(path):
        for target in _target_layer(module, names):
            assert target != "top" and RANK[target] <= RANK[layer], \
                f"{path.relative_to(PACKAGE)} ({layer}) imports {module} ({target})"
        root = module.split(".")[0]
        assert root != "streamlit", f"{path.relative_to(PACKAGE)} imports Streamlit"
        if layer in THIRD_PARTY and root != "cem_core":
            assert root in THIRD_PARTY[layer] or root in sys.stdlib_module_names or root == "__future__", \
                f"{path.relative_to(PACKAGE)} ({layer}) imports {module}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_private_names_cross_modules(path):
    for module, names in _imports(path):
        private = [n for n in names if n.startswith("_") and n not in ("__version__", "annotations")]
        assert not private or not module.startswith("cem_core"), f"{path.relative_to(PACKAGE)} imports {private}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_repository_paths_inside_the_library(path):
    """Where results, runs and data live is the caller's to say; a module may only find its own folder
    (records does, to ask git which commit its code is). The one exception is named: the trained models committed
    beside the package, which every command must find from any folder (checkpoints.models_folder, overridden by
    CEM_LAB_MODELS_DIR), and only in that one line."""
    text = path.read_text()
    found = re.findall(r"[^\n]*__file__\)?[^\n]*\.(?:parents\b|parent\.parent)[^\n]*", text)
    if path.relative_to(PACKAGE).as_posix() == "experiments/checkpoints.py":
        assert len(found) == 1 and 'Path(__file__).resolve().parents[2] / "models"' in found[0], found
    else:
        assert not found, f"{path.relative_to(PACKAGE)} works out repository paths from its own location"


def test_the_checker_sees_a_violation(tmp_path):
    """The import reader resolves relative imports: a ui-level import written relatively from nn counts."""
    fake = PACKAGE / "nn" / "attention.py"
    found = {m for m, _ in _imports(fake)}
    assert "cem_core.nn.config" in found and all(not m.startswith(".") for m in found)
    assert _target_layer("cem_core.ui.controls", []) == {"ui"}
    assert _target_layer("cem_core", ["gp_sweep", "experiments"]) == {"experiments"}
    assert _target_layer("cem_core", ["AttentionConfig"]) == {"top"}


DISTRIBUTIONS = {"huggingface_hub": "huggingface-hub"}       # import name -> distribution, where they differ


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s\[<>=;!~]", r, maxsplit=1)[0].lower() for r in requirements}


def test_every_third_party_import_is_declared_in_pyproject():
    """pip install -e .[app] (or [lm], [dev]) brings everything the package imports."""
    import tomllib

    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]
    declared = _requirement_names(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        declared |= _requirement_names(extra)
    imported = {module.split(".")[0] for path in _modules() for module, _ in _imports(path)}
    third_party = {m for m in imported if m not in sys.stdlib_module_names and m not in ("cem_core", "__future__")}
    missing = {DISTRIBUTIONS.get(m, m) for m in third_party} - declared
    assert third_party and not missing, f"imported by cem_core but not in pyproject.toml: {sorted(missing)}"


MAX_FUNCTION_LINES = 50
MAX_MODULE_LINES = 450


def _definitions(tree: ast.Module) -> list[str]:
    """The module-level names a module defines: functions, classes and assigned names."""
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [n.id for t in node.targets for n in (t.elts if isinstance(t, ast.Tuple) else [t])
                      if isinstance(n, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return names


def test_no_name_is_defined_in_two_modules_and_no_new_function_is_long():
    """One owner per name: a class, function or constant defined at the top of two modules of cem_core is two
    things under one name (or one thing twice). No function is longer than MAX_FUNCTION_LINES lines, and no module
    than MAX_MODULE_LINES: a module holds one thing, named after it."""
    where: dict[str, set] = {}
    long = set()
    for path in _modules():
        text = path.read_text()
        if text.count("\n") > MAX_MODULE_LINES:
            long.add(path.relative_to(PACKAGE).as_posix())
        tree = ast.parse(text)
        for name in _definitions(tree):
            if name not in ("__all__", "log"):
                where.setdefault(name, set()).add(path.relative_to(PACKAGE).as_posix())
        long |= {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES}
    twins = {name for name, paths in where.items() if len(paths) > 1}
    assert not twins, {name: sorted(where[name]) for name in twins}
    assert not long, sorted(long)
    assert _definitions(ast.parse("A = 1\ndef f(): pass\nclass C: pass\nb: int = 2\nD, E = 3, 4\n")) == \
        ["A", "f", "C", "b", "D", "E"]
