"""Language-model training: learning, exact resume after a kill, DDP equivalence, presets, errors."""
import json
import signal
import subprocess
import sys
import time
from dataclasses import replace

import pytest
import torch
from conftest import ROOT, child_env, free_port
from conftest import shard_corpus as corpus

from cem_core.__main__ import main
from cem_core.experiments.lm.run_folder import read_metrics
from cem_core.experiments.lm.train import train
from cem_core.experiments.lm.train_config import TRAIN_PRESETS, LMTrainConfig
from cem_core.nn.config import ModelShape
from cem_core.nn.model import VARIANT_OPTIONS, VARIANTS, LanguageModel

TINY = dict(shape=ModelShape(d_model=32, n_layers=1, n_heads=2, d_ff=64), seq_len=32, batch_size=8, eval_batches=2,
            sample_tokens=8)


@pytest.mark.slow
def test_short_run_lowers_validation_perplexity(tmp_path, one_thread):
    data = corpus(tmp_path)
    cfg = LMTrainConfig(variant="cem-full", steps=60, eval_every=10, ckpt_every=60, optim={"lr": 1e-2}, eval_T=(1, 3),
                        **TINY)
    summary = train(cfg, data, tmp_path / "run", progress=False).summary
    evals = [r for r in read_metrics(tmp_path / "run") if "val_ppl" in r]
    assert [r["step"] for r in evals] == [10, 20, 30, 40, 50, 60]
    assert evals[-1]["val_ppl"] < 0.5 * evals[0]["val_ppl"]
    assert summary["val_ppl"] == pytest.approx(evals[-1]["val_ppl"])
    assert set(summary["val_ppl_by_T"]) == {"1", "3"} and summary["params"] > 0
    assert (tmp_path / "run" / "summary.json").exists() and (tmp_path / "run" / "checkpoint-00000060.pt").exists()
    header = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert header["identity_hash"] == cfg.run_hash(data) and header["provenance"]["torch"] == torch.__version__


# One run of train() in a fresh process (to be killed, or under torchrun).
RUN_SCRIPT = """
import sys, torch
torch.set_num_threads(1)
from cem_core.experiments.lm.data_config import DataConfig
from cem_core.cli import exit_process
from cem_core.experiments.lm.train import train
from cem_core.experiments.lm.train_config import LMTrainConfig
from cem_core.nn.config import ModelShape
cfg = LMTrainConfig(**{cfg})
train(cfg, DataConfig(source="path", path={path!r}, validation_fraction=0.1), sys.argv[1], progress=False)
exit_process(0)                                      # as the command line ends (see exit_process)
"""


@pytest.mark.slow
def test_killed_run_resumes_with_exactly_the_same_loss_curve(tmp_path, one_thread):
    data = corpus(tmp_path)
    cfg = dict(variant="cem-attn", steps=40, eval_every=10, ckpt_every=10, optim={"lr": 1e-2}, seed=3, **TINY)
    script = tmp_path / "run.py"
    script.write_text(RUN_SCRIPT.format(cfg=repr(cfg), path=data.path))
    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, str(script), str(killed)], cwd=ROOT,
                            env=child_env())
    deadline = time.time() + 120
    while not (killed / "checkpoints.json").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)                                    # no chance to clean up
    proc.wait()
    newest = json.loads((killed / "checkpoints.json").read_text())[-1]
    step = torch.load(killed / newest["file"], weights_only=True)["step"]
    assert 10 <= step < 40, step                                        # killed part-way
    train(LMTrainConfig(**cfg), data, killed, progress=False)           # resume
    train(LMTrainConfig(**cfg), data, tmp_path / "whole", progress=False)
    resumed, whole = read_metrics(killed), read_metrics(tmp_path / "whole")
    assert [r["step"] for r in resumed] == list(range(1, 41))
    assert [r["loss"] for r in resumed] == [r["loss"] for r in whole]  # exactly
    assert [r.get("val_ppl") for r in resumed] == [r.get("val_ppl") for r in whole]


def test_resume_refuses_another_configuration(tmp_path, one_thread):
    data = corpus(tmp_path)
    cfg = LMTrainConfig(variant="llama", steps=2, eval_every=2, ckpt_every=2, sample_tokens=0,
                        **{k: v for k, v in TINY.items() if k != "sample_tokens"})
    train(cfg, data, tmp_path / "run", progress=False)
    with pytest.raises(ValueError, match="holds another run: config.lr: 0.003 there, 0.0001 now"):
        train(replace(cfg, optim=replace(cfg.optim, lr=1e-4)), data, tmp_path / "run", progress=False)


