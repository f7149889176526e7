"""What an LM run folder holds and how it is kept whole.

  .lock             held by the run's process for its whole life (`integrity.FolderLock`)
  run.json          the run's identity: its training configuration and its data source, written
                    when the run begins, with what the data holds (`sources.content`: the demo corpus's
                    sha256, or each local shard's size and sha256) and the sha256 of the tokenizer
                    file once there is one
  checkpoints.json  the last two checkpoints, newest last: file, step and sha256 of each
  checkpoint-NNNNNNNN.pt   model, optimizer and step (written to a temporary file, then renamed)
  metrics.jsonl     a header line, then one JSON line per step and per evaluation
  tokenizer.json    the BPE tokenizer when one is trained
  summary.json      written when the run finishes

A folder holds one run: starting a run whose identity differs from run.json is refused with the
fields that differ, and so is resuming it on data that holds something else (another Python's demo
corpus, a shard rewritten, added or removed). A checkpoint is loaded only if its checksum matches
the one recorded when it was written; a damaged newest checkpoint falls back to the one before it.
"""
from __future__ import annotations

import errno
import json
import sys
from dataclasses import asdict
from pathlib import Path

import torch

from cem_core.experiments.integrity import (
    describe_differences,
    file_sha256,
    foreign_files,
    identity_differences,
    json_hash,
    short_repr,
    temporary_files,
)
from cem_core.experiments.records import atomic_write, atomic_write_text, provenance

from .data_config import DataConfig

RUN_FILE = "run.json"
MANIFEST = "checkpoints.json"
METRICS = "metrics.jsonl"
TOKENIZER = "tokenizer.json"
KEEP_CHECKPOINTS = 2


def data_identity(data: DataConfig) -> dict:
    """The data settings that decide what a run reads (a local path made absolute)."""
    identity = asdict(data)
    if data.path is not None:
        identity["path"] = str(Path(data.path).resolve())
    return identity


def run_identity(config: dict, data: DataConfig) -> dict:
    """Everything that determines a run's numbers: the training configuration and the data, as
    JSON holds them (tuples become lists), so a recorded identity compares equal to a new one."""
    return json.loads(json.dumps({"config": config, "data": data_identity(data)}))


def identity_hash(identity: dict) -> str:
    return json_hash(identity)


def _fresh_start_hint(out: Path) -> str:
    return f"to keep that run, choose another --out; to start afresh, delete {out} (or move it away)"


def _read_json(path: Path, what: str):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"{path} is unreadable ({type(err).__name__}: {err}): the {what} is damaged; "
                         f"{_fresh_start_hint(path.parent)}") from None


def claim(out: Path, identity: dict, defaults: dict, content: dict | None = None) -> dict:
    """Make `out` this run's folder, or check that it already is: returns the run record.

    Refuses (ValueError) a folder whose run.json records another identity, naming the fields that
    differ (a field the record lacks, because it was added to the configuration later, counts as
    its value in `defaults`), a run whose data held other `content` (`sources.content`; a record from before
    contents were recorded takes today's), and a folder without run.json that is not empty. Once the folder is
    known to be this run's, the leftover temporaries of its interrupted writes are removed (ours only:
    `integrity.temporary_files`; a user's *.tmp is never touched)."""
    path = out / RUN_FILE
    if not path.exists():
        stray = foreign_files(out, ())
        if stray:
            raise ValueError(f"{out} is not empty ({', '.join(stray[:6])}) and holds no {RUN_FILE} saying which run "
                             f"made it (a run from before run identities were recorded, another kind of run, or "
                             f"other files): choose a new or empty folder with --out")
        _remove_temporaries(out)
        record = {"identity": identity, "identity_hash": identity_hash(identity), "data_content": content or {},
                  "tokenizer_sha256": None, "provenance": provenance()}
        atomic_write_text(path, json.dumps(record, indent=1))
        return record
    record = _read_json(path, "run record")
    if not isinstance(record, dict) or not isinstance(record.get("identity"), dict):
        raise ValueError(f"{path} does not hold a run record (no 'identity'); {_fresh_start_hint(out)}")
    recorded = _with_defaults(record["identity"], defaults)
    if identity_differences(recorded, identity):
        raise ValueError(f"{out} holds another run: {describe_differences(recorded, identity)}; "
                         f"{_fresh_start_hint(out)}")
    if record.get("data_content") is None:
        record["data_content"] = content or {}
        atomic_write_text(path, json.dumps(record, indent=1))
    elif changes := content_changes(record["data_content"], content or {}):
        raise ValueError(f"{out} was trained on data that held something else: {'; '.join(changes[:4])}. A run "
                         f"resumes only on the data it began with: restore it, or {_fresh_start_hint(out)}")
    _remove_temporaries(out)
    return record


