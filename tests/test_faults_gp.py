"""Fault injection on the GP sweep: each test reproduces an attack and asserts the outcome."""
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import COMMITTED_SWEEP, ROOT, child_env, interruptible
from conftest import tiny_gp_spec as tiny_spec

from cem_core.__main__ import main
from cem_core.experiments.gp import sweep as gp_sweep
from cem_core.experiments.integrity import CHECKSUMS, FolderLock, seal

SHORT, LONG, LONG2 = tiny_spec(3), tiny_spec(10**7), tiny_spec(10**7, seed=1)

# `gp sweep --preset quick` with the preset replaced by the pickled runs; every run appends "pid hash" to
# STARTED when it starts (in the parent with --jobs 1, in a worker otherwise: spawned workers run this
# file's top level too, as __mp_main__)
SCRIPT = """
import os, pickle, sys
from cem_core.experiments.gp import sweep as gp_sweep

real_run_spec = gp_sweep.run_spec

def run_spec(spec, **kw):
    with open({started!r}, "a") as f:
        f.write(f"{{os.getpid()}} {{spec.hash}}\\n")
    return real_run_spec(spec, **kw)

gp_sweep.run_spec = run_spec
gp_sweep.gp_preset_runs = lambda preset: pickle.loads(open({specs!r}, "rb").read())

if __name__ == "__main__":
    from cem_core.__main__ import main
    sys.exit(main(["gp", "sweep", "--preset", "quick", "--out", {out!r}, *sys.argv[1:]]))
"""


def start_sweep(tmp_path: Path, specs: list, *args: str) -> subprocess.Popen:
    """A real `gp sweep` in its own session (so its process group is ours to signal) into tmp_path/sweep."""
    (tmp_path / "specs.pkl").write_bytes(pickle.dumps(specs))
    script = tmp_path / "sweep.py"
    script.write_text(SCRIPT.format(started=str(tmp_path / "started"), specs=str(tmp_path / "specs.pkl"),
                                    out=str(tmp_path / "sweep")))
    return subprocess.Popen([sys.executable, str(script), *args], cwd=ROOT, env=child_env(), start_new_session=True,
                            preexec_fn=interruptible,
                            stdout=open(tmp_path / "stdout", "w"), stderr=open(tmp_path / "stderr", "w"))


def started(tmp_path: Path) -> list[str]:
    """Hashes of the runs that have started."""
    path = tmp_path / "started"
    return [line.split()[1] for line in path.read_text().splitlines()] if path.exists() else []


def saved_hashes(folder: Path) -> list[str]:
    path = folder / "results.json"
    return [r["hash"] for r in json.loads(path.read_text())] if path.exists() else []


