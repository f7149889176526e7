"""Attacks on the files around a run: links planted where the project writes, and files of the user's
that look like ours (docs/design.md#6-run-integrity). Real files and folders; after
every attack, the files the project did not write hold the same bytes as before."""
import os
from pathlib import Path

import pytest

from cem_core.__main__ import main
from cem_core.experiments.gp import sweep as gp_sweep
from cem_core.experiments.integrity import LOCK_NAME, FolderLock, temporary_files
from cem_core.experiments.lm.run_folder import claim
from cem_core.experiments.records import atomic_write, atomic_write_text


def keep(path: Path, text: str = "keep\n") -> Path:
    path.write_text(text)
    return path


def test_a_lock_that_is_a_link_is_refused_and_its_target_kept(tmp_path):
    """`ln -s $PWD/v X/.lock`: the lock is never opened through the link (it used to truncate v to 0 bytes)."""
    target, folder = keep(tmp_path / "v"), tmp_path / "X"
    folder.mkdir()
    (folder / LOCK_NAME).symlink_to(target)
    with pytest.raises(ValueError, match="is a symbolic link"):
        FolderLock(folder, "run").acquire()
    with pytest.raises(ValueError, match="is a symbolic link"):        # a sweep into the folder, the same
        gp_sweep.run_gp_sweep(folder, [])
    assert target.read_text() == "keep\n" and (folder / LOCK_NAME).is_symlink()


def test_a_lock_that_is_a_folder_is_refused_with_a_message(tmp_path):
    (tmp_path / LOCK_NAME).mkdir()
    with pytest.raises(ValueError, match="not a regular file"):
        FolderLock(tmp_path, "run").acquire()


@pytest.mark.slow
def test_a_planted_temporary_link_is_never_written_through(tmp_path, capsys):
    """`ln -s $PWD/v2 T/rec.json.tmp; gp train --out T/rec.json`: the record is written as a regular file
    of its own, the link and its target stay as they were (atomic_write used to write through the link
    and rename it into place)."""
    target, folder = keep(tmp_path / "v2"), tmp_path / "T"
    folder.mkdir()
    (folder / "rec.json.tmp").symlink_to(target)
    assert main(["gp", "train", "--steps", "2", "--out", str(folder / "rec.json")]) == 0
    record = folder / "rec.json"
    assert record.is_file() and not record.is_symlink() and '"hash"' in record.read_text()
    assert target.read_text() == "keep\n" and (folder / "rec.json.tmp").resolve() == target.resolve()
    assert temporary_files(folder) == []


def test_a_temporary_is_a_new_file_of_our_own_whatever_is_there(tmp_path):
    """Every atomic write makes a fresh, uniquely named temporary (O_EXCL) in the target's folder; names a
    user could have (NAME.tmp, .NAME.tmp) are never touched."""
    planted = [keep(tmp_path / "out.json.tmp"), keep(tmp_path / ".out.json.tmp")]
    seen = []
    atomic_write(tmp_path / "out.json", lambda tmp: (seen.append(tmp), tmp.write_text("{}")))
    assert seen[0].parent == tmp_path and seen[0] not in planted and not seen[0].exists()
    assert (tmp_path / "out.json").read_text() == "{}" and all(p.read_text() == "keep\n" for p in planted)