def content_changes(recorded: dict, now: dict) -> list[str]:
    """What differs between two `sources.content` records, each change naming its field."""
    changes = []
    if recorded.get("demo_sha256") != now.get("demo_sha256"):
        changes.append(f"data_content.demo_sha256 is {_short(now.get('demo_sha256'))} now, "
                       f"{_short(recorded.get('demo_sha256'))} when the run began (the demo corpus is the standard "
                       "library of the Python that runs: another Python build or version gives another corpus)")
    before, after = recorded.get("shards") or {}, now.get("shards") or {}
    for name in sorted(set(before) | set(after)):
        if name not in after:
            changes.append(f"data_content.shards[{name!r}]: the shard is gone")
        elif name not in before:
            changes.append(f"data_content.shards[{name!r}]: a new shard")
        elif before[name] != after[name]:
            changes.append(f"data_content.shards[{name!r}] has changed: {after[name].get('bytes'):,} bytes, sha256 "
                           f"{_short(after[name].get('sha256'))} now; {before[name].get('bytes'):,} bytes, "
                           f"{_short(before[name].get('sha256'))} when the run began")
    return changes


def _short(sha) -> str:
    return "none" if sha is None else f"{sha[:12]}…"


def _remove_temporaries(out: Path) -> None:
    for tmp in temporary_files(out):
        tmp.unlink(missing_ok=True)


def _with_defaults(recorded: dict, defaults: dict) -> dict:
    """The recorded identity, with the fields it lacks taken from `defaults` (section by section)."""
    return {section: {**defaults.get(section, {}), **values} if isinstance(values, dict) else values
            for section, values in recorded.items()}


def check_tokenizer(out: Path, record: dict) -> None:
    """Record the tokenizer file's sha256 on first use; refuse a file changed since then."""
    path = out / TOKENIZER
    if not path.exists():
        return
    sha = file_sha256(path)
    if record.get("tokenizer_sha256") is None:
        record["tokenizer_sha256"] = sha
        atomic_write_text(out / RUN_FILE, json.dumps(record, indent=1))
    elif record["tokenizer_sha256"] != sha:
        raise ValueError(f"{path} has changed since the run trained it (sha256 {sha[:12]}…, recorded "
                         f"{record['tokenizer_sha256'][:12]}…); {_fresh_start_hint(out)}")


# -- checkpoints ---------------------------------------------------------------------------------


def _checkpoint_name(step: int) -> str:
    return f"checkpoint-{step:08d}.pt"


def _manifest(out: Path) -> list[dict]:
    path = out / MANIFEST
    if not path.exists():
        return []
    entries = _read_json(path, "checkpoint list")
    if not (isinstance(entries, list) and all(isinstance(e, dict) and isinstance(e.get("file"), str)
                                              and isinstance(e.get("sha256"), str) and isinstance(e.get("step"), int)
                                              for e in entries)):
        raise ValueError(f"{path} is not a list of checkpoints (file, step, sha256); {_fresh_start_hint(out)}")
    return entries


def save_checkpoint(out: Path, model, optimizer, step: int, run_hash: str) -> None:
    """Write checkpoint-<step>.pt atomically, record its sha256, keep the last two."""
    name = _checkpoint_name(step)
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step, "identity_hash": run_hash}
    atomic_write(out / name, lambda tmp: _torch_save(state, tmp, out / name))
    entry = {"file": name, "step": step, "sha256": file_sha256(out / name)}
    kept = ([e for e in _manifest(out) if e["file"] != name] + [entry])[-KEEP_CHECKPOINTS:]
    atomic_write_text(out / MANIFEST, json.dumps(kept, indent=1))
    for old in out.glob("checkpoint-*.pt"):
        if old.name not in {e["file"] for e in kept}:
            old.unlink()


def _torch_save(state: dict, tmp: Path, path: Path) -> None:
    """torch.save, its write errors as an OSError naming the checkpoint (a full disk comes out of torch's C++
    writer as "basic_ios::clear: iostream error" or "PytorchStreamWriter failed writing file", naming nothing)."""
    try:
        torch.save(state, tmp)
    except RuntimeError as err:
        if "iostream" in str(err) or "writing file" in str(err) or "No space" in str(err):
            raise OSError(errno.ENOSPC, f"could not write it ({err}); is the disk full?", str(path)) from None
        raise


def _problem(out: Path, entry: dict) -> str | None:
    """Why this checkpoint cannot be used, or None if it is intact."""
    path = out / entry["file"]
    if not path.exists():
        return f"{path} is missing"
    if file_sha256(path) != entry["sha256"]:
        return f"{path} is corrupt (its sha256 differs from the one recorded when it was written)"
    return None


