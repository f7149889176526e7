"""The app's supervised LM runs: data choices, validation, one job at a time, stop, progress."""
import json
import sys
import time

import pytest

from cem_core.ui import jobs


def test_data_choices_are_only_the_configured_folder(board, tmp_path):
    assert board.data_choices() == ["demo", "slimpajama", "wiki"]
    for bad in ("../data/wiki", "/etc", "wiki/../..", "", ".."):
        with pytest.raises(ValueError, match="^data="):
            jobs.JobSpec(data=bad)
    for bad in ("empty", "missing", ".."):
        with pytest.raises(ValueError, match="^data="):
            board.data_folder(bad)
    with pytest.raises(ValueError, match="^data='empty' is invalid: no"):
        board.start(jobs.JobSpec(data="empty"))
    command = board.command(jobs.JobSpec(data="wiki"), tmp_path)
    assert command[command.index("--data") + 1] == str(tmp_path / "data" / "wiki")


def test_job_spec_round_trips_through_the_url(board):
    spec = jobs.JobSpec(preset="cpu-tiny", variants=("cem-attn", "llama"), data="wiki")
    query = spec.to_query()
    assert query == {"lm_preset": "cpu-tiny", "lm_variants": "cem-attn,llama", "lm_data": "wiki"}
    assert jobs.JobSpec.from_query(query) == spec
    with pytest.raises(ValueError, match="^variants="):
        jobs.JobSpec.from_query({"lm_variants": ",,"})


@pytest.mark.parametrize("kwargs,field", [(dict(preset="huge"), "preset"), (dict(variants=()), "variants"),
                                          (dict(variants=("llama", "gpt")), "variants"),
                                          (dict(variants=["llama"]), "variants")])
def test_bad_job_settings(board, kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field}="):
        jobs.JobSpec(**kwargs)


def test_one_job_at_a_time_and_stop(board, monkeypatch):
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    monkeypatch.setattr(jobs.JobBoard, "command", lambda self, spec, out: sleeper)
    job = board.start(jobs.JobSpec())
    assert board.current()["running"] and board.current()["pid"] == job["pid"]
    with pytest.raises(ValueError, match="already going"):
        board.start(jobs.JobSpec())
    board.stop()
    deadline = time.time() + 20
    while board.current()["running"] and time.time() < deadline:
        time.sleep(0.1)
    assert not board.current()["running"]
    board.start(jobs.JobSpec())                                          # a new one may start now
    board.stop()


def test_progress_reads_the_run_folder(board, monkeypatch):
    monkeypatch.setattr(jobs.JobBoard, "command", lambda self, spec, out: [sys.executable, "-c", "print('hi')"])
    job = board.start(jobs.JobSpec(variants=("llama",)))
    out = board.jobs_dir / job["out"].split("/")[-1]
    (out / "llama").mkdir()
    (out / "llama" / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in (
        {"config": {}}, {"step": 1, "loss": 5.0}, {"step": 2, "loss": 4.0, "val_ppl": 50.0})) + "\n")
    (out / "compare.json").write_text(json.dumps([{"variant": "llama", "params": 1, "tokens_per_s": 2.0,
                                                   "val_ppl": 50.0, "sample": "x"}]))
    state = jobs.progress(job)
    assert [r["loss"] for r in state["curves"]["llama"]] == [5.0, 4.0]
    assert state["table"][0]["val_ppl"] == 50.0
    deadline = time.time() + 10
    while "hi" not in jobs.progress(job)["log"] and time.time() < deadline:
        time.sleep(0.1)
    assert "hi" in jobs.progress(job)["log"]
