"""What every result file records and how it is written: provenance, atomic writes (a temporary
file, then a rename, so a crash never leaves a half-written file behind), and the Markdown tables
the results pages of docs/ show."""
from __future__ import annotations

import csv
import fcntl
import importlib.metadata
import io
import json
import os
import platform
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from .integrity import LOCK_NAME, RUN_MARKERS, TEMPORARY_MARK

_UMASK = os.umask(0)              # read once (os.umask can only be read by setting it), then put back
os.umask(_UMASK)


def provenance() -> dict:
    """The git commit, package versions and machine a result came from."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                                cwd=Path(__file__).resolve().parent).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    return {"git_commit": commit, "python": platform.python_version(), "torch": torch.__version__,
            "numpy": np.__version__, "cem_lab": package_version(), "machine": platform.machine()}


def package_version() -> str:
    """The installed cem-lab version (a checkout that was not installed has none)."""
    try:
        return importlib.metadata.version("cem-lab")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def atomic_write(path, write) -> None:
    """Call write(tmp_path), flush it to disk, then rename tmp_path onto path (and flush the
    folder), so that neither a crash nor a power cut leaves a half-written or empty file.

    tmp_path is a new file of our own (O_EXCL, a unique name ``.NAME.cem-tmp-XXXX`` in path's folder), so
    nothing planted there (a link, a user's NAME.tmp) is ever written through or replaced; a write that
    fails removes it, keeping the previous file whole."""
    path = Path(path)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}{TEMPORARY_MARK}")
    os.close(fd)
    tmp = Path(name)
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)          # the permissions of an ordinary new file, not mkstemp's 0600
        write(tmp)
        _fsync(tmp, os.O_RDWR)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if os.name == "posix":                   # a folder can be opened and synced on POSIX only
        _fsync(path.parent, os.O_RDONLY)


@contextmanager
def claim_new_output(flag: str, path, **check):
    """Hold a file a command writes at its end for the whole command: ``check_new_output``, then a lock beside it
    (``.NAME.lock``, flock) that a second command naming the same new file finds taken, so it refuses at once
    instead of both training and one record replacing the other; a name too long for the command's temporary
    files is refused before any work. The lock file goes when the command ends."""
    path = check_new_output(flag, path, **check)
    if check.get("own") is not None and os.path.realpath(path) == os.path.realpath(check["own"]):
        yield path                         # the command's own file in its own folder, which its folder lock holds
        return
    folder = Path(os.path.realpath(path)).parent
    longest = len(os.fsencode(f".{path.name}{TEMPORARY_MARK}XXXXXXXX"))
    if longest > os.pathconf(folder, "PC_NAME_MAX"):
        raise ValueError(f"{flag}={str(path)!r} is invalid: the name is too long for this file system (with the "
                         f"temporary name it is written under); choose a shorter one")
    lock = folder / f".{path.name}.lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as err:
        raise ValueError(f"{flag}={str(path)!r} is invalid: its lock {lock} cannot be made ({err.strerror}); "
                         "remove what is there") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(f"{flag}={str(path)!r} is invalid: another command is writing that file now; choose "
                             "another name, or wait for it") from None
        check_new_output(flag, path, **check)              # made while we waited for nothing: still refused
        yield path
        lock.unlink(missing_ok=True)
    finally:
        os.close(fd)


def check_new_output(flag: str, path, own=None, run_folder=None) -> Path:
    """A file a command writes at its end (``--json``, ``gp train --out``), checked before any work starts: a
    new file (a command never writes over a file it did not make; ``own``, the command's own file such as a
    comparison's compare.json, may exist), in an existing, writable folder that is neither the command's own
    ``run_folder`` nor a run's or sweep's folder (LOCK_NAME and a RUN_MARKERS file, here or up to two
    folders up, as deep as runs nest): the files there belong to that run."""
    path = Path(path)
    if own is not None and os.path.realpath(path) == os.path.realpath(own):
        return path
    if path.exists() or path.is_symlink():
        raise ValueError(f"{flag}={str(path)!r} is invalid: the file exists, and a command never writes over a file "
                         f"it did not make; choose a new name")
    folder = Path(os.path.realpath(path)).parent
    if not folder.is_dir():
        raise ValueError(f"{flag}={str(path)!r} is invalid: {folder} is not an existing folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"{flag}={str(path)!r} is invalid: the folder {folder} is not writable")
    mine = Path(os.path.realpath(run_folder)) if run_folder is not None else None
    runs = [f for f in (folder, *folder.parents[:2])
            if f == mine or (f / LOCK_NAME).is_file() and any((f / m).exists() for m in RUN_MARKERS)]
    if runs:
        raise ValueError(f"{flag}={str(path)!r} is invalid: it is inside {runs[0]}, the folder of a run or sweep, "
                         f"whose files are that run's; write it elsewhere")
    return path


def _fsync(path: Path, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def refuse_links(paths, what: str) -> None:
    """Before any work: a ValueError when a file a command would write is a symbolic link (a command never writes
    through a link, which would overwrite the file it points to, nor replaces one)."""
    links = [str(p) for p in map(Path, paths) if p.is_symlink()]
    if links:
        raise ValueError(f"{what}: {links[0]} is a symbolic link" + (f" (and {len(links) - 1} more)" if links[1:]
                         else "") + "; a command never writes through a link: remove it, or choose another folder")


def atomic_write_text(path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text))


def read_json(path):
    """The JSON in path; a ValueError names the file (a folder, unreadable or invalid JSON)."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path} is a folder, not a results or manifest file")
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON ({err}); move it away to start a fresh sweep") from None


def load_records(path, record_problem) -> list[dict]:
    """A sweep's run records in results.json ([] when there is none), each checked by
    ``record_problem(record)`` (a message, or None when it is sound) and none twice; a ValueError names
    the file, the record and the first problem."""
    path = Path(path)
    if not path.exists():
        return []
    records = read_json(path)
    if not isinstance(records, list):
        raise ValueError(f"{path} must hold a list of run records; move it away to start a sweep afresh")
    first: dict[str, int] = {}
    for i, record in enumerate(records):
        if problem := record_problem(record):
            raise ValueError(f"{path}: record {i}: {problem}; fix it, or move the file away to start a sweep afresh")
        if record["hash"] in first:
            raise ValueError(f"{path}: run {record['hash']} appears twice (records {first[record['hash']]} "
                             f"and {i}); a copy is not another seed: remove one")
        first[record["hash"]] = i
    return records


def save_records(out_dir, records: list[dict], csv_fields) -> None:
    """A sweep's results.json (every record) and results.csv (the scalar ``csv_fields``), each written
    atomically (a temporary file, then rename)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / "results.json", json.dumps(records, indent=1))
    table = io.StringIO()
    writer = csv.DictWriter(table, fieldnames=csv_fields, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(records)
    atomic_write_text(out_dir / "results.csv", table.getvalue())


def markdown_table(rows: list[dict], right: tuple = ()) -> str:
    """rows (dicts of strings with the same keys) as a Markdown table, the columns in ``right`` right-aligned."""
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "| " + " | ".join("---:" if k in right else "---" for k in keys) + " |"]
    return "\n".join(lines + ["| " + " | ".join(r[k] for k in keys) + " |" for r in rows])


def and_list(items: list[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