@pytest.mark.slow
def test_two_process_torchrun_matches_one_process(tmp_path, one_thread):
    """gloo, float64, one thread per process, 5 steps: the same global batch gives the same losses."""
    data = corpus(tmp_path)
    cfg = dict(variant="cem-full", steps=5, eval_every=5, ckpt_every=5, dtype="float64", data_shards=2,
               optim={"lr": 1e-2}, **TINY)
    script = tmp_path / "ddp.py"
    script.write_text(RUN_SCRIPT.format(cfg=repr(cfg), path=data.path))
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--nnodes", "1",
                          "--master_addr", "127.0.0.1", "--master_port", str(free_port()), str(script),
                          str(tmp_path / "ddp")], cwd=ROOT, env=child_env(),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    train(LMTrainConfig(**cfg), data, tmp_path / "single", progress=False)
    ddp, single = read_metrics(tmp_path / "ddp"), read_metrics(tmp_path / "single")
    assert len(ddp) == len(single) == 5
    for a, b in zip(ddp, single):
        assert abs(a["loss"] - b["loss"]) < 1e-8, (a["loss"], b["loss"])
    assert abs(ddp[-1]["val_ppl"] - single[-1]["val_ppl"]) < 1e-8
    header = json.loads((tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()[0])
    assert header["world_size"] == 2


def _closed_form_total(d, L, H, f, V, attention, mlp, cem):
    """Parameters written out by hand (independent of cem_core's own counting)."""
    precond = {"none": 0, "dlr": d + 2 * d * cem.rank, "psd": d + d * cem.rank}[cem.preconditioner]
    attn = (2 if attention == "cem" else 4) * d * d + d                 # projections + RMSNorm
    if attention == "cem":
        attn += {"none": 0, "per_head": H * d, "shared": d}[cem.diagonal] + precond
    ff = (2 if mlp == "cem" else 3) * d * f + d
    if mlp == "cem":
        ff += precond
    return V * d + L * (attn + ff) + d                                  # tied embedding, final norm


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["paper-86m", "paper-162m"])
def test_paper_presets_build_on_meta_with_documented_counts(preset):
    page = (ROOT / "docs" / "results-lm.md").read_text()
    m = TRAIN_PRESETS[preset]["shape"]
    kinds = {"llama": ("llama", "llama"), "cem-attn": ("cem", "llama"), "cem-mlp": ("llama", "cem"),
             "cem-full": ("cem", "cem")}
    for variant in VARIANTS:
        cfg = LMTrainConfig.from_preset(preset, variant=variant)
        with torch.device("meta"):
            model = LanguageModel(cfg.model_config(vocab_size=257))
        numel = sum(p.numel() for p in model.parameters())
        assert numel == _closed_form_total(m.d_model, m.n_layers, m.n_heads, m.d_ff, 257,
                                           *kinds[variant], VARIANT_OPTIONS[variant])
        assert f"{numel:,}" in page, f"docs/results-lm.md does not document {preset} {variant}: {numel:,}"


@pytest.mark.parametrize("kwargs,field", [
    (dict(variant="gpt"), "variant"), (dict(preset="huge"), "preset"), (dict(variant="llama", T=2), "T"),
    (dict(batch_size=10, data_shards=3), "batch_size"), (dict(tokenizer="bpe:10"), "tokenizer"),
    (dict(tokenizer="wordpiece"), "tokenizer"), (dict(dtype="int8"), "dtype"), (dict(steps=0), "steps"),
    (dict(optim=dict(warmup=1.5)), "warmup"), (dict(variant="llama", eval_T=(2,)), "eval_T"),
    (dict(shape=dict(d_model=30, n_heads=4)), "d_model"), (dict(shape=dict(activation="tanh")), "activation"),
    (dict(shape=dict(width=8)), "shape"),
])
def test_bad_settings_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field}="):
        LMTrainConfig(**kwargs)


@pytest.mark.slow
def test_cli_train_and_compare(tmp_path, capsys, one_thread):
    data = corpus(tmp_path)
    common = ["--data", data.path, "--steps", "3", "--batch-size", "4", "--seq-len", "16"]
    assert main(["lm", "train", "--variant", "cem-mlp", "--out", str(tmp_path / "one"), "--d-model", "64",
                 "--activation", "gelu", "--lr", "0.01", "--grad-clip", "0.5", *common]) == 0
    text = capsys.readouterr().out
    assert "validation perplexity" in text and "20 tokens/parameter" in text
    config = json.loads((tmp_path / "one" / "run.json").read_text())["identity"]["config"]   # the preset + flags
    assert (config["d_model"], config["n_layers"], config["activation"]) == (64, 2, "gelu")
    assert (config["lr"], config["grad_clip"], config["weight_decay"]) == (0.01, 0.5, 0.1)   # flags, then the preset
    assert main(["lm", "compare", "--variants", "llama", "cem-full", "--out", str(tmp_path / "cmp"),
                 "--json", str(tmp_path / "cmp.json"), *common]) == 0
    text = capsys.readouterr().out
    assert "llama" in text and "cem-full" in text and "val ppl" in text
    records = json.loads((tmp_path / "cmp.json").read_text())
    assert [r["variant"] for r in records] == ["llama", "cem-full"]
    assert all(r["params"] > 0 and r["tokens_per_s"] > 0 and r["val_ppl"] > 1 for r in records)
    assert records[1]["params"] < records[0]["params"]


@pytest.mark.slow
def test_cli_reports_no_network_clearly(tmp_path):
    """In a fresh interpreter with HF_HUB_OFFLINE set (the Hub libraries read it at import), so nothing
    waits on a network that is not there."""
    env = child_env(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    done = subprocess.run([sys.executable, "-m", "cem_core", "lm", "train", "--data", "slimpajama", "--steps", "1",
                           "--out", str(tmp_path / "x")], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "use local shards instead: --data PATH" in done.stderr and "Traceback" not in done.stderr


def test_bpe_tokenizer_is_trained_and_saved_with_the_run(tmp_path, one_thread):
    data = corpus(tmp_path)
    cfg = LMTrainConfig(variant="llama", tokenizer="bpe:300", steps=3, eval_every=3, ckpt_every=3,
                        **{k: v for k, v in TINY.items() if k != "sample_tokens"}, sample_tokens=4)
    summary = train(cfg, data, tmp_path / "run", progress=False).summary
    saved = tmp_path / "run" / "tokenizer.json"
    assert saved.exists()
    from cem_core.experiments.lm.tokenizer import load_tokenizer
    tok = load_tokenizer(saved)
    assert 257 < tok.vocab_size <= 300 and tok.decode(tok.encode("the cat sat")) == "the cat sat"
    assert summary["params"] == sum(p.numel() for p in LanguageModel(cfg.model_config(tok.vocab_size)).parameters())
