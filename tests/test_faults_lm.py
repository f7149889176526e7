"""Fault injection on the language-model trainer and its CLI: each test reproduces an attack
(mixing runs in one folder, two writers, damaged checkpoints and metrics, bad arguments) and
asserts the outcome: a refusal with a message, nothing lost, no traceback."""
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import ROOT, child_env, free_port, interruptible, shard_corpus, tiny_gp_spec

from cem_core.__main__ import main
from cem_core.experiments.gp.sweep import run_gp_sweep
from cem_core.experiments.integrity import FolderLock, file_sha256, json_hash
from cem_core.experiments.lm.run_folder import read_metrics
from cem_core.experiments.lm.train import train
from cem_core.experiments.lm.train_config import LMTrainConfig
from cem_core.nn.config import ModelShape

TINY = dict(shape=ModelShape(d_model=16, n_layers=1, n_heads=2, d_ff=32), seq_len=16, batch_size=4, eval_batches=1,
            sample_tokens=0)
SMALL = ["--steps", "2", "--batch-size", "4", "--seq-len", "16"]     # CLI runs of the cpu-tiny preset, cut short


def tiny(**changes) -> LMTrainConfig:
    return LMTrainConfig(**({"variant": "llama", "steps": 4, "eval_every": 2, "ckpt_every": 2} | TINY | changes))


def cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- run identity -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_other_data_into_a_run_folder_is_refused(tmp_path, capsys, one_thread):
    first, second = shard_corpus(tmp_path, name="a.jsonl"), shard_corpus(tmp_path, name="b.jsonl")
    out = str(tmp_path / "run")
    assert cli(capsys, "lm", "train", "--variant", "llama", "--data", first.path, "--out", out, *SMALL)[0] == 0
    before = (tmp_path / "run" / "metrics.jsonl").read_text()
    code, _, err = cli(capsys, "lm", "train", "--variant", "llama", "--data", second.path, "--out", out, *SMALL)
    assert code == 2
    assert "holds another run: data.path:" in err and "b.jsonl" in err and "choose another --out" in err
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == before               # nothing relabelled


@pytest.mark.parametrize("change,field", [(dict(source_filter=("RedPajamaBook",)), "data.source_filter"),
                                          (dict(validation_fraction=0.2), "data.validation_fraction"),
                                          (dict(dataset_id="someone/else"), "data.dataset_id"),
                                          (dict(max_document_bytes=1000), "data.max_document_bytes")])
def test_every_data_setting_is_part_of_the_identity(tmp_path, one_thread, change, field):
    data = shard_corpus(tmp_path)
    train(tiny(steps=2), data, tmp_path / "run", progress=False)
    with pytest.raises(ValueError, match=rf"holds another run: {field}:"):
        train(tiny(steps=2), replace(data, **change), tmp_path / "run", progress=False)


def test_a_changed_tokenizer_is_refused(tmp_path, one_thread):
    data = shard_corpus(tmp_path)
    train(tiny(steps=2, tokenizer="bpe:300"), data, tmp_path / "run", progress=False)
    with pytest.raises(ValueError, match="config.tokenizer: 'bpe:300' there, 'bpe:400' now"):
        train(tiny(steps=2, tokenizer="bpe:400"), data, tmp_path / "run", progress=False)
    tokenizer = tmp_path / "run" / "tokenizer.json"
    tokenizer.write_text(tokenizer.read_text() + "\n")                          # changed behind the run's back
    with pytest.raises(ValueError, match="tokenizer.json has changed since the run trained it"):
        train(tiny(steps=2, tokenizer="bpe:300"), data, tmp_path / "run", progress=False)


def test_a_folder_of_unknown_origin_is_refused(tmp_path, one_thread):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoint.pt").write_bytes(b"from an older version")
    with pytest.raises(ValueError, match=r"is not empty \(checkpoint.pt\) and holds no run.json"):
        train(tiny(), shard_corpus(tmp_path), tmp_path / "run", progress=False)