def load_latest_checkpoint(out: Path, model, optimizer, run_hash: str, announce: bool = True) -> int:
    """Load the newest intact checkpoint into model and optimizer and return its step (0: none).

    A damaged newest checkpoint is reported and the previous one used; with none intact the
    error names every file and says how to restart."""
    entries = _manifest(out)
    if not entries:
        if any(out.glob("checkpoint-*.pt")):
            raise ValueError(f"{out} holds checkpoint files but no {MANIFEST} recording their checksums; "
                             f"{_fresh_start_hint(out)}")
        return 0
    problems = []
    for entry in reversed(entries):
        problem = _problem(out, entry)
        if problem:
            problems.append(problem)
            continue
        state = torch.load(out / entry["file"], map_location="cpu", weights_only=True)
        if state.get("identity_hash") != run_hash:
            raise ValueError(f"{out / entry['file']} belongs to another run (identity {state.get('identity_hash')}, "
                             f"this run {run_hash}); {_fresh_start_hint(out)}")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if problems and announce:
            print(f"warning: {'; '.join(problems)}: resuming from {entry['file']} (step {entry['step']}) instead",
                  file=sys.stderr, flush=True)
        return int(state["step"])
    raise ValueError(f"no intact checkpoint in {out}: {'; '.join(problems)}. To restart this run from step 0, "
                     f"delete {out / MANIFEST} and the checkpoint files (or the whole folder)")


# -- metrics -------------------------------------------------------------------------------------


def _json_object(line: str) -> dict | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


# the fields of a step's record that its readers use (resume, summaries, the app), as the training loop writes
# them; an evaluation's record adds EVAL_FIELDS
STEP_FIELDS = {"step": int, "loss": float, "tokens_per_s": float}
EVAL_FIELDS = {"val_loss": float, "val_ppl": float}


def _step_problem(record: dict) -> str | None:
    """Why a step record is not one the trainer wrote (a hand edit, another tool), or None."""
    for name, kind in [*STEP_FIELDS.items(), *EVAL_FIELDS.items()]:
        value = record.get(name)
        if value is None and name in EVAL_FIELDS:
            continue
        wanted = (int,) if kind is int else (int, float)
        if isinstance(value, bool) or not isinstance(value, wanted):
            shown = short_repr(value) if name in record else "missing"
            return f"{name} is {shown}, not {'an integer' if kind is int else 'a number'}"
    return None


def _parse_lines(path: Path, text: str) -> tuple[list[dict], bool]:
    """The JSON lines of a metrics file (the header, then step records) and whether an incomplete last line was
    dropped.

    The last line may be cut short by an interrupted append (a JSON object is complete only with
    its closing brace): it is dropped. A damaged line anywhere else, or a step record whose fields are not the
    trainer's (a hand edit: a step written as "4", a field missing), is an error naming the file and the line."""
    numbered = [(n, line) for n, line in enumerate(text.split("\n"), 1) if line.strip()]
    records = []
    for i, (number, line) in enumerate(numbered):
        record = _json_object(line)
        if record is None and i == len(numbered) - 1:
            return records, True
        problem = "not a JSON object" if record is None else _step_problem(record) if i else None
        if problem:
            raise ValueError(f"{path}, line {number}: {problem} ({line[:60]!r}); the metrics file is "
                             f"damaged; {_fresh_start_hint(path.parent)}")
        records.append(record)
    return records, False


class Metrics:
    """metrics.jsonl: a header line, then one line per step and per evaluation. On resume, lines
    after the checkpointed step are dropped (and an incomplete last line repaired, with a note),
    so the file always equals an uninterrupted run's."""

    def __init__(self, path: Path, header: dict, resume_step: int, enabled: bool):
        self.path, self.enabled = path, enabled
        if not enabled:
            return
        kept = []
        if resume_step and path.exists():
            records, dropped = _parse_lines(path, path.read_text())
            if dropped:
                print(f"note: {path}: dropped an incomplete last line left by an interrupted write",
                      file=sys.stderr, flush=True)
            kept = [r for r in records[1:] if r.get("step", 0) <= resume_step]
        atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in [header] + kept))

    def write(self, record: dict) -> None:
        if self.enabled:
            with self.path.open("a") as f:
                f.write(json.dumps(record) + "\n")


def read_metrics(out_dir) -> list[dict]:
    """The step and evaluation records of a run (without the header); safe to call while the
    run is appending (a line still being written is left out)."""
    path = Path(out_dir) / METRICS
    return _parse_lines(path, path.read_text())[0][1:]
