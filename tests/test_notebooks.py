"""The notebooks: they run top to bottom on their small defaults, prove a symbolic identity and
compare with cem_core, fail when a cem_core formula gets a wrong sign, stay paired (.py <-> .ipynb),
ship with fresh outputs (notebooks/execute.py), and their exercises start unsolved, with solutions in
notebooks/solutions.py that the tests check (and a wrong answer that the checks reject).

Notebooks run in a separate kernel (nbclient, the "python3" kernel, which jupyter_client starts
with this interpreter), so a wrong sign is injected by prepending a code cell that patches cem_core
inside the kernel before anything else runs.
"""
import base64
import json
import os
import re
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import jupytext
import nbformat
import pytest
from conftest import tiny_gp_specs
from nbclient.exceptions import CellExecutionError

from cem_core.experiments.gp import sweep as gp_sweep

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
sys.path.insert(0, str(NOTEBOOKS))
from execute import digest, execute, png_size_and_dpi, source_hash, tags  # noqa: E402
from solutions import EXERCISES  # noqa: E402

pytestmark = pytest.mark.slow          # reads and executes notebooks (jupytext, nbclient kernels, a virtualenv)

SOURCES = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py"))
NAMES = [p.stem for p in SOURCES]
ROOT = NOTEBOOKS.parent


def _distribution(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip().lower().replace("_", "-")


def _pinned(path: Path) -> set[str]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return {_distribution(line) for line in lines if line and not line.startswith("-")}


def dev_only_modules() -> list[str]:
    """The top-level modules of the packages that only `make test` installs: those of requirements-dev.txt
    that requirements.txt does not pull in, directly or through its dependencies (scipy, transformers,
    scikit-learn, playwright, pytest, ruff, ...)."""
    runtime, todo = set(), list(_pinned(ROOT / "requirements.txt"))
    while todo:                                    # requirements.txt and everything it depends on
        name = todo.pop()
        if name in runtime:
            continue
        runtime.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [_distribution(r) for r in requires if "extra ==" not in r]
    dev_only = _pinned(ROOT / "requirements-dev.txt") - runtime
    modules = {m for m, dists in metadata.packages_distributions().items()
               if any(_distribution(d) in dev_only for d in dists) and m.isidentifier()}
    return sorted(modules)


@pytest.fixture(scope="session")
def student_env(tmp_path_factory):
    """A kernel environment where the test-only packages cannot be imported, as in the environment that
    `make notebooks` builds (requirements.txt only): a stub module for each, first on PYTHONPATH, raises
    ModuleNotFoundError."""
    stubs = tmp_path_factory.mktemp("student-env")
    for module in dev_only_modules():
        (stubs / f"{module}.py").write_text(
            f"raise ModuleNotFoundError({f'No module named {module!r} (a test-only package, blocked)'!r}, "
            f"name={module!r})\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(stubs), os.environ.get("PYTHONPATH", "")])}


def test_the_student_environment_blocks_the_test_only_packages(student_env):
    """The blocked list is what only `make test` installs; a kernel started with student_env cannot import
    scipy, while sympy and torch (runtime) still import."""
    blocked = dev_only_modules()
    assert {"scipy", "sklearn", "transformers", "playwright", "pytest"} <= set(blocked)
    assert not {"sympy", "torch", "numpy", "nbformat", "jupytext", "ipywidgets"} & set(blocked)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import importlib.util, sympy, torch\n"
        "try:\n    import scipy\nexcept ModuleNotFoundError as error:\n    print('blocked:', error.name)")])
    execute(nb, env=student_env)
    assert nb.cells[0].outputs[0].text == "blocked: scipy\n"


def code(name: str) -> str:
    return "\n".join(c.source for c in jupytext.read(NOTEBOOKS / f"{name}.py").cells if c.cell_type == "code")


def test_every_numbered_notebook_is_here():
    assert NAMES == ["00_lecture", "01_attention_from_energy", "02_gated_mlp_from_energy", "03_design_space",
                     "04_gp_recursion", "05_what_the_evidence_says", "06_inside_a_trained_model"]