def test_an_lm_run_and_a_gp_sweep_never_share_a_folder(tmp_path, capsys, one_thread):
    data = shard_corpus(tmp_path)
    train(tiny(steps=2), data, tmp_path / "lm", progress=False)
    with pytest.raises(ValueError, match=r"holds files that are not a GP sweep's \(checkpoint-00000002.pt"):
        run_gp_sweep(tmp_path / "lm", [tiny_gp_spec(2)])
    run_gp_sweep(tmp_path / "gp", [tiny_gp_spec(2)])
    with pytest.raises(ValueError, match=r"is not empty \(results.csv, results.json, sweep.json\)"):
        train(tiny(steps=2), data, tmp_path / "gp", progress=False)
    code, _, err = cli(capsys, "lm", "compare", "--variants", "llama", "--data", data.path, "--out",
                       str(tmp_path / "lm"), *SMALL)
    assert code == 2 and "holds files that are not a comparison's" in err


@pytest.mark.slow
def test_a_field_added_to_the_configuration_later_does_not_orphan_old_runs(tmp_path, one_thread):
    """A folder as an older version wrote it: its identity (and the hash its checkpoints carry)
    lacks fields added since. Resuming it is the same run when those fields have their defaults."""
    _, data, out = _finished_run(tmp_path, steps=4)
    record = json.loads((out / "run.json").read_text())
    del record["identity"]["config"]["grad_clip"]
    del record["identity"]["data"]["max_document_bytes"]
    record["identity_hash"] = json_hash(record["identity"])
    (out / "run.json").write_text(json.dumps(record))
    entries = json.loads((out / "checkpoints.json").read_text())
    for entry in entries:
        state = torch.load(out / entry["file"], weights_only=True)
        torch.save(state | {"identity_hash": record["identity_hash"]}, out / entry["file"])
        entry["sha256"] = file_sha256(out / entry["file"])
    (out / "checkpoints.json").write_text(json.dumps(entries))
    summary = train(tiny(), data, out, progress=False).summary          # resumes at step 4: nothing to redo
    assert summary["identity_hash"] == record["identity_hash"]
    with pytest.raises(ValueError, match="config.grad_clip: 1.0 there, 0.5 now"):
        train(tiny(optim={"grad_clip": 0.5}), data, out, progress=False)


# -- one writer per folder --------------------------------------------------------------------------


@pytest.mark.slow
def test_two_concurrent_runs_into_one_folder_exactly_one_runs(tmp_path):
    data = shard_corpus(tmp_path)
    command = [sys.executable, "-m", "cem_core", "lm", "train", "--variant", "llama", "--data", data.path,
               "--out", str(tmp_path / "run"), "--steps", "300", "--batch-size", "4", "--seq-len", "16"]
    env = child_env()
    logs = [tmp_path / f"stderr{i}" for i in range(2)]
    procs = [subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log.open("w"))
             for log in logs]
    results = [(p.wait(timeout=300), log.read_text()) for p, log in zip(procs, logs)]
    assert sorted(code for code, _ in results) == [0, 2], results
    refused = next(err for code, err in results if code == 2)
    assert "is in use (pid" in refused and "only one LM run may write to a folder" in refused
    assert "Traceback" not in refused
    assert [r["step"] for r in read_metrics(tmp_path / "run")] == list(range(1, 301))  # one run's lines, once


# -- checkpoints and metrics ------------------------------------------------------------------------


def _finished_run(tmp_path, **changes):
    data = shard_corpus(tmp_path)
    cfg = tiny(**changes)
    train(cfg, data, tmp_path / "run", progress=False)
    return cfg, data, tmp_path / "run"