def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path):
    """A write that fails half-way (a full disk, an error in the writer) keeps the previous file whole and
    leaves nothing behind to fill the disk on every rerun."""
    path = keep(tmp_path / "checkpoint.pt", "old")

    def half(tmp: Path):
        tmp.write_text("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        atomic_write(path, half)
    assert path.read_text() == "old" and temporary_files(tmp_path) == [] and sorted(os.listdir(tmp_path)) == [
        "checkpoint.pt"]


@pytest.mark.parametrize("others", [["other.txt"], []], ids=["with other files", "only tmp files"])
def test_a_users_tmp_files_are_never_deleted(tmp_path, others):
    """`lm train --out` a folder of the user's holding *.tmp files: refused, and nothing in it deleted (every
    *.tmp used to be deleted before the check; a folder holding only *.tmp files was emptied and used)."""
    files = [keep(tmp_path / name) for name in ["notes.tmp", "draft.pt.tmp", *others]]
    with pytest.raises(ValueError, match="is not empty"):
        claim(tmp_path, {"variant": "llama"}, {})
    assert all(f.read_text() == "keep\n" for f in files) and not (tmp_path / "run.json").exists()


def test_a_run_folder_drops_only_its_own_leftover_temporaries(tmp_path):
    """An interrupted write of ours leaves a temporary; claiming the run's own folder again removes it, a
    user's *.tmp and a link named like ours stay."""
    identity = {"variant": "llama"}
    claim(tmp_path, identity, {})
    ours = tmp_path / ".checkpoint.pt.cem-tmp-abc123"
    keep(ours, "half a checkpoint")
    link = tmp_path / ".log.cem-tmp-zzz"
    link.symlink_to(keep(tmp_path.parent / f"{tmp_path.name}-elsewhere"))
    users = keep(tmp_path / "notes.tmp")
    claim(tmp_path, identity, {})
    assert not ours.exists() and users.read_text() == "keep\n" and link.is_symlink()


def test_another_run_in_the_folder_keeps_even_our_temporaries(tmp_path):
    """A refused claim (another identity) removes nothing: the folder is checked before anything in it changes."""
    claim(tmp_path, {"variant": "llama"}, {})
    ours = keep(tmp_path / ".checkpoint.pt.cem-tmp-abc123")
    with pytest.raises(ValueError, match="holds another run"):
        claim(tmp_path, {"variant": "cem-full"}, {})
    assert ours.exists()


def test_atomic_write_text_keeps_the_umask_permissions(tmp_path):
    """A record written through a private temporary still gets the usual permissions (not 0600)."""
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "r.json", "[]")
    finally:
        os.umask(old)
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o644


# -- output flags: checked before any work, never over a file the command did not make ----------------


def test_bench_json_onto_an_existing_file_is_refused_before_measuring(tmp_path, capsys):
    """`bench --json` onto the committed results (or any file) used to overwrite it after the run."""
    target = keep(tmp_path / "results.json", "[1, 2, 3]")
    assert main(["bench", "--json", str(target), "--repeats", "1"]) == 2
    out, err = capsys.readouterr()
    assert "the file exists" in err and "time B/A" not in out                  # refused before any measurement
    assert target.read_text() == "[1, 2, 3]"


def test_lm_compare_json_inside_a_run_folder_is_refused_before_training(tmp_path, capsys):
    """`lm compare --json` pointed inside its own run used to overwrite llama/checkpoints.json after training."""
    out = tmp_path / "compare"
    FolderLock(out, "comparison").acquire().release()                  # a comparison's folder, with its .lock
    FolderLock(out / "llama", "LM run").acquire().release()             # and its llama run, with its record
    claim(out / "llama", {"variant": "llama"}, {})
    checkpoints = keep(out / "llama" / "checkpoints.json", '[{"step": 5}]')
    before = sorted(os.listdir(out / "llama"))
    for json_path, why in ((checkpoints, "the file exists"), (out / "llama" / "new.json", "the folder of a run"),
                           (out / "notes.json", "the folder of a run")):
        assert main(["lm", "compare", "--preset", "cpu-tiny", "--out", str(out), "--json", str(json_path)]) == 2
        printed, err = capsys.readouterr()
        assert why in err and "perplexity" not in printed, err
    assert checkpoints.read_text() == '[{"step": 5}]' and sorted(os.listdir(out / "llama")) == before
    assert not (out / "notes.json").exists()