# -- structure (static) ----------------------------------------------------------------------------


def test_every_notebook_starts_with_the_set_up_cell_and_colab_link_made_from_the_one_repository_address():
    """The first code cell of each notebook is colab.setup_cell(), hidden in JupyterLab and left out of the slides;
    its first Markdown cell links the notebook on Colab. Both come from pyproject.toml's [project.urls], which a
    fork changes once (`python notebooks/colab.py --sync` rewrites them: here on a copy, with another address)."""
    import colab

    assert colab.repository() == "https://github.com/cem-lab/cem-lab"
    for name in NAMES:
        nb = jupytext.read(NOTEBOOKS / f"{name}.py")
        first = next(c for c in nb.cells if c.cell_type == "code")
        assert {"colab-setup", "hide-input", "slides-skip"} <= set(tags(first)), name
        assert first.metadata.get("jupyter", {}).get("source_hidden") is True, name
        assert first.source == colab.setup_cell(), f"{name}: run `python notebooks/colab.py --sync`"
        assert f"[Open in Colab]({colab.colab_link(name)})" in nb.cells[0].source, name
    assert colab.colab_link("01_x") == "https://colab.research.google.com/github/cem-lab/cem-lab/blob/main/notebooks/01_x.ipynb"


def test_a_fork_changes_the_address_once_and_sync_rewrites_every_notebook(tmp_path):
    import shutil

    import colab

    fork = tmp_path / "fork"
    (fork / "notebooks").mkdir(parents=True)
    for path in SOURCES:
        shutil.copy(path, fork / "notebooks" / path.name)
    toml = (ROOT / "pyproject.toml").read_text().replace("github.com/cem-lab/cem-lab", "github.com/someone/cem-fork")
    (fork / "pyproject.toml").write_text(toml)
    assert len(colab.sync(fork)) == len(NAMES) and colab.sync(fork) == []          # idempotent
    text = (fork / "notebooks" / "00_lecture.py").read_text()
    assert 'REPOSITORY = "https://github.com/someone/cem-fork"' in text and "cem-lab/cem-lab" not in text
    assert "colab.research.google.com/github/someone/cem-fork/blob/main/notebooks/00_lecture.ipynb" in text


def test_the_set_up_installs_only_what_is_missing_keeping_what_colab_pins():
    import colab

    names = colab.requirement_names(ROOT)
    assert {"torch", "numpy", "sympy", "jupyter", "ipywidgets", "zstandard", "plotly"} <= set(names)
    assert "cem-lab" not in names and len(names) == len(set(names))
    assert colab.missing(["torch", "sympy", "no-such-distribution-here"]) == ["no-such-distribution-here"]


def test_the_colab_cell_installs_the_project_where_cem_core_is_missing(tmp_path):
    """Run as a student's first cell by a Python without cem_core (a fresh virtual environment): it clones the
    project (here from this repository), pip installs the clone (without dependencies here: CEM_LAB_NO_DEPS), and
    leaves the notebook in the clone's notebooks folder with cem_core and nbhelpers importable from there."""
    import colab

    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=120)
    probe = colab.setup_cell() + ("\nimport importlib.util\nprint(importlib.util.find_spec('cem_core').origin)"
                                  "\nprint(importlib.util.find_spec('nbhelpers').origin)\nprint(os.getcwd())")
    env = {**os.environ, "CEM_LAB_SOURCE": str(ROOT), "CEM_LAB_NO_DEPS": "1"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run([str(tmp_path / "venv" / "bin" / "python"), "-c", probe], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    clone = (tmp_path / "cem-lab").resolve()
    assert done.stdout.split() == [str(clone / "cem_core" / "__init__.py"), str(clone / "notebooks" / "nbhelpers.py"),
                                   str(clone / "notebooks")]


# The earlier set-up cell: skipped wherever cem_core imports, so after a kernel restart on Colab
# (the package installed, the working folder and the path reset) the next cell could not import nbhelpers
OLD_SETUP_CELL = """import importlib.util
import os
import runpy
import subprocess

if importlib.util.find_spec("cem_core") is None:
    source = os.environ.get("CEM_LAB_SOURCE", "https://github.com/cem-lab/cem-lab")
    subprocess.run(["git", "clone", "--quiet", "--depth", "1", source, "cem-lab"], check=True)
    runpy.run_path("cem-lab/notebooks/colab.py", run_name="__main__")"""


def _kernel_run(cells: list[str], cwd: Path, env: dict) -> nbformat.NotebookNode:
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(cwd)}}).execute(env=env)
    return nb


