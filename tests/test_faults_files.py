"""Attacks on the files around a run: links planted where the project writes, and files of the user's
that look like ours (docs/design.md#6-run-integrity). Real files and folders; after
every attack, the files the project did not write hold the same bytes as before."""
import os
from pathlib import Path

import pytest

from cem_core.__main__ import main
from cem_core.experiments import gp_sweep
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
        gp_sweep.run_sweep(folder, [])
    assert target.read_text() == "keep\n" and (folder / LOCK_NAME).is_symlink()


def test_a_lock_that_is_a_folder_is_refused_with_a_message(tmp_path):
    (tmp_path / LOCK_NAME).mkdir()
    with pytest.raises(ValueError, match="not a regular file"):
        FolderLock(tmp_path, "run").acquire()


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


def test_a_resume_on_another_pythons_demo_corpus_is_refused(tmp_path, monkeypatch, capsys, one_thread):
    """Another Python build's standard library is another demo corpus: a resume used to go on silently on it,
    so one metrics.jsonl held two corpora. The demo text's sha256 is now recorded and compared."""
    from cem_core.experiments.lm import data

    def stdlib(version: str) -> Path:                # a standard library of this build: its module files
        root = tmp_path / f"python-{version}"
        root.mkdir(exist_ok=True)
        for i in range(40):
            (root / f"mod{i}.py").write_text(f'"""Module {i} of Python {version}."""\n' + f"x_{i} = {i}\n" * 40)
        return root

    def run_on(version: str) -> tuple[int, str]:
        monkeypatch.setattr(data, "_stdlib_root", lambda: stdlib(version))
        data.demo_corpus.cache_clear()
        return lm_train(capsys, "demo", tmp_path / "run")

    try:
        assert run_on("3.11.7")[0] == 0
        metrics = (tmp_path / "run" / "metrics.jsonl").read_bytes()
        code, err = run_on("3.11.2")
        assert code == 2 and "data_content.demo_sha256" in err and "another Python build" in err, err
        assert (tmp_path / "run" / "metrics.jsonl").read_bytes() == metrics
        assert run_on("3.11.7")[0] == 0                  # the same corpus again resumes
    finally:
        data.demo_corpus.cache_clear()


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