def wait_for(condition, proc: subprocess.Popen, tmp_path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"the sweep exited early:\n{(tmp_path / 'stderr').read_text()}"
        assert time.monotonic() < deadline, f"timed out:\n{(tmp_path / 'stderr').read_text()}"
        time.sleep(0.1)


def alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    """The processes still running (a zombie has ended: it only waits to be reaped)."""
    def running(p):
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False
    return [p for p in processes if running(p)]


def wait_until_gone(processes: list[psutil.Process], timeout: float) -> tuple[list, float]:
    start = time.monotonic()
    while alive(processes) and time.monotonic() - start < timeout:
        time.sleep(0.05)
    return alive(processes), time.monotonic() - start


def kill_and_see_all_gone(proc: subprocess.Popen, family: list[psutil.Process], when: str) -> None:
    """SIGKILL the sweep: every process it started ends within 10 s (docs/reliability.md's promise)."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    left, seconds = wait_until_gone(family, timeout=10)
    print(f"workers gone {seconds:.2f} s after the SIGKILL{when}")
    assert not left, f"still running 10 s after the sweep was killed: {[p.cmdline() for p in left]}"


def kill_all(proc: subprocess.Popen, processes: list[psutil.Process]) -> None:
    """Clean up after a failure: the sweep we started and the processes it started, by pid."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for p in alive(processes):
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


@pytest.mark.slow
def test_sigkilled_sweep_leaves_no_workers_behind(tmp_path):
    """Attack: SIGKILL `gp sweep --jobs 2` while both workers train. Old: the workers ran on
    (their runs thrown away), then blocked forever. Now every process the sweep started ends."""
    proc = start_sweep(tmp_path, [LONG, LONG2], "--jobs", "2")
    family = []
    try:
        wait_for(lambda: len(started(tmp_path)) == 2, proc, tmp_path)
        family = psutil.Process(proc.pid).children(recursive=True)
        commands = [" ".join(p.cmdline()) for p in family]
        assert len(family) == 3 and sum("resource_tracker" in c for c in commands) == 1, commands  # + 2 workers
        kill_and_see_all_gone(proc, family, "")
    finally:
        kill_all(proc, family)


def test_a_worker_watches_its_parent_before_it_imports_torch():
    """A spawned worker's first code is its watcher (pool._start_worker), imported with cem_core.experiments.pool.
    Old: importing it imported the whole package and torch first (3 to 14 s under load), so a sweep killed while
    its workers started left them running that long. Now the package's names are imported on first use."""
    done = subprocess.run([sys.executable, "-c", "import sys, cem_core.experiments.pool; "
                           "print(sorted({'torch', 'numpy'} & set(sys.modules)))"],
                          env=child_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


@pytest.mark.slow
def test_a_sweep_killed_while_its_workers_start_leaves_none_behind(tmp_path):
    """Attack: SIGKILL the real `python -m cem_core gp sweep --jobs 2` the moment its two workers exist, before they
    have imported anything. Every process it started ends within 10 s."""
    proc = subprocess.Popen([sys.executable, "-m", "cem_core", "gp", "sweep", "--preset", "quick", "--jobs", "2",
                             "--out", str(tmp_path / "sweep")], cwd=ROOT, env=child_env(), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "stderr", "w"))
    family = []
    try:
        def workers():
            return [p for p in psutil.Process(proc.pid).children() if "resource_tracker" not in " ".join(p.cmdline())]
        wait_for(lambda: len(workers()) == 2, proc, tmp_path)
        family = psutil.Process(proc.pid).children(recursive=True)
        kill_and_see_all_gone(proc, family, " during their start-up")
    finally:
        kill_all(proc, family)


@pytest.mark.slow
@pytest.mark.parametrize("jobs,to", [("1", "group"), ("2", "group"), ("2", "parent")])
def test_ctrl_c_stops_at_once_and_keeps_finished_runs(tmp_path, jobs, to, monkeypatch, capsys):
    """Attack: Ctrl-C while a long run trains: SIGINT to the whole process group (as a terminal sends
    it), or to the sweep's process alone (`kill -INT`). Old: tracebacks from the parent and each
    worker, and with the parent alone signalled, a wait for the running runs to finish. Now: exit 130
    within 5 s, one line saying what was kept, no traceback, no process left; the same command resumes."""
    proc = start_sweep(tmp_path, [SHORT, LONG], "--jobs", jobs)
    out = tmp_path / "sweep"
    family = []
    try:
        wait_for(lambda: SHORT.hash in saved_hashes(out) and LONG.hash in started(tmp_path), proc, tmp_path)
        family = psutil.Process(proc.pid).children(recursive=True)
        start = time.monotonic()
        (os.killpg if to == "group" else os.kill)(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pytest.fail("Ctrl-C did not stop the sweep within 5 s")
        print(f"--jobs {jobs}, SIGINT to the {to}: exited {time.monotonic() - start:.2f} s after Ctrl-C")
        err = (tmp_path / "stderr").read_text()
        assert proc.returncode == 130, err
        assert "Traceback" not in err
        assert f"interrupted: 1 of 2 runs finished and kept in {out}; run the same command again to resume" in err
        assert saved_hashes(out) == [SHORT.hash]
        assert not wait_until_gone(family, timeout=5)[0]
    finally:
        kill_all(proc, family)
    # the same command again (here in this process, with the long run faked) trains only the unfinished run
    calls = []
    kept = json.loads((out / "results.json").read_text())[0]
    monkeypatch.setattr(gp_sweep, "gp_preset_runs", lambda preset: [SHORT, LONG])
    monkeypatch.setattr(gp_sweep, "run_spec", lambda spec, **kw: calls.append(spec.hash) or
                        seal(dict(kept, hash=spec.hash, config=spec.config(), steps=spec.train.steps)))
    assert main(["gp", "sweep", "--preset", "quick", "--out", str(out), "--jobs", "1"]) == 0, capsys.readouterr().err
    assert calls == [LONG.hash] and saved_hashes(out) == [SHORT.hash, LONG.hash]


@pytest.fixture
def presets(monkeypatch):
    """Tiny presets: `quick` (3 steps), `default` (4), `gpu` (5), `plateau` (6), `study` (7), `rates` (8) and
    `test-time` (9), one per registered preset; `run_spec` calls are counted."""
    runs = {"quick": [SHORT], "default": [tiny_spec(4)], "gpu": [tiny_spec(5)], "plateau": [tiny_spec(6)],
            "study": [tiny_spec(7)], "rates": [tiny_spec(8)], "test-time": [tiny_spec(9)]}
    assert set(runs) == set(gp_sweep.GP_PRESETS), "a preset was registered: give it a tiny stand-in here"
    monkeypatch.setattr(gp_sweep, "gp_preset_runs", lambda preset: runs[preset])
    calls = []
    real = gp_sweep.run_spec
    monkeypatch.setattr(gp_sweep, "run_spec", lambda spec, **kw: calls.append(spec.hash) or real(spec, **kw))
    return calls


def sweep(out: Path, preset: str) -> int:
    return main(["gp", "sweep", "--preset", preset, "--out", str(out), "--jobs", "1"])


def test_another_preset_is_refused(tmp_path, presets, capsys):
    """Attack: `--preset default` into a `quick` sweep's folder. Old: mixed silently (two identical
    rows in the report). Now refused, naming the folder, both presets and how to start afresh."""
    assert sweep(tmp_path, "quick") == 0
    capsys.readouterr()
    assert sweep(tmp_path, "default") == 2
    err = capsys.readouterr().err
    assert str(tmp_path) in err and "preset: 'quick' there, 'default' now" in err and "--out" in err
    assert saved_hashes(tmp_path) == [SHORT.hash] and presets == [SHORT.hash]


def test_another_task_is_refused(tmp_path):
    """The library call too: a folder holds one task list; a run on another task is refused."""
    gp_sweep.run_gp_sweep(tmp_path, [SHORT])
    with pytest.raises(ValueError, match=r"tasks\.0\.n_points: 8 there, 16 now"):
        gp_sweep.run_gp_sweep(tmp_path, [tiny_spec(3, n_points=16)])


def test_legacy_folder_is_adopted_only_by_its_own_preset(tmp_path, presets, capsys):
    """A folder made before sweep.json existed (records, no manifest): a `quick` one is refused by
    `default` (naming the preset its runs belong to), and adopted by `quick` without retraining."""
    legacy = tmp_path / "legacy"
    assert sweep(legacy, "quick") == 0
    (legacy / "sweep.json").unlink(missing_ok=True)
    assert sweep(legacy, "default") == 2
    err = capsys.readouterr().err
    assert str(legacy) in err and "runs of preset 'quick'" in err and "not in preset 'default'" in err
    assert sweep(legacy, "quick") == 0
    assert presets == [SHORT.hash]                                       # adopted: nothing retrained
    assert json.loads((legacy / "sweep.json").read_text())["preset"] == "quick"


@pytest.fixture(scope="module")
def record() -> dict:
    return json.loads(json.dumps(gp_sweep.run_spec(SHORT)))                # sealed by the run


@pytest.mark.parametrize("case,expected", [
    ("dict", "must hold a list of run records"),
    ("list of numbers", r"record 0: 1 is not an object"),
    ("missing rmse_ratio", r"record 0: the field 'rmse_ratio' is missing"),
    ("text rmse_ratio", r"record 0: rmse_ratio='0.9' is invalid: must be a number"),
    ("config edited", r"record 0: hash='[0-9a-f]+' is invalid: it is not the hash of the record's config"),
    ("duplicate", r"run [0-9a-f]{16} appears twice \(records 0 and 1\)"),
    ("T relabelled", r"record 0: T=8 is not what the run recorded \(its checksum differs\): the record was edited"),
    ("rmse edited", r"record 0: rmse=0.001 is not what the run recorded"),
    ("not sealed", r"record 0: it has no checksums field"),
    ("field added", r"record 0: the field 'note' was added after the run wrote the record"),
    ("rmse NaN", r"record 0: rmse=nan is invalid: not finite in a run that did not diverge"),
    ("steps 0", r"record 0: steps=0 is invalid: a run trains at least one step"),
    ("rmse negative", r"record 0: rmse=-0.5 is invalid: an error is at least 0"),
])
def test_wrong_shaped_results_are_refused(tmp_path, record, presets, capsys, case, expected):
    """Attack: valid JSON of the wrong shape, or one run twice, in results.json. Old: KeyError or
    TypeError tracebacks from `gp sweep` and `gp report`, and a duplicate counted as another seed; a record's
    T edited by hand relabelled its row, a metric edited changed the tables. Now `GP_SWEEP.load` refuses it
    naming the file, the record and the field, and both commands print the error (exit 2)."""
    edited = dict(record, config=dict(record["config"], train=dict(record["config"]["train"], steps=5)))
    content = {"dict": {"runs": [record]}, "list of numbers": [1, 2],
               "missing rmse_ratio": [{k: v for k, v in record.items() if k != "rmse_ratio"}],
               "text rmse_ratio": [dict(record, rmse_ratio="0.9")], "config edited": [edited],
               "duplicate": [record, record], "T relabelled": [dict(record, T=8)],
               "rmse edited": [dict(record, rmse=0.001)],
               "not sealed": [{k: v for k, v in record.items() if k != CHECKSUMS}],
               "field added": [dict(record, note="better")], "rmse NaN": [dict(record, rmse=float("nan"))],
               "steps 0": [dict(record, steps=0)], "rmse negative": [dict(record, rmse=-0.5)]}[case]
    path = tmp_path / "results.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ValueError, match=expected) as err:
        gp_sweep.GP_SWEEP.load(path)
    assert str(path) in str(err.value)
    for command in (["gp", "report", str(path)], ["gp", "sweep", "--preset", "quick", "--out", str(tmp_path)]):
        assert main(command) == 2
        out = capsys.readouterr()
        assert out.err.startswith("error: ") and str(path) in out.err and "Traceback" not in out.err + out.out
    assert presets == []


def test_second_sweep_into_a_busy_folder_is_refused_at_once(tmp_path, presets, capsys):
    """Attack: two `gp sweep` into one folder. Old: both ran, each overwriting the other's results.
    Now the second is refused at once, naming the holder."""
    with FolderLock(tmp_path, "GP sweep"):
        start = time.monotonic()
        assert sweep(tmp_path, "quick") == 2
        assert time.monotonic() - start < 2
    err = capsys.readouterr().err
    assert f"pid {os.getpid()}" in err and "in use" in err
    assert presets == [] and not (tmp_path / "results.json").exists()


def test_committed_sweep_folder_is_whole(tmp_path, monkeypatch):
    """results/gp-default holds the default preset's manifest, and a default sweep into (a copy of) it
    adopts it without training anything: every committed record passes the checks."""
    manifest = json.loads((COMMITTED_SWEEP / "sweep.json").read_text())
    assert manifest == gp_sweep.sweep_identity("default", gp_sweep.gp_preset_runs("default"))
    copy = tmp_path / "gp-default"
    shutil.copytree(COMMITTED_SWEEP, copy)
    monkeypatch.setattr(gp_sweep, "run_spec", lambda spec, **kw: pytest.fail(f"retrained {spec.hash}"))
    records = gp_sweep.run_gp_sweep(copy, gp_sweep.gp_preset_runs("default"), preset="default")
    assert [r["hash"] for r in records] == [s.hash for s in gp_sweep.gp_preset_runs("default")]


def test_gp_report_takes_a_sweep_folder_and_refuses_other_folders_clearly(tmp_path, capsys):
    """Attack: `gp report FOLDER`. Old: IsADirectoryError traceback. Now a sweep folder is read and
    any other folder is a one-line error."""
    assert main(["gp", "report", str(COMMITTED_SWEEP)]) == 0
    assert "RMSE / GP optimum" in capsys.readouterr().out
    (tmp_path / "results.json").mkdir()
    assert main(["gp", "report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "is a folder, not a results or manifest file" in err


def test_a_run_too_large_for_the_memory_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    """`gp train --n-points 4096` (allowed) used to train and then try to allocate 137 GB at its evaluation: the
    held-out set's kernel matrices alone are 1,024 x 4,096 x 4,096 floats, three times over. The machine is
    given 16 GiB available, whatever runs the test."""
    import time
    from types import SimpleNamespace

    import psutil

    from cem_core.__main__ import main

    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(available=16 * 2 ** 30))
    start = time.perf_counter()
    assert main(["gp", "train", "--n-points", "4096", "--steps", "2", "--out", str(tmp_path / "rec.json")]) == 2
    err = capsys.readouterr().err
    assert "n_points=4096 is invalid: needs about 384.0 GiB" in err and "16.0 GiB is available" in err, err
    assert time.perf_counter() - start < 20 and not (tmp_path / "rec.json").exists()