@pytest.mark.parametrize("cell, works", [("new", True), ("old", False)])
def test_the_set_up_cell_survives_a_kernel_restart(tmp_path, cell, works):
    """Colab after a restart: cem_core installed, the working folder elsewhere (Colab's /content, here a
    temporary folder), the clone beside it from the first session. The set-up cell runs twice in one kernel,
    then the lecture's next cells (its parameters and its imports, nbhelpers among them); then a new kernel (the
    restart) runs the set-up cell and the same cells again. Today's cell passes; the cell before the rewrite fails
    at the imports."""
    import colab

    source = colab.setup_cell() if cell == "new" else OLD_SETUP_CELL
    lecture = jupytext.read(NOTEBOOKS / "00_lecture.py")
    following = [c.source for c in lecture.cells if c.cell_type == "code" and "colab-setup" not in tags(c)][:2]
    assert "from nbhelpers import" in following[1]
    env = {**os.environ, "CEM_LAB_SOURCE": str(ROOT), "CEM_LAB_NO_DEPS": "1"}
    subprocess.run(["git", "clone", "--quiet", "--depth", "1", str(ROOT), "cem-lab"], cwd=tmp_path, check=True)
    probe = "import os, nbhelpers\nprint(os.getcwd(), nbhelpers.__file__)"
    try:
        for session in ([source, source, *following, probe], [source, *following, probe]):       # then a restart
            nb = _kernel_run(session, tmp_path, env)
            notebooks = (tmp_path / "cem-lab" / "notebooks").resolve()
            assert nb.cells[-1].outputs[0].text.split() == [str(notebooks), str(notebooks / "nbhelpers.py")]
    except CellExecutionError as error:
        assert not works and "No module named 'nbhelpers'" in str(error)
    else:
        assert works, "the old set-up cell should have failed after a restart"
    assert not (tmp_path / "cem-lab" / "cem-lab").exists()                   # no second clone


@pytest.mark.parametrize("name", NAMES)
def test_notebook_structure(name):
    """Learning goals first, one parameters cell, an exercise, a stated tolerance, a symbolic identity
    asserted to be zero, and at least one comparison cell against cem_core."""
    nb = jupytext.read(NOTEBOOKS / f"{name}.py")
    assert nb.cells[0].cell_type == "markdown" and "Learning goals" in nb.cells[0].source
    assert sum("parameters" in tags(c) for c in nb.cells) == 1
    assert any(c.cell_type == "markdown" and "## Exercise" in c.source for c in nb.cells)
    assert any(c.cell_type == "markdown" and "Tolerance" in c.source for c in nb.cells)
    assert re.search(r"assert sp\.(simplify|expand)\(.*\) == (0|sp\.zeros\()", code(name))
    compare = [c for c in nb.cells if any(t.startswith("compare-") for t in tags(c))]
    assert compare and all("assert" in c.source for c in compare)


def test_notebooks_never_differentiate_matrix_symbols():
    """MatrixSymbol appears only in notebook 01's demonstration of the pitfall
    (docs/design.md#71-sympy-returns-0-for-matrixsymbol-gradients)."""
    assert [name for name in NAMES if "MatrixSymbol" in code(name)] == ["01_attention_from_energy"]


# -- pairing ---------------------------------------------------------------------------------------


def cells(nb) -> list[tuple]:
    return [(c.cell_type, c.source, tags(c)) for c in nb.cells]


