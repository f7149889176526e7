"""The app's supervised LM runs: data choices, validation, one job at a time, stop, progress."""
import json
import sys
import time

import pytest

from cem_core.ui import jobs


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    data = tmp_path / "data"
    (data / "wiki").mkdir(parents=True)
    (data / "wiki" / "a.jsonl").write_text(json.dumps({"text": "hello", "meta": {}}) + "\n")
    (data / "empty").mkdir()
    monkeypatch.setenv("CEM_LAB_DATA_DIR", str(data))
    monkeypatch.setattr(jobs, "JOBS_DIR", tmp_path / "jobs")
    return tmp_path


def test_data_choices_are_only_the_configured_folder(sandbox):
    assert jobs.data_choices() == ["demo", "slimpajama", "wiki"]
    for bad in ("empty", "../data/wiki", "/etc", "wiki/../.."):
        with pytest.raises(ValueError, match="^data="):
            jobs.JobSpec(data=bad)
    command = jobs.JobSpec(data="wiki").command(sandbox)
    assert command[command.index("--data") + 1] == str(sandbox / "data" / "wiki")


def test_job_spec_round_trips_through_the_url(sandbox):
    spec = jobs.JobSpec(preset="cpu-tiny", variants=("cem-attn", "llama"), data="wiki")
    query = spec.to_query()
    assert query == {"lm_preset": "cpu-tiny", "lm_variants": "cem-attn,llama", "lm_data": "wiki"}
    assert jobs.JobSpec.from_query(query) == spec
    with pytest.raises(ValueError, match="^variants="):
        jobs.JobSpec.from_query({"lm_variants": ",,"})


@pytest.mark.parametrize("kwargs,field", [(dict(preset="huge"), "preset"), (dict(variants=()), "variants"),
                                          (dict(variants=("llama", "gpt")), "variants"),
                                          (dict(variants=["llama"]), "variants")])
def test_bad_job_settings(sandbox, kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field}="):
        jobs.JobSpec(**kwargs)


def test_one_job_at_a_time_and_stop(sandbox, monkeypatch):
    monkeypatch.setattr(jobs.JobSpec, "command", lambda self, out: [sys.executable, "-c", "import time; time.sleep(60)"])
    job = jobs.start(jobs.JobSpec())
    assert jobs.current()["running"] and jobs.current()["pid"] == job["pid"]
    with pytest.raises(ValueError, match="already going"):
        jobs.start(jobs.JobSpec())
    jobs.stop()
    deadline = time.time() + 20
    while jobs.current()["running"] and time.time() < deadline:
        time.sleep(0.1)
    assert not jobs.current()["running"]
    jobs.start(jobs.JobSpec())                                          # a new one may start now
    jobs.stop()


def test_progress_reads_the_run_folder(sandbox, monkeypatch):
    monkeypatch.setattr(jobs.JobSpec, "command", lambda self, out: [sys.executable, "-c", "print('hi')"])
    job = jobs.start(jobs.JobSpec(variants=("llama",)))
    out = sandbox / "jobs" / job["out"].split("/")[-1]
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