def _newest(out: Path) -> Path:
    return out / json.loads((out / "checkpoints.json").read_text())[-1]["file"]


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["zero 8 KB", "truncate", "empty"])
def test_a_damaged_checkpoint_is_detected_and_the_previous_one_used(tmp_path, capsys, one_thread, damage):
    cfg, data, out = _finished_run(tmp_path, steps=6)
    whole = read_metrics(out)
    newest = _newest(out)
    raw = bytearray(newest.read_bytes())
    if damage == "zero 8 KB":
        middle = len(raw) // 2
        raw[middle:middle + 8192] = bytes(min(8192, len(raw) - middle))
    newest.write_bytes({"zero 8 KB": bytes(raw), "truncate": bytes(raw[:len(raw) // 2]), "empty": b""}[damage])
    train(cfg, data, out, progress=False)                                   # resume: redo steps 5 and 6
    err = capsys.readouterr().err
    assert f"{newest} is corrupt" in err and "resuming from checkpoint-00000004.pt (step 4)" in err
    for key in ("step", "loss", "val_ppl"):                                  # nothing lost, exactly
        assert [r.get(key) for r in read_metrics(out)] == [r.get(key) for r in whole]


def test_no_intact_checkpoint_is_an_error_that_says_how_to_restart(tmp_path, one_thread):
    cfg, data, out = _finished_run(tmp_path, steps=6)
    for entry in json.loads((out / "checkpoints.json").read_text()):
        (out / entry["file"]).write_bytes(b"")
    with pytest.raises(ValueError, match=r"no intact checkpoint in .*checkpoint-00000006.pt is corrupt.*"
                                         r"checkpoint-00000004.pt is corrupt.*To restart this run from step 0"):
        train(cfg, data, out, progress=False)


def test_only_the_last_two_checkpoints_are_kept(tmp_path, one_thread):
    _, _, out = _finished_run(tmp_path, steps=8)
    assert sorted(p.name for p in out.glob("checkpoint-*.pt")) == ["checkpoint-00000006.pt", "checkpoint-00000008.pt"]
    assert [e["step"] for e in json.loads((out / "checkpoints.json").read_text())] == [6, 8]


def test_a_partial_last_metrics_line_is_repaired_on_resume(tmp_path, capsys, one_thread):
    cfg, data, out = _finished_run(tmp_path, steps=4, ckpt_every=2)
    whole = read_metrics(out)
    metrics = out / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    metrics.write_text("".join(lines[:4]) + lines[4][:17])              # header, steps 1-3, half of step 4's line
    assert [r["step"] for r in read_metrics(out)] == [1, 2, 3]           # a reader skips the line being written
    _newest(out).write_bytes(b"")                                        # the kill came before checkpoint 4
    train(cfg, data, out, progress=False)
    assert f"{metrics}: dropped an incomplete last line" in capsys.readouterr().err
    assert [r["loss"] for r in read_metrics(out)] == [r["loss"] for r in whole]


def test_a_damaged_metrics_line_is_reported_with_the_file_and_line(tmp_path, one_thread):
    cfg, data, out = _finished_run(tmp_path, steps=4)
    metrics = out / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    lines[2] = "{garbage\n"
    metrics.write_text("".join(lines))
    with pytest.raises(ValueError, match=rf"{metrics}, line 3: not a JSON object"):
        train(cfg, data, out, progress=False)


# -- clear CLI errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("argv,message", [
    (["lm", "train", "--device", "nonsense"], "device='nonsense' is invalid"),
    (["lm", "compare", "--device", "cuda:7"], "device='cuda:7' is invalid"),
    (["gp", "train", "--device", "nonsense"], "device='nonsense' is invalid"),
    (["gp", "sweep", "--out", "{tmp}/sweep", "--device", "gpu"], "device='gpu' is invalid"),
    (["bench", "--device", "nonsense", "--repeats", "1"], "device='nonsense' is invalid"),
])
def test_a_bad_device_is_a_clear_error(tmp_path, capsys, argv, message):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    if argv[0] == "lm":
        argv += ["--data", shard_corpus(tmp_path).path, "--out", str(tmp_path / "run"), *SMALL]
    code, _, err = cli(capsys, *argv)
    assert code == 2 and message in err and "Traceback" not in err


@pytest.mark.parametrize("command", ["train", "compare"])
@pytest.mark.parametrize("below", [False, True])
def test_out_pointing_at_a_file_is_a_clear_error(tmp_path, capsys, command, below):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    target = notes / "run" if below else notes
    code, _, err = cli(capsys, "lm", command, "--data", shard_corpus(tmp_path).path, "--out", str(target), *SMALL)
    assert code == 2 and f"out={str(target)!r} is invalid: " in err and "Traceback" not in err
    assert ("Not a directory" if below else "it is a file, not a folder") in err
    assert notes.read_text() == "my notes"


def test_an_empty_source_filter_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["lm", "train", "--data", shard_corpus(tmp_path).path, "--source-filter", "--out", str(tmp_path / "r")])
    assert exit_.value.code == 2
    assert "--source-filter: expected at least one argument" in capsys.readouterr().err


@pytest.mark.parametrize("values", [(2.5,), (1, 2.0), ("2",), (True,)])
def test_non_integral_eval_T_is_refused_not_truncated(values):
    with pytest.raises(ValueError, match=r"^eval_T=.* is invalid: must be an integer"):
        LMTrainConfig(variant="cem-attn", eval_T=values)


@pytest.mark.slow
def test_skipped_records_are_shown_by_the_cli_and_kept_in_the_summary(tmp_path, capsys, one_thread):
    data = shard_corpus(tmp_path)
    shard = Path(data.path)
    shard.write_text("{not json\n" + json.dumps({"no_text": 1}) + "\n" + shard.read_text())   # read first
    code, out, _ = cli(capsys, "lm", "train", "--variant", "llama", "--data", data.path,
                       "--out", str(tmp_path / "run"), *SMALL)
    assert code == 0
    stats = json.loads((tmp_path / "run" / "summary.json").read_text())["data_stats"]
    assert stats["train"]["malformed"] == stats["validation"]["malformed"] == 2
    assert "data read: train" in out and "2 malformed" in out


@pytest.mark.slow
def test_ctrl_c_stops_a_run_without_a_traceback_keeping_its_checkpoint(tmp_path):
    data = shard_corpus(tmp_path)
    out = tmp_path / "run"
    command = [sys.executable, "-m", "cem_core", "lm", "train", "--variant", "llama", "--data", data.path,
               "--out", str(out), "--steps", "3000", "--batch-size", "4", "--seq-len", "16"]
    proc = subprocess.Popen(command, cwd=ROOT, env=child_env(), start_new_session=True,
                            preexec_fn=interruptible,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (out / "checkpoints.json").exists() and time.time() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)                                  # what a terminal's Ctrl-C sends
    sent = time.time()
    _, err = proc.communicate(timeout=30)
    assert time.time() - sent < 5 and proc.returncode == 130
    assert "interrupted" in err and "Traceback" not in err
    step = json.loads((out / "checkpoints.json").read_text())[-1]["step"]
    assert step >= 100 and (out / ".lock").read_text() == ""              # a checkpoint kept, the lock let go


@pytest.mark.parametrize("target", ["folder", "existing file"])
def test_gp_train_never_writes_over_a_folder_or_a_file(tmp_path, capsys, target):
    out = tmp_path if target == "folder" else tmp_path / "results.json"
    if target == "existing file":
        out.write_text("[]")
    code, printed, err = cli(capsys, "gp", "train", "--steps", "2", "--out", str(out))
    assert code == 2 and f"out={str(out)!r} is invalid" in err and "held-out RMSE" not in printed
    assert target == "folder" or out.read_text() == "[]"


@pytest.mark.slow
def test_a_refused_torchrun_job_ends_every_rank_with_the_message(tmp_path):
    data = shard_corpus(tmp_path)
    out = tmp_path / "run"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--nnodes", "1",
               "--master_addr", "127.0.0.1", "--master_port", str(free_port()), "-m", "cem_core", "lm", "train",
               "--variant", "llama", "--data", data.path, "--out", str(out), *SMALL]
    with FolderLock(out, "LM run"):                                   # another run holds the folder
        done = subprocess.run(command, cwd=ROOT, env=child_env(), capture_output=True,
                              text=True, timeout=300)
    assert done.returncode != 0
    assert done.stderr.count("is in use (pid") == 2, done.stderr[-3000:]   # rank 0 and rank 1 say why
    assert "barrier" not in done.stderr                                   # nobody was left waiting