@pytest.mark.parametrize("name", NAMES)
def test_py_and_ipynb_are_in_sync(name):
    py, ipynb = NOTEBOOKS / f"{name}.py", NOTEBOOKS / f"{name}.ipynb"
    assert cells(jupytext.read(py)) == cells(jupytext.read(ipynb)), \
        f"{name}: run `jupytext --sync notebooks/{name}.py`"
    raw = nbformat.read(ipynb, as_version=4)
    assert raw.metadata["kernelspec"]["name"] == "python3"


@pytest.mark.parametrize("name", NAMES)
def test_committed_outputs_are_from_the_current_source_and_render_anywhere(name):
    """The .ipynb was executed from the .py as it is now (`make notebook-outputs`), has outputs, holds no
    error, and its figures are PNGs of at least 150 dpi."""
    raw = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    source = source_hash(jupytext.read(NOTEBOOKS / f"{name}.py"))
    assert raw.metadata.get("cem_lab", {}).get("source_sha256") == source, \
        f"{name}.ipynb's outputs are stale: run `make notebook-outputs`"
    outputs = [o for c in raw.cells if c.cell_type == "code" for o in c.outputs]
    assert outputs and not any(o.output_type == "error" for o in outputs)
    images = [o.data["image/png"] for o in outputs if "image/png" in o.get("data", {})]
    assert images and all(png_size_and_dpi(base64.b64decode(image))[2] >= 150 for image in images)


def test_every_ipynb_has_its_py_source():
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == NAMES


# -- execution -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_top_to_bottom_and_gives_the_committed_outputs(name, student_env):
    """In the students' environment (no test-only package importable), a fresh run reproduces the committed
    outputs cell by cell (texts with rounding-level numbers masked, figure sizes), so a committed output never
    goes stale against cem_core or the results it reads; every code cell with an output in the fresh run has
    it committed, and every exercise starts unanswered. The lecture path runs in under a minute (a lecturer
    reruns it before class)."""
    start = time.perf_counter()
    nb = execute(jupytext.read(NOTEBOOKS / f"{name}.py"), env=student_env)
    assert name != "00_lecture" or time.perf_counter() - start < 60
    compared = [c for c in nb.cells if any(t.startswith("compare-") for t in tags(c))]
    assert all(c.outputs for c in compared)                             # each shows its error
    committed = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    for k, (fresh, kept) in enumerate(zip(digest(nb), digest(committed), strict=True)):
        assert fresh == kept, f"{name}.ipynb code cell {k}: committed output is stale; run `make notebook-outputs`"
    checks = [c for c in nb.cells if any(t.startswith("check-") for t in tags(c))]
    assert checks and all("not answered yet" in str(c.outputs) for c in checks)


NEGATE = """\
import functools, importlib

import torch


def _negated(f):
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        out = f(*args, **kwargs)
        if not ({when}):
            return out
        return (-out[0], *out[1:]) if isinstance(out, tuple) else -out
    return wrapper


_owner = importlib.import_module({module!r})
*_path, _name = {attribute!r}.split(".")
for _part in _path:
    _owner = getattr(_owner, _part)
setattr(_owner, _name, _negated(getattr(_owner, _name)))
"""

SIGN_FLIPS = [  # (notebook, module, attribute whose result is negated, the comparison cell that must fail)
    ("00_lecture", "cem_core.nn.attention", "CEMAttention._attention_readout", "compare-lecture-attention"),
    ("00_lecture", "cem_core.nn.mlp", "CEMGatedMLP._mlp_readout", "compare-lecture-mlp"),
    ("01_attention_from_energy", "cem_core.nn.attention", "CEMAttention._attention_readout", "compare-attention"),
    ("02_gated_mlp_from_energy", "cem_core.nn.activations", "silu_antiderivative", "compare-phi"),
    ("02_gated_mlp_from_energy", "cem_core.nn.mlp", "CEMGatedMLP._mlp_readout", "compare-mlp"),
    ("03_design_space", "cem_core.nn.attention", "CEMAttention._attention_readout", "compare-dlr-attention"),
    ("04_gp_recursion", "cem_core.experiments.gp.task", "gp_predictive", "compare-gp"),
    # the readout after step t: the layers after the one stopped, run on h + x^(t) - x^(0)
    ("06_inside_a_trained_model", "cem_core.nn.readout", "_run", "compare-readout"),
]

