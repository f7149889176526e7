import ast
import json
import os
import re
import signal
import socket
from pathlib import Path

import pytest
import torch

from cem_core.ui import pages

ROOT = Path(__file__).resolve().parents[1]               # the repository
COMMITTED_SWEEP = ROOT / "results" / "gp-default"          # the committed GP sweep
NOT_RUN = "DID NOT RUN"


def pytest_configure(config):
    """The tests' own shard cache (cem_core.experiments.lm.shard_cache keeps shards' checksums between runs, by
    default under ~/.cache): never the user's, and inherited by every process a test starts."""
    import tempfile

    os.environ["CEM_LAB_CACHE_DIR"] = tempfile.mkdtemp(prefix="cem-lab-test-cache-")


QUICK_LOOP = "not slow"                                     # the mark expression of the quick loop


def wholly_slow(path: Path) -> bool:
    """Whether a test module marks every test slow (`pytestmark = pytest.mark.slow`, alone or in a list), read
    from its source without importing it."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
            marks = node.value.elts if isinstance(node.value, ast.List) else [node.value]
            return any(ast.unparse(m) == "pytest.mark.slow" for m in marks)
    return False


def pytest_ignore_collect(collection_path, config):
    """The quick loop does not import a module whose tests are all slow: their imports (transformers, nbconvert,
    Streamlit's AppTest, Playwright) would cost it seconds for tests it deselects anyway."""
    if config.getoption("markexpr", "").strip() == QUICK_LOOP and collection_path.suffix == ".py" \
            and collection_path.name.startswith("test_"):
        return wholly_slow(collection_path) or None
    return None


def covering(grid: list[tuple]) -> list:
    """A parameter grid for `pytest.mark.parametrize` whose quick loop runs a few rows that between them take every
    value of every column (greedily: each next row is the one with the most values not yet taken, the earliest on a
    tie); the other rows, in their places, are marked slow."""
    missing = {cell for row in grid for cell in enumerate(row)}
    quick: set[int] = set()
    while missing:
        best = max(range(len(grid)), key=lambda i: (len(missing & set(enumerate(grid[i]))), -i))
        quick.add(best)
        missing -= set(enumerate(grid[best]))
    return [pytest.param(*row, marks=() if i in quick else pytest.mark.slow) for i, row in enumerate(grid)]


def require_system_package(found: bool, what: str, package: str, module_level: bool = False) -> None:
    """A test that needs a system package: skipped loudly without it (see the terminal summary),
    and a failure in CI (CEM_LAB_CI=1, set by .ci/run, which installs the package)."""
    if found:
        return
    if os.environ.get("CEM_LAB_CI"):
        pytest.fail(f"CI needs Debian's {package} for {what} (.ci/run installs it)", pytrace=False)
    pytest.skip(f"{what.upper()} {NOT_RUN}: no {package} found (apt-get install {package})",
                allow_module_level=module_level)


@pytest.fixture
def float64():
    """Run a test in float64 (the exactness tolerance 1e-9 needs it), restoring the default after."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def randomize_(module: torch.nn.Module, seed: int = 0, scale: float = 0.3) -> torch.nn.Module:
    """Give every diagonal, preconditioner and norm parameter a non-trivial random value, so a
    test cannot pass because some term starts at zero or one."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("diag") or ".preconditioner." in name or name.startswith("preconditioner."):
                p.copy_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))
            elif name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return module


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (for servers the tests start)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pytest_terminal_summary(terminalreporter):
    """Make a test skipped for a missing system package impossible to miss."""
    reasons = sorted({str(r.longrepr[-1]) for r in terminalreporter.stats.get("skipped", [])
                      if isinstance(r.longrepr, tuple) and NOT_RUN in str(r.longrepr[-1])})
    if reasons:
        bar = "!" * 78
        terminalreporter.write_line(bar, red=True, bold=True)
        for reason in reasons:
            terminalreporter.write_line(f"WARNING: {reason.removeprefix('Skipped: ')}", red=True, bold=True)
        terminalreporter.write_line("Install the packages or run .ci/run.", red=True, bold=True)
        terminalreporter.write_line(bar, red=True, bold=True)


def shard_corpus(folder: Path, n_docs: int = 300, name: str = "shard.jsonl"):
    """A SlimPajama-format shard of simple, learnable text, as a DataConfig."""
    from cem_core.experiments.lm.data_config import DataConfig

    lines = [json.dumps({"text": f"the cat number {i % 7} sat on mat {i % 5}. " * 3,
                         "meta": {"redpajama_set_name": "RedPajamaC4"}}) for i in range(n_docs)]
    path = folder / name
    path.write_text("\n".join(lines) + "\n")
    return DataConfig(source="path", path=str(path), validation_fraction=0.1)