@pytest.mark.parametrize("where", ["a missing folder", "a file as folder"])
def test_an_output_in_no_folder_is_refused_before_the_work(tmp_path, capsys, where):
    parent = tmp_path / "nowhere" if where == "a missing folder" else keep(tmp_path / "file")
    assert main(["gp", "train", "--steps", "2", "--out", str(parent / "rec.json")]) == 2
    assert "not an existing folder" in capsys.readouterr().err


# -- the data itself is part of a run's identity ----------------------------------------------------------

LM_TINY = ["--variant", "llama", "--steps", "2", "--batch-size", "4", "--seq-len", "16"]   # cpu-tiny, cut short


def lm_train(capsys, data: str, out: Path) -> tuple[int, str]:
    code = main(["lm", "train", *LM_TINY, "--data", data, "--out", str(out)])
    return code, capsys.readouterr().err


@pytest.mark.slow
def test_a_resume_on_another_pythons_demo_corpus_is_refused(tmp_path, monkeypatch, capsys, one_thread):
    """Another Python build's standard library is another demo corpus: a resume used to go on silently on it,
    so one metrics.jsonl held two corpora. The demo text's sha256 is now recorded and compared."""
    from cem_core.experiments.lm import stdlib_corpus

    def stdlib(version: str) -> Path:                # a standard library of this build: its module files
        root = tmp_path / f"python-{version}"
        root.mkdir(exist_ok=True)
        for i in range(40):
            (root / f"mod{i}.py").write_text(f'"""Module {i} of Python {version}."""\n' + f"x_{i} = {i}\n" * 40)
        return root

    def run_on(version: str) -> tuple[int, str]:
        monkeypatch.setattr(stdlib_corpus, "stdlib_root", lambda: stdlib(version))
        stdlib_corpus.demo_corpus.cache_clear()
        return lm_train(capsys, "demo", tmp_path / "run")

    try:
        assert run_on("3.11.7")[0] == 0
        metrics = (tmp_path / "run" / "metrics.jsonl").read_bytes()
        code, err = run_on("3.11.2")
        assert code == 2 and "data_content.demo_sha256" in err and "another Python build" in err, err
        assert (tmp_path / "run" / "metrics.jsonl").read_bytes() == metrics
        assert run_on("3.11.7")[0] == 0                  # the same corpus again resumes
    finally:
        stdlib_corpus.demo_corpus.cache_clear()


@pytest.mark.slow
@pytest.mark.parametrize("change", ["rewritten", "added", "removed"])
def test_a_resume_on_changed_shards_is_refused_naming_the_shard(tmp_path, capsys, one_thread, change):
    """A local shard's size and sha256 are part of the run: a shard rewritten, added or removed since the run
    began used to be read silently on resume."""
    from conftest import shard_corpus

    folder = tmp_path / "shards"
    folder.mkdir()
    shard_corpus(folder, name="a.jsonl")
    shard_corpus(folder, name="b.jsonl", n_docs=200)
    assert lm_train(capsys, str(folder), tmp_path / "run")[0] == 0
    if change == "rewritten":
        with open(folder / "b.jsonl", "a") as f:
            f.write('{"text": "one more document"}\n')
    elif change == "added":
        shard_corpus(folder, name="c.jsonl", n_docs=20)
    else:
        (folder / "b.jsonl").unlink()
    code, err = lm_train(capsys, str(folder), tmp_path / "run")
    name = "c.jsonl" if change == "added" else "b.jsonl"
    assert code == 2 and f"data_content.shards['{name}']" in err, err
    assert {"rewritten": "has changed", "added": "a new shard", "removed": "the shard is gone"}[change] in err