# One per derivation of notebooks 01-03, each a wrong sign in the cem_core formula that the derivation
# checks, negated only when `when` (an expression in the call's `args`) holds, so that the other
# comparisons of the notebook, which run first, still pass:
# (notebook, module, attribute, when, the comparison cell that must fail).
DERIVATION_SIGN_FLIPS = {
    # RoPE: R_i^T, which rotates the head outputs back to the query's position
    "rope-unrotate": ("01_attention_from_energy", "cem_core.nn.attention", "unrotate", "True", "compare-rope"),
    # the MLP curvature: Phi' = phi, the backward that autograd differentiates for the Hessian
    "mlp-curvature": ("02_gated_mlp_from_energy", "cem_core.nn.activations", "_SiLUAntiderivative.backward", "True",
                      "compare-mlp-curvature"),
    # D+LR: the diagonal d_k of A_k = diag(d_k) + W_Q,k^T W_K,k
    "dlr-diagonal": ("03_design_space", "cem_core.nn.attention", "CEMAttention.diagonal_matrix", "True",
                     "compare-dlr-attention"),
    # the preconditioned step x - eta P g with our positive definite P = diag(softplus p) + U U^T
    "psd-step": ("03_design_space", "cem_core.nn.precondition", "Preconditioner.forward", "args[0].kind == 'psd'",
                 "compare-descent"),
    # the paper's P = diag(softplus p) + U V^T + V U^T, and its negative eigenvalue
    "dlr-preconditioner": ("03_design_space", "cem_core.nn.precondition", "Preconditioner.forward",
                           "args[0].kind == 'dlr'", "compare-preconditioner"),
    # recursion: the query update q^(1) = q^(0) + eta o M with M = W_Q P W_Q^T (P applied to the weight W_Q)
    "recursion-query": ("03_design_space", "cem_core.nn.precondition", "Preconditioner.forward",
                        "isinstance(args[1], torch.nn.Parameter)", "compare-recursion"),
    # the anchor: the sign of (lambda/2)|x - x0|^2, whose minimum is the fixed point
    "anchor": ("03_design_space", "cem_core.nn.energy", "anchor_energy", "True", "compare-anchor"),
    # the distance form's update, A sum_j a_j c_j - D x (negated for distance-form layers only)
    "distance-update": ("03_design_space", "cem_core.nn.attention", "InteractionTerm._interaction_gradient",
                        "args[0].config.diagonal_form == 'distance'", "compare-distance"),
    # the joint block's MLP term U^T (phi(U x) * G c), negated inside a CEMBlock only
    "joint-mlp-term": ("03_design_space", "cem_core.nn.mlp", "ElementwiseTerm._elementwise_gradient",
                       "type(args[0]).__name__ == 'CEMBlock'", "compare-joint"),
}


# -- exercises -------------------------------------------------------------------------------------


def exercise_cells(nb) -> dict:
    """{exercise name: (index of its exercise cell, index of its check cell)}."""
    found = {}
    for k, cell in enumerate(nb.cells):
        for name in (tag.removeprefix("exercise-") for tag in tags(cell) if tag.startswith("exercise-")):
            found[name] = (k, next(j for j, c in enumerate(nb.cells) if f"check-{name}" in tags(c)))
    return found


def test_every_exercise_starts_unsolved_and_has_a_solution():
    names = {}
    for name in NAMES:
        nb = jupytext.read(NOTEBOOKS / f"{name}.py")
        for exercise, (at, check) in exercise_cells(nb).items():
            assert re.match(r"answer = None\b", nb.cells[at].source), f"{exercise} starts solved"
            assert check == at + 1 and "check_answer(" in nb.cells[check].source
            names[exercise] = name
    assert len(names) >= len(NAMES)
    assert names == {exercise: e["notebook"] for exercise, e in EXERCISES.items()}