@pytest.fixture
def one_thread():
    """One torch thread for the test (the tests' own timings and determinism), restored after."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def tiny_gp_spec(steps: int, seed: int = 0, n_points: int = 8, cem=None):
    """A GP sweep run of about 2 s per 1,000 steps on one core (10**7 steps: it never finishes within a
    test): Llama attention, or CEM attention with the switches `cem`."""
    from cem_core.experiments.gp import sweep as gp_sweep
    from cem_core.experiments.gp.model import GPModelConfig
    from cem_core.experiments.gp.task import GPTaskConfig
    from cem_core.experiments.gp.train import GPTrainConfig

    model = GPModelConfig(shape=dict(d_model=8, n_layers=1, n_heads=2, d_ff=16),
                          attention="llama" if cem is None else "cem",
                          **({} if cem is None else {"cem": cem}))
    return gp_sweep.RunSpec(task=GPTaskConfig(n_points=n_points), model=model,
                            train=GPTrainConfig(steps=steps, eval_size=16, batch_size=8, seed=seed), group="depth1")


def tiny_gp_specs() -> list:
    """Two quick runs of a sweep: Llama attention and CEM attention at T = 2."""
    from cem_core import CEMOptions

    return [tiny_gp_spec(3), tiny_gp_spec(3, cem=CEMOptions(T=2))]


def tiny_study_specs(groups, seeds=(0, 1, 2)) -> list:
    """The factor study's conditions `groups` shrunk to 3 training steps of width 8 (a few seconds in all)."""
    from dataclasses import replace

    from cem_core.experiments.gp import study as gp_study

    conditions = gp_study.conditions()
    return [replace(s, model=s.model.with_shape(d_model=8, d_ff=16, n_heads=2),
                    train=replace(s.train, steps=3, batch_size=4, eval_size=16))
            for group in groups for s in conditions[group] if s.train.seed in seeds]


def interruptible() -> None:
    """preexec_fn for a child that a test interrupts with SIGINT: a shell starts background jobs
    (and so, maybe, this test run) with SIGINT ignored, and a Python started that way ignores
    Ctrl-C too. Restore the default so the child's Ctrl-C handling is what gets tested."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def board(tmp_path, monkeypatch):
    """The app's job board on a data folder with one shard folder (wiki) and an empty one, and a jobs
    folder, all in tmp_path; the app's pages see the same folders through the environment."""
    from cem_core.ui.jobs import JobBoard

    data = tmp_path / "data"
    (data / "wiki").mkdir(parents=True)
    (data / "wiki" / "a.jsonl").write_text(json.dumps({"text": "hello", "meta": {}}) + "\n")
    (data / "empty").mkdir()
    monkeypatch.setenv("CEM_LAB_DATA_DIR", str(data))
    monkeypatch.setenv("CEM_LAB_JOBS_DIR", str(tmp_path / "jobs"))
    jobs = JobBoard(jobs_dir=tmp_path / "jobs", data_dir=data, workdir=ROOT)
    yield jobs
    jobs.stop()


def child_env(**extra: str) -> dict:
    """The environment of a child Python a test starts: this checkout importable from any working
    folder and script location (an installed cem_core is not assumed), one torch thread."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", **extra}


APP_PAGES = {p.key: p.file for p in pages.APP_PAGES}


def shown(markdown: str) -> str:
    """The text Streamlit shows for Markdown written by app_pages.common.plain: its backslash escapes read and
    its word joiners (which keep addresses from turning into links) dropped."""
    return re.sub(r"\\(.)", r"\1", markdown).replace("\u2060", "")


def run_page(page: str, query: dict | None = None, timeout: float = 120):
    """One of the app's pages run headless (AppTest), opened the way a link opens it."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=timeout)
    for key, value in (query or {}).items():
        at.query_params[key] = value
    at.run()
    if page != "energy":
        at.switch_page(APP_PAGES[page]).run()
    return at


def page_tables(page: str):
    """An app page run headless without an exception, and its tables as lists of row dicts: the interactive
    ones (st.dataframe), then the static ones (st.table, the claims with their verdicts)."""
    at = run_page(page)
    assert not at.exception
    return at, [frame.value.to_dict("records") for frame in (*at.dataframe, *at.table)]


def row_values(rows: list[dict]) -> list[list[str]]:
    """A table's cells row by row, whatever the order and labels of its columns (the app shows the verdict
    first)."""
    return [sorted(map(str, row.values())) for row in rows]


@pytest.fixture
def hf_fp64_norm(monkeypatch):
    """Make transformers' LlamaRMSNorm float64-faithful for one test (restored afterwards): its own
    forward rounds through float32 (see tests/llama_reference.py)."""
    from llama_reference import rmsnorm_forward_fp64
    from transformers.models.llama import modeling_llama

    monkeypatch.setattr(modeling_llama.LlamaRMSNorm, "forward", rmsnorm_forward_fp64)