def test_a_half_truncated_zst_is_refused_even_for_a_two_step_run(tmp_path, capsys, one_thread):
    """A short run reads only the first documents: a shard cut at half its bytes used to be accepted, its
    break never reached. Every shard is now read whole before training; run.json is not written."""
    import io
    import json

    import zstandard

    text = "".join(json.dumps({"text": f"document {i}: " + os.urandom(40).hex()}) + "\n" for i in range(3000))
    out = io.BytesIO()
    with zstandard.ZstdCompressor().stream_writer(out, closefd=False) as writer:
        writer.write(text.encode())
    shard = tmp_path / "shards" / "part.jsonl.zst"
    shard.parent.mkdir()
    shard.write_bytes(out.getvalue()[:len(out.getvalue()) // 2])
    code, err = lm_train(capsys, str(shard.parent), tmp_path / "run")
    assert code == 2 and f"{shard} is truncated or corrupt" in err and "checking the whole shard" in err, err
    assert not (tmp_path / "run" / "run.json").exists()


# -- command-line inputs that used to end in a traceback ---------------------------------------------------


@pytest.mark.parametrize("argv,message", [
    (["bench", "--batch", "0", "--repeats", "1"], "batch=0 is invalid: must be >= 1"),          # ZeroDivisionError
    (["gp", "sweep", "--preset", "quick", "--reuse", "/nonexistent"], "reuse='/nonexistent' is invalid"),   # ignored
    (["figures", "--out", "{file}"], "is invalid: it is a file"),                              # FileExistsError
    (["figures", "--out", "{loop}"], "is invalid: it is a file (or a link to no folder)"),     # FileExistsError
])
def test_bad_command_line_values_are_refused_before_any_work(tmp_path, capsys, argv, message):
    keep(tmp_path / "file")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    argv = [a.format(file=tmp_path / "file", loop=tmp_path / "loop") for a in argv]
    if argv[:2] == ["gp", "sweep"]:
        argv += ["--out", str(tmp_path / "sweep")]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert message in err and "Traceback" not in err and not (tmp_path / "sweep").exists(), err
    assert (tmp_path / "file").read_text() == "keep\n"


@pytest.mark.slow
@pytest.mark.parametrize("seq_len", [2, 3])
def test_a_short_context_trains_and_samples(tmp_path, capsys, one_thread, seq_len):
    """`--seq-len 1..3` used to train and checkpoint, then fail on the 4-byte sample prompt "The ", on every
    rerun. The prompt is cut to fit the context; 1 is refused before any work."""
    import json

    args = ["lm", "train", "--variant", "llama", "--steps", "2", "--batch-size", "4"]
    assert main([*args, "--seq-len", str(seq_len), "--out", str(tmp_path / "run")]) == 0
    sample = json.loads((tmp_path / "run" / "summary.json").read_text())["sample"]
    assert sample.startswith("The"[:seq_len - 1]) and len(sample) == seq_len
    capsys.readouterr()
    assert main([*args, "--seq-len", "1", "--out", str(tmp_path / "one")]) == 2
    assert "seq_len=1 is invalid: must be >= 2" in capsys.readouterr().err and not (tmp_path / "one").exists()


def test_a_file_the_system_refuses_is_a_message_not_a_traceback(tmp_path, capsys, monkeypatch):
    """A write the operating system refuses (a read-only tree, a full disk: made to happen here, as root is not
    stopped by permissions) used to end in a traceback."""
    from cem_core.ui import figure_files

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device", str(tmp_path / "figures" / "x.png"))

    monkeypatch.setattr(figure_files, "write_all_figures", full)
    assert main(["figures", "--out", str(tmp_path / "figures")]) == 2
    assert "x.png: No space left on device" in capsys.readouterr().err


def test_a_variant_named_twice_is_refused(tmp_path, capsys):
    """`lm compare --variants llama llama` used to train the same run twice into one folder."""
    assert main(["lm", "compare", "--variants", "llama", "llama", "--out", str(tmp_path / "cmp")]) == 2
    assert "name each variant once" in capsys.readouterr().err and not (tmp_path / "cmp").exists()


def test_gp_report_says_runs_are_missing_and_refuses_numbers_that_are_not(tmp_path, capsys):
    """`gp report` on a partial sweep used to print its table as if whole, and took nan, inf and 1e400 (read as
    inf) in a run that did not diverge."""
    import json
    import shutil

    from conftest import ROOT

    folder = tmp_path / "gp-default"
    shutil.copytree(ROOT / "results" / "gp-default", folder, ignore=shutil.ignore_patterns("runs"))
    records = json.loads((folder / "results.json").read_text())
    (folder / "results.json").write_text(json.dumps(records[:-3]))
    assert main(["gp", "report", str(folder)]) == 0
    assert f"note: 3 of {len(records)} runs of preset default are missing" in capsys.readouterr().err
    text = json.dumps(records).replace(f'"rmse": {json.dumps(records[0]["rmse"])}', '"rmse": 1e400', 1)
    (folder / "results.json").write_text(text)
    assert main(["gp", "report", str(folder)]) == 2
    assert "rmse=inf is invalid: not finite in a run that did not diverge" in capsys.readouterr().err


@pytest.mark.slow
def test_a_sweep_worker_killed_is_a_message_not_a_broken_pool_traceback():
    """One sweep worker killed (the OOM killer's way: the process ends without a word) used to end the sweep
    in a BrokenProcessPool traceback. os._exit stands for the kill: the worker is gone mid-run."""
    from cem_core.experiments.pool import finished

    with pytest.raises(ValueError, match="a sweep worker process ended abruptly.*run the same command again"):
        list(finished(os._exit, [3, 3], jobs=2))


@pytest.mark.slow
def test_execute_without_the_committed_results_keeps_the_committed_outputs(tmp_path):
    """`notebooks/execute.py` in a tree without results/ used to overwrite the committed outputs with "results
    are not there"."""
    import shutil
    import subprocess
    import sys

    from conftest import ROOT

    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    before = (tmp_path / "notebooks" / "04_gp_recursion.ipynb").read_bytes()
    run = subprocess.run([sys.executable, str(tmp_path / "notebooks" / "execute.py"), "--write", "04_gp_recursion"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "restore them first" in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert (tmp_path / "notebooks" / "04_gp_recursion.ipynb").read_bytes() == before


@pytest.mark.parametrize("command", ["lm", "gp"])
def test_a_seed_beyond_torchs_range_is_refused_before_any_work(tmp_path, capsys, command):
    """A 20-digit seed used to fail in torch.manual_seed after run.json was written."""
    out = tmp_path / ("run" if command == "lm" else "rec.json")
    assert main([command, "train", "--seed", str(10 ** 20), "--out", str(out)]) == 2
    assert "seed=100000000000000000000 is invalid: must be in [0, " in capsys.readouterr().err and not out.exists()


def test_a_split_folder_without_shards_is_refused_before_run_json(tmp_path, capsys):
    """An empty train/ beside a validation/ with shards used to be found only after run.json was written."""
    (tmp_path / "data" / "train").mkdir(parents=True)
    (tmp_path / "data" / "validation").mkdir()
    (tmp_path / "data" / "validation" / "v.jsonl").write_text('{"text": "held out"}\n')
    code, err = lm_train(capsys, str(tmp_path / "data"), tmp_path / "run")
    assert code == 2 and "holds no *.jsonl or *.jsonl.zst files under train/" in err, err
    assert not (tmp_path / "run" / "run.json").exists()


def test_a_sweep_pointed_at_another_kind_of_sweeps_folder_says_so(tmp_path, capsys):
    """`gp sweep --out <an LM sweep folder>` said "the field 'group' is missing; fix it"."""
    import shutil

    from conftest import ROOT

    shutil.copytree(ROOT / "results" / "lm-probe", tmp_path / "lm")
    assert main(["gp", "sweep", "--preset", "quick", "--out", str(tmp_path / "lm")]) == 2
    err = capsys.readouterr().err
    assert "it is not a GP sweep record (another kind of sweep's?)" in err and "Traceback" not in err