# -- divergence is divergence, and a record says what it holds ---------------------------------------------------


@pytest.mark.slow                      # trains twice
def test_weights_a_step_made_non_finite_end_the_run_before_any_checkpoint(tmp_path, capsys):
    """`lm train --lr 1000 --steps 2` used to checkpoint NaN weights (every rerun then ended in a RuntimeError),
    and `--lr 30 --steps 1` to end in an OverflowError traceback. Now the step that breaks the weights ends the
    run with a message naming the step and the rate, and nothing non-finite is ever checkpointed."""
    out = tmp_path / "run"
    code = main(["lm", "train", "--preset", "cpu-tiny", "--variant", "llama", "--steps", "2", "--lr", "1000",
                 "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "the weights became non-finite at step 2; lower lr=1000.0" in err and "Traceback" not in err
    assert not list(out.glob("checkpoint-*"))
    code = main(["lm", "train", "--preset", "cpu-tiny", "--variant", "llama", "--steps", "2", "--lr", "1000",
                 "--out", str(out)])                                     # the rerun says the same, no RuntimeError
    assert code == 2 and "became non-finite" in capsys.readouterr().err


@pytest.mark.slow                      # trains one sweep run
def test_a_sweep_run_that_diverges_is_recorded_as_diverged_and_the_record_is_sound(tmp_path):
    from cem_core.experiments.lm import presets, runner

    spec = presets.preset_runs("quick")[0]
    spec = replace(spec, config=replace(spec.config, optim=replace(spec.config.optim, lr=1000.0), steps=4,
                                        eval_every=2, ckpt_every=2))
    record = runner.run_one(spec, presets.default_data("quick"), tmp_path)
    assert record["diverged"] is True and runner.LM_SWEEP.problem(record) == ""
    for checkpoint in (tmp_path / "runs" / spec.folder).glob("checkpoint-*"):     # only weights still finite
        state = torch.load(checkpoint, weights_only=True)["model"]
        assert all(t.isfinite().all() for t in state.values()), checkpoint.name


@pytest.mark.parametrize("edit, message", [
    ({"val_ppl": float("nan")}, "val_ppl=nan is invalid: not finite in a run that did not diverge"),
    ({"val_ppl": -5.0}, "val_ppl=-5.0 is invalid: a perplexity is at least 1"),
    ({"val_ppl_by_T": {"1": "many"}}, "val_ppl_by_T={'1': 'many'} is invalid: must map each T to a number"),
    ({"steps": 0}, "steps=0 is invalid: a run trains at least one step"),
    ({"tokens": 0}, "tokens=0 is invalid: a run trains on at least one token"),
    ({"val_curve": [[1, "x"]]}, "is invalid: not [step, perplexity] pairs of numbers"),
    ({"val_ppl": 3.0}, "val_ppl=3.0 is not what the run recorded (its checksum differs): the record was edited"),
    ({"tokens_per_s": 1e9}, "tokens_per_s=1000000000.0 is not what the run recorded"),
])
def test_a_sweep_record_with_impossible_numbers_is_refused_with_one_line(tmp_path, edit, message):
    """NaN, a negative perplexity, a string among the test-time perplexities, zero steps, a perplexity made better
    by hand: each used to be accepted (or to end in a traceback in the tables) although docs/reliability.md says a
    damaged record is refused."""
    from cem_core.experiments.lm import presets, runner

    record = runner.LM_SWEEP.load(ROOT / presets.COMMITTED_SWEEP / "results.json")[0] | edit
    (tmp_path / "results.json").write_text(json.dumps([record]))
    with pytest.raises(ValueError) as error:
        runner.LM_SWEEP.load(tmp_path / "results.json")
    assert message in str(error.value) and "record 0" in str(error.value)


@pytest.mark.slow                      # trains twice
def test_a_full_disk_during_a_checkpoint_names_the_file_and_the_run_resumes(tmp_path, capsys, monkeypatch):
    """A full disk during a checkpoint came out of torch's writer as "basic_ios::clear: iostream error", naming no
    file. Now the message names the checkpoint and says to free space and run the same command again, which then
    finishes the run (from its last checkpoint, here none)."""
    from cem_core.experiments.lm import run_folder

    real, calls = torch.save, []

    def full_once(obj, f, *args, **kwargs):
        calls.append(f)
        if len(calls) == 1:                                      # the run's checkpoint: the disk is full
            raise RuntimeError("basic_ios::clear: iostream error")
        return real(obj, f, *args, **kwargs)

    monkeypatch.setattr(run_folder.torch, "save", full_once)
    out = tmp_path / "run"
    args = ["lm", "train", "--preset", "cpu-tiny", "--steps", "4", "--out", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "checkpoint-00000004.pt: could not write it (basic_ios::clear: iostream error); is the disk full?" in err
    assert "free space on that disk, then run the same command again" in err and "Traceback" not in err
    assert not list(out.glob(".*cem-tmp*"))                      # the half-written temporary is gone
    assert main(args) == 0 and (out / "summary.json").is_file()   # space freed: the same command finishes the run
    assert [r["step"] for r in read_metrics(out)][-1] == 4
