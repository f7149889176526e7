"""The writers: every command that writes refuses links, never deletes what it did not make, and two
commands naming the same new output file cannot both train and lose a record. Each attack below was reported
against the code before the fix (publish.py removed a user's OUT/mathjax and wrote through a planted link,
`figures` wrote through a link with exit 0, two `gp train --out T/rec.json` both said "record written")."""
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT

from cem_core.cli import main

sys.path.insert(0, str(ROOT / "notebooks"))
import publish  # noqa: E402


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file\n")
    return victim


@pytest.mark.parametrize("target", ["slides", "handout"])
def test_publish_never_deletes_a_folder_it_did_not_make(tmp_path, capsys, target):
    out = tmp_path / "out"
    (out / "mathjax").mkdir(parents=True)
    (out / "mathjax" / "notes.txt").write_text("mine\n")
    assert publish.main([target, "--out", str(out)]) == 1
    assert "never deletes them" in capsys.readouterr().err
    assert (out / "mathjax" / "notes.txt").read_text() == "mine\n"


@pytest.mark.parametrize("name", ["00_lecture.slides.html", "mathjax"])
def test_publish_never_writes_through_a_link(tmp_path, capsys, name):
    out, victim = tmp_path / "out", _victim(tmp_path)
    out.mkdir()
    (out / name).symlink_to(victim if name.endswith(".html") else tmp_path)
    assert publish.main(["slides", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "is a symbolic link, which publishing never writes through" in err and "Traceback" not in err
    assert victim.read_text() == "the user's own file\n"


def test_publish_to_a_file_is_a_message(tmp_path, capsys):
    victim = _victim(tmp_path)
    assert publish.main(["handout", "--out", str(victim)]) == 1
    assert "is a file, not a folder" in capsys.readouterr().err and victim.read_text() == "the user's own file\n"


@pytest.mark.slow                      # builds the deck: the folder it made is replaced, a user's file beside it kept
def test_publish_replaces_only_its_own_asset_folders(tmp_path):
    out = tmp_path / "out"
    assert publish.main(["slides", "--out", str(out)]) == 0
    assert (out / "mathjax" / publish.ASSETS_MARK).is_file() and (out / "reveal.js" / publish.ASSETS_MARK).is_file()
    (out / "mine.txt").write_text("mine\n")
    assert publish.main(["slides", "--out", str(out)]) == 0
    assert (out / "mine.txt").read_text() == "mine\n"


def test_figures_never_write_through_a_link(tmp_path, capsys):
    out, victim = tmp_path / "figures", _victim(tmp_path)
    out.mkdir()
    (out / "energy_descent.png").symlink_to(victim)
    assert main(["figures", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "energy_descent.png is a symbolic link" in err and "never writes through a link" in err
    assert victim.read_text() == "the user's own file\n" and list(out.iterdir()) == [out / "energy_descent.png"]


GP_TRAIN = [sys.executable, "-m", "cem_core", "gp", "train", "--d-model", "8", "--d-ff", "16", "--n-heads", "2",
            "--n-points", "8"]


@pytest.mark.slow                      # two processes, one training for a few seconds
def test_two_commands_naming_the_same_new_record_cannot_both_train(tmp_path):
    """The first holds the record's lock from before training; the second refuses at once, and the first's
    record is written whole, its lock gone."""
    record = tmp_path / "rec.json"
    first = subprocess.Popen([*GP_TRAIN, "--steps", "400", "--seed", "1", "--out", str(record)], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = tmp_path / ".rec.json.lock"
    deadline = time.monotonic() + 60
    while not lock.exists() and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.05)
    assert lock.exists(), first.communicate()
    second = subprocess.run([*GP_TRAIN, "--steps", "3", "--seed", "2", "--out", str(record)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert second.returncode == 2 and "another command is writing that file now" in second.stderr, second.stderr
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert json.loads(record.read_text())["seed"] == 1 and not lock.exists()


def test_a_name_too_long_for_the_temporary_is_refused_before_training(tmp_path, capsys):
    name = "r" * 245 + ".json"                                  # fits NAME_MAX (255), its temporary does not
    assert main(["gp", "train", "--steps", "3", "--d-model", "8", "--d-ff", "16", "--n-heads", "2",
                 "--out", str(tmp_path / name)]) == 2
    captured = capsys.readouterr()
    assert "the name is too long for this file system" in captured.err and "held-out RMSE" not in captured.out
    assert list(tmp_path.iterdir()) == []


def test_a_planted_lock_link_is_refused_and_its_target_kept(tmp_path, capsys):
    victim = _victim(tmp_path)
    (tmp_path / ".rec.json.lock").symlink_to(victim)
    assert main(["gp", "train", "--steps", "3", "--d-model", "8", "--d-ff", "16", "--n-heads", "2",
                 "--out", str(tmp_path / "rec.json")]) == 2
    assert "its lock" in capsys.readouterr().err and victim.read_text() == "the user's own file\n"


@pytest.mark.slow                      # trains one variant for two steps
def test_a_comparisons_own_table_in_its_folder_takes_no_lock_beside_it(tmp_path, capsys):
    """The app's job runs `lm compare --out F --json F/compare.json`: a lock beside its own table made the
    comparison refuse its own folder ("holds files that are not a comparison's"). Its folder's lock holds it."""
    out = tmp_path / "cmp"
    assert main(["lm", "compare", "--preset", "cpu-tiny", "--steps", "2", "--variants", "llama", "--out", str(out),
                 "--json", str(out / "compare.json")]) == 0, capsys.readouterr().err
    assert json.loads((out / "compare.json").read_text()) and not list(out.glob(".*.lock*"))[1:]
    assert not (out / ".compare.json.lock").exists()