REJECTED = """\
try:
    check(answer)
except Exception as error:
    print("wrong answer rejected:", type(error).__name__)
"""


@pytest.mark.parametrize("exercise", list(EXERCISES))
def test_the_solution_passes_the_check_and_a_wrong_answer_fails_it(exercise, student_env):
    """The notebook up to the exercise's check, with the solution put in place of `answer = None`, then
    the wrong answer of solutions.py checked the same way, in the students' environment (no test-only
    package importable: a check must not need scipy, say, to pass a right answer)."""
    entry = EXERCISES[exercise]
    nb = jupytext.read(NOTEBOOKS / f"{entry['notebook']}.py")
    at, check = exercise_cells(nb)[exercise]
    nb.cells[at] = nbformat.v4.new_code_cell(entry["solution"])
    nb.cells = nb.cells[:check + 1] + [nbformat.v4.new_code_cell(entry["wrong"]), nbformat.v4.new_code_cell(REJECTED)]
    execute(nb, env=student_env)
    assert "Correct." in str(nb.cells[check].outputs)
    assert "wrong answer rejected: AssertionError" in nb.cells[-1].outputs[0].text    # the check's own assert


# -- wrong signs ------------------------------------------------------------------------------------


def assert_only_cell_fails(name: str, module: str, attribute: str, cell: str, when: str = "True") -> None:
    nb = jupytext.read(NOTEBOOKS / f"{name}.py")
    nb.cells.insert(0, nbformat.v4.new_code_cell(NEGATE.format(module=module, attribute=attribute, when=when)))
    with pytest.raises(CellExecutionError) as err:
        execute(nb)
    assert err.value.ename == "AssertionError"
    failed = [c for c in nb.cells if c.cell_type == "code" and any(o.output_type == "error" for o in c.outputs)]
    assert [[t for t in tags(c) if t.startswith("compare-")] for c in failed] == [[cell]]   # the failing cell alone


@pytest.mark.parametrize("name,module,attribute,cell", SIGN_FLIPS, ids=[f"{n[:2]}-{a}" for n, _, a, _ in SIGN_FLIPS])
def test_wrong_sign_in_cem_core_fails_the_comparison(name, module, attribute, cell):
    assert_only_cell_fails(name, module, attribute, cell)


@pytest.mark.parametrize("flip", list(DERIVATION_SIGN_FLIPS))
def test_wrong_sign_fails_the_derivation_check(flip):
    """Each derivation's closing comparison with cem_core (RoPE, the MLP's curvature, D+LR, the
    preconditioned step, the paper's preconditioner, recursion, the anchor, the distance form, the joint
    block) catches a wrong sign."""
    name, module, attribute, when, cell = DERIVATION_SIGN_FLIPS[flip]
    assert_only_cell_fails(name, module, attribute, cell, when)


@pytest.mark.parametrize("n_runs", [0, 2])
def test_gp_notebook_works_with_partial_results(tmp_path, n_runs):
    """The sweep may be absent or incomplete: the notebook runs with whatever records exist (here none,
    or two tiny runs), injected papermill-style as a cell after the parameters cell."""
    gp_sweep.run_gp_sweep(tmp_path, tiny_gp_specs()[:n_runs])
    nb = jupytext.read(NOTEBOOKS / "04_gp_recursion.py")
    at = next(k for k, c in enumerate(nb.cells) if "parameters" in tags(c))
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(f"results_path = {str(tmp_path / 'results.json')!r}\nsteps = 3"))
    execute(nb)
    loaded = next(c for c in nb.cells if "runs loaded" in c.source)
    assert f"{n_runs} runs loaded" in loaded.outputs[0].text


@pytest.mark.parametrize("n_runs", [0, 20])
def test_evidence_notebook_works_with_partial_results(tmp_path, n_runs):
    """05 reads whatever results exist and says what is missing: no results file at all, or the first n_runs
    records of the committed GP study (a study still running) with no GP sweep and no LM sweep; the
    paths are injected papermill-style as a cell after the parameters cell."""
    study_path = tmp_path / "gp-study" / "results.json"
    if n_runs:
        committed = json.loads((NOTEBOOKS.parent / "results" / "gp-study" / "results.json").read_text())
        study_path.parent.mkdir()
        study_path.write_text(json.dumps(committed[:n_runs]))
    nb = jupytext.read(NOTEBOOKS / "05_what_the_evidence_says.py")
    at = next(k for k, c in enumerate(nb.cells) if "parameters" in tags(c))
    missing = str(tmp_path / "missing" / "results.json")
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(
        f"gp_sweep_path = {missing!r}\ngp_study_path = {str(study_path)!r}\nlm_sweep_path = {missing!r}\n"
        f"lm_own_path = {missing!r}\nlm_ladder_path = {missing!r}\nlm_budget_ladder_path = {missing!r}\n"
        f"lm_tie_ladder_path = {missing!r}\ngp_test_time_path = {missing!r}\nlm_test_time_path = {missing!r}"))
    execute(nb)
    outputs = [str(c.outputs) for c in nb.cells if c.cell_type == "code"]
    assert any(f"0 GP sweep runs, {n_runs} study runs, 0 LM runs loaded" in text for text in outputs)
    assert any("skipped: attn T=2 vs attn T=1 has 0 seeds" in text for text in outputs)
    assert any("Language models**: no runs yet" in text for text in outputs)
    assert any("own-rate sweep's results are not there" in text for text in outputs)
    assert any("No results of the width ladder at the paper's budget yet" in text for text in outputs)
    assert any("No results of the quarter-budget width ladder yet" in text for text in outputs)
    assert any("No results of the tie ladder yet" in text for text in outputs)
    assert any("No results of the GP test-time study yet" in text for text in outputs)
    assert any("not answered yet" in text for text in outputs)


def test_execute_writes_the_committed_outputs_only_when_asked(tmp_path):
    """`notebooks/execute.py --help` says how to use it; without --write it runs a notebook and says whether the
    committed .ipynb is current (exit 1 and no write when stale); --write writes it."""
    import shutil

    helped = subprocess.run([sys.executable, str(NOTEBOOKS / "execute.py"), "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "--write" in helped.stdout and "usage: execute.py" in helped.stdout
    copy = tmp_path / "repo"
    shutil.copytree(NOTEBOOKS, copy / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    shutil.copytree(ROOT / "results", copy / "results", ignore=shutil.ignore_patterns("runs"))
    shutil.copytree(ROOT / "cem_core", copy / "cem_core")
    target = copy / "notebooks" / "02_gated_mlp_from_energy.ipynb"
    script = [sys.executable, str(copy / "notebooks" / "execute.py")]
    current = subprocess.run([*script, "02_gated_mlp_from_energy"], capture_output=True, text=True, timeout=600)
    assert current.returncode == 0 and "committed outputs current" in current.stdout, current.stderr
    stale = target.read_text().replace("largest difference", "largest gap")   # an output edited: now stale
    target.write_text(stale)
    checked = subprocess.run([*script, "02_gated_mlp_from_energy"], capture_output=True, text=True, timeout=600)
    assert checked.returncode == 1 and "stale: 02_gated_mlp_from_energy" in checked.stderr
    assert target.read_text() == stale                                   # not written without --write
    written = subprocess.run([*script, "--write", "02_gated_mlp_from_energy"], capture_output=True, text=True,
                             timeout=600)
    assert written.returncode == 0 and "written" in written.stdout and target.read_text() != stale


@pytest.mark.parametrize("name", NAMES)
def test_no_committed_output_holds_a_path_of_the_machine_that_ran_it(name):
    """The set-up cell once returned its folder, so each notebook's first output read PosixPath('/home/.../notebooks'):
    a fresh clone elsewhere then differed from the committed outputs."""
    outputs = json.dumps([c.get("outputs", []) for c in nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4).cells
                          if c.cell_type == "code"])
    assert "PosixPath(" not in outputs and str(ROOT) not in outputs
