"""The trained models (models/): their cards and files, the per-step readout against the forward pass, the
inspect commands, the prose corpus they train on, and `make models` as resumable and idempotent."""
import json
import re
import shutil
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
from conftest import ROOT, child_env

from cem_core.experiments import checkpoints, models
from cem_core.experiments.gp import inspect as gp_inspect
from cem_core.experiments.gp import trained as gp_trained
from cem_core.experiments.gp.model import GPTransformer
from cem_core.experiments.lm import inspect as lm_inspect
from cem_core.experiments.lm import trained as lm_trained
from cem_core.experiments.lm.data_config import DataConfig
from cem_core.experiments.lm.sources import iter_documents
from cem_core.experiments.lm.stdlib_corpus import prose_corpus
from cem_core.experiments.lm.tokenizer import ByteTokenizer
from cem_core.nn.config import CEMOptions
from cem_core.nn.model import LanguageModel, ModelConfig, recursion_depth
from cem_core.nn.readout import read_output, read_steps

MODELS = ROOT / "models"
GP_NAMES, LM_NAMES = tuple(gp_trained.GP_MODELS), tuple(lm_trained.LM_MODELS)
READOUT_TOL = 1e-6          # the readout at the trained T against the forward pass, and its energies (float64)
METRIC_RTOL = 1e-4          # a card's metric reproduced from the committed weights (float32 sums in another order)


# -- the per-step readout (random weights, float64) ------------------------------------------------------------

VARIANTS = [("llama", None), ("cem-attn", CEMOptions(T=3)), ("cem-mlp", CEMOptions(T=2)),
            ("cem-full", None), ("cem-full", CEMOptions(T=2, block="joint")),
            ("cem-attn", CEMOptions(T=2, diagonal="shared", preconditioner="dlr", anchor=0.5))]


def _lm(variant, cem, seed=0):
    torch.manual_seed(seed)
    return LanguageModel(ModelConfig.variant(variant, cem=cem, vocab_size=40, max_seq_len=12, d_model=32,
                                             n_heads=4, d_ff=48)).double().eval()


@pytest.mark.parametrize("variant,cem", VARIANTS)
def test_the_readout_at_the_trained_T_is_the_forward_pass_and_its_energies_the_layers_own(variant, cem):
    model = _lm(variant, cem)
    idx = torch.randint(0, 40, (2, 9), generator=torch.Generator().manual_seed(1))
    forward = model(idx)
    assert (read_output(model, (idx,)) - forward).abs().max() <= READOUT_TOL
    readouts = read_steps(model, (idx,))
    assert len(readouts) == len(model.cem_layers())
    layers = dict(model.sublayers())
    h = model.embed_inputs(idx)
    for steps in readouts:
        assert steps.T == steps.trained_T and steps.outputs.shape == (steps.T + 1, *forward.shape)
        assert (steps.outputs[-1] - forward).abs().max() <= READOUT_TOL * forward.abs().max()
        layer = layers[steps.name]
        entering = h
        for _, earlier in list(model.sublayers())[:steps.index]:
            entering = earlier(entering)
        trace = layer.trace(entering)
        for t in range(steps.T + 1):                                   # E(x^(t) | c) from the layer's own energy
            own = layer.energy(trace.iterates[t], entering)
            assert (steps.energies[t] - own).abs().max() <= READOUT_TOL * own.abs().max().clamp_min(1)
        assert torch.allclose(steps.update_norms, trace.update_norms, atol=READOUT_TOL)


def test_reading_past_the_trained_T_continues_the_steps_and_per_step_sizes_refuse_it():
    model = _lm("cem-attn", CEMOptions(T=2))
    idx = torch.randint(0, 40, (1, 7), generator=torch.Generator().manual_seed(2))
    (first, second) = read_steps(model, (idx,), T_test=6)
    assert first.T == 6 and first.trained_T == 2 and first.weights.shape == (6, 1, 4, 7, 7)
    with recursion_depth(model.blocks[0], 6):                          # layer 1 at 6 steps, layer 2 as trained
        assert (first.outputs[-1] - model(idx)).abs().max() <= READOUT_TOL
    assert all(layer.config.T == 2 for layer in model.cem_layers())   # the trained depths come back
    per_step = _lm("cem-attn", CEMOptions(T=2, eta_mode="per_step"))
    with pytest.raises(ValueError, match="per_step"):
        read_steps(per_step, (idx,), T_test=3)


def test_a_gp_model_stopped_after_step_t_equals_the_model_run_with_t_steps():
    spec = gp_trained.GP_MODELS["gp-block-T8"].spec
    torch.manual_seed(0)
    model = GPTransformer(spec.task, spec.model).double().eval()
    xs = torch.rand(3, 10, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    ys = torch.randn(3, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    (steps,) = read_steps(model, (xs, ys), T_test=12)
    for t in (1, 5, 8, 12):
        with recursion_depth(model, t):
            assert (steps.outputs[t] - model(xs, ys)).abs().max() <= READOUT_TOL


# -- the prose corpus ----------------------------------------------------------------------------------------

@pytest.mark.slow                      # reads the whole prose corpus twice
def test_the_prose_corpus_is_english_prose_without_interactive_examples_and_is_deterministic():
    docs = prose_corpus(1 << 30)
    text = "\n".join(docs)
    assert 1_500_000 < len(text.encode()) < 4_000_000                  # about 2.2 MB on CPython 3.11
    assert not any(line.lstrip().startswith(">>>") for line in text.splitlines())
    words = text.split()
    common = {"the", "of", "a", "is", "to", "and", "in"}
    assert sum(w.lower() in common for w in words) / len(words) > 0.12   # English function words, as prose has
    assert prose_corpus.__wrapped__(1 << 30) == docs                    # rebuilt from the installation: the same
    validation = list(iter_documents(lm_trained.PROSE, "validation"))
    train = list(iter_documents(lm_trained.PROSE, "train"))
    assert validation and not set(validation) & set(train) and len(validation) + len(train) == len(docs)
    assert DataConfig(source="prose", demo_max_bytes=1000).source == "prose"
    assert sum(len(d.encode()) for d in prose_corpus(1000)) == 1000


# -- files: cards, weights, refusals --------------------------------------------------------------------------

def _copy(name, tmp_path):
    shutil.copytree(MODELS / name, tmp_path / name)
    return tmp_path


@pytest.mark.parametrize("name", GP_NAMES + LM_NAMES)
def test_every_committed_model_is_current_with_a_complete_card(name):
    card = json.loads((MODELS / name / checkpoints.CARD).read_text())
    assert checkpoints.card_problem(MODELS / name) is None
    assert card["config_hash"] == models.config_hash(name) and checkpoints.is_current(MODELS, name, card["config_hash"])
    assert card["command"] == checkpoints.command(name) and card["seed"] == checkpoints.TRAINED_SEED
    assert card["provenance"]["git_commit"] != "unknown" and card["train_seconds"] > 0
    measured = models.test_time(name, MODELS)
    assert measured["weights_sha256"] == card["weights_sha256"]


def test_the_models_fit_in_ten_megabytes_and_make_models_has_nothing_to_do():
    total = sum(f.stat().st_size for f in MODELS.rglob("*") if f.is_file())
    assert 0 < total <= checkpoints.MAX_TOTAL_BYTES
    assert sorted(p.name for p in MODELS.iterdir() if p.is_dir()) == sorted(models.ORDER)
    assert models.stale_models(MODELS) == [] and models.unmeasured(MODELS) == []
    lines = []
    assert models.train_stale(MODELS, report=lines.append) == [] and lines == ["0 of 8 models to train"]


def test_a_damaged_missing_or_foreign_model_is_refused_with_what_to_do(tmp_path):
    root = _copy("gp-cem-T1", tmp_path)
    model, task = gp_trained.load_gp_model("gp-cem-T1", root)
    assert isinstance(model, GPTransformer) and not model.training and task.n_points == 32
    with pytest.raises(ValueError, match="unknown; the trained GP models are gp-llama"):
        gp_trained.load_gp_model("gp-cem-T2", root)
    with pytest.raises(ValueError, match="card.json is missing; retrain it with `python -m cem_core models train"):
        gp_trained.load_gp_model("gp-llama", root)
    weights = root / "gp-cem-T1" / checkpoints.WEIGHTS_FILE
    data = bytearray(weights.read_bytes())
    data[-20] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="damaged .its sha256 differs"):
        gp_trained.load_gp_model("gp-cem-T1", root)
    assert models.stale_models(root, ["gp-cem-T1"]) == ["gp-cem-T1"]
    weights.unlink()
    with pytest.raises(ValueError, match="weights.pt is missing"):
        gp_trained.load_gp_model("gp-cem-T1", root)
    card = root / "gp-cem-T1" / checkpoints.CARD
    card.write_text(card.read_text()[:50])
    with pytest.raises(ValueError, match="card.json is damaged"):
        gp_trained.load_gp_model("gp-cem-T1", root)
    root = _copy("lm-llama", tmp_path)
    card = json.loads((root / "lm-llama" / checkpoints.CARD).read_text())
    (root / "lm-llama" / checkpoints.CARD).write_text(json.dumps(card | {"config_hash": "0123456789abcdef"}))
    with pytest.raises(ValueError, match="trained under another configuration .hash 0123456789abcdef"):
        lm_trained.load_lm_model("lm-llama", root)
    assert models.stale_models(root, ["lm-llama"]) == ["lm-llama"]


# -- the committed models reproduce their cards ----------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("name", GP_NAMES)
def test_a_committed_gp_model_reproduces_its_card_and_its_readout_is_its_forward_pass(name):
    model, task = gp_trained.load_gp_model(name, MODELS)
    card = gp_trained.gp_card(name, MODELS)
    metric = gp_trained.held_out_ratio(model, gp_trained.GP_MODELS[name].spec)
    assert metric["value"] == pytest.approx(card["metric"]["value"], rel=METRIC_RTOL)
    model = model.double()
    xs = torch.rand(4, 32, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(3)) * 2 - 1
    ys = torch.randn(4, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    for steps in read_steps(model, (xs, ys)):
        assert (steps.outputs[-1] - model(xs, ys)).abs().max() <= READOUT_TOL


@pytest.mark.slow
@pytest.mark.parametrize("name", LM_NAMES)
def test_a_committed_language_model_reproduces_its_card_and_its_readout_is_its_forward_pass(name):
    model, tokenizer = lm_trained.load_lm_model(name, MODELS)
    card = lm_trained.lm_card(name, MODELS)
    ppl = lm_trained.validation_ppl(model, lm_trained.LM_MODELS[name].config)
    assert ppl == pytest.approx(card["metric"]["value"], rel=METRIC_RTOL)
    assert card["data"].startswith("English prose corpus") and "not SlimPajama" in card["data"]
    model = model.double()
    idx = torch.tensor([tokenizer.encode("The value of the expression is returned.")])
    for steps in read_steps(model, (idx,)):
        assert (steps.outputs[-1] - model(idx)).abs().max() <= READOUT_TOL * model(idx).abs().max()


# -- inspecting -------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_gp_inspect_steps_against_the_posterior():
    model, task = gp_trained.load_gp_model("gp-block-T8", MODELS)
    out = gp_inspect.inspect_function(model, task, seed=3, context=8, T_test=16)
    (layer,) = out["layers"]
    assert layer["T"] == 16 and len(layer["prediction"]) == 17 and len(layer["prediction"][0]) == gp_inspect.GRID
    assert len(layer["energies"]) == 17 and len(layer["energies"][0]) == 9 and len(layer["attention"]) == 16
    with recursion_depth(model, 16):
        final = model.predict_at(torch.tensor(out["context_x"])[:, None].float(),
                                 torch.tensor(out["context_y"]).float(), torch.tensor(out["grid"])[:, None].float())
    assert torch.allclose(torch.tensor(layer["prediction"][-1], dtype=torch.float64), final.double(), atol=1e-5)
    with pytest.raises(ValueError, match="context"):
        gp_inspect.inspect_function(model, task, seed=3, context=32)
    with pytest.raises(ValueError, match="T_test"):
        gp_inspect.inspect_function(model, task, seed=3, T_test=33)
    assert gp_inspect.extra_steps(1.0, 0.9) == "help" and gp_inspect.extra_steps(1.0, 1.01) == "stall"
    assert gp_inspect.extra_steps(1.0, 1.1) == "hurt" and gp_inspect.extra_steps(1.0, float("nan")) == "hurt"
    nan = {"n": 256, "mean": float("nan"), "se": float("nan"), "low": float("nan"), "high": float("nan")}
    study = {"T": [8, 9], "trained_T": 8, "functions": 256, "vs_trained": [nan, nan]}
    assert "cannot be computed" in gp_inspect.scaling_reading(study, 9)


@pytest.mark.slow
def test_lm_inspect_is_a_logit_lens_along_the_steps_and_refuses_bad_text():
    model, tokenizer = lm_trained.load_lm_model("lm-cem-attn-T2", MODELS)
    out = lm_inspect.inspect_text(model, tokenizer, "The function returns None.", T_test=4)
    assert out["tokens"][:4] == ["T", "h", "e", "␣"] and out["targets"][0] == "h"
    assert [layer["name"] for layer in out["layers"]] == ["block 1 · attention", "block 2 · attention"]
    for layer in out["layers"]:
        assert len(layer["top"]) == 5 and len(layer["top"][0]) == len(out["tokens"]) == 25
        assert all(len(top) == 5 and top[0][1] >= top[-1][1] for top in layer["top"][-1])
    with recursion_depth(model.blocks[0], 4), torch.no_grad():
        assert out["layers"][0]["mean_loss"][-1] == pytest.approx(float(torch.nn.functional.cross_entropy(
            model(torch.tensor([tokenizer.encode(out["text"])[:-1]]))[0],
            torch.tensor(tokenizer.encode(out["text"])[1:]))), rel=1e-5)
    for bad, message in (("", "empty"), ("   ", "empty"), ("x", "too short"), ("x" * 130, "too long")):
        with pytest.raises(ValueError, match=message):
            lm_inspect.inspect_text(model, tokenizer, bad)
    llama, _ = lm_trained.load_lm_model("lm-llama", MODELS)
    out = lm_inspect.inspect_text(llama, ByteTokenizer(), "The function returns None.")
    assert out["layers"] == [] and out["T_test"] is None and len(out["final"]["top"]) == 25


@pytest.mark.slow
def test_the_inspect_commands_write_their_json_and_refuse_clearly(tmp_path):
    def cli(*args):                            # from a folder other than the repository's root, as a user might
        return subprocess.run([sys.executable, "-m", "cem_core", *args], capture_output=True, text=True,
                              cwd=tmp_path, timeout=120, env=child_env())

    done = cli("gp", "inspect", "--model", "gp-cem-T8", "--seed", "5", "--context", "6",
               "--json", str(tmp_path / "g.json"))
    assert done.returncode == 0, done.stderr
    out = json.loads((tmp_path / "g.json").read_text())
    assert out["model"] == "gp-cem-T8" and out["context"] == 6 and len(out["layers"][0]["prediction"]) == 9
    first = out["layers"][0]
    assert (f"the model's prediction (at its trained T = 8) is {out['rmse_to_posterior']:.4f} RMSE from the posterior "
            f"mean" in done.stdout)
    assert out["rmse_to_posterior"] == pytest.approx(first["rmse_to_posterior"][out["trained_T"]], rel=1e-5)
    done = cli("lm", "inspect", "--model", "lm-cem-full", "--text", "A list of names.",
               "--json", str(tmp_path / "l.json"))
    assert done.returncode == 0, done.stderr
    assert len(json.loads((tmp_path / "l.json").read_text())["layers"]) == 4
    for args, message in ((("gp", "inspect", "--model", "gp-nope", "--seed", "1", "--json", str(tmp_path / "x.json")),
                           "unknown"),
                          (("lm", "inspect", "--model", "lm-llama", "--text", "", "--json", str(tmp_path / "y.json")),
                           "empty"),
                          (("gp", "inspect", "--model", "gp-llama", "--seed", "1", "--json", str(tmp_path / "g.json")),
                           "the file exists")):
        done = cli(*args)
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


# -- make models: resumable and idempotent ---------------------------------------------------------------------

@pytest.mark.slow
def test_make_models_trains_only_what_is_missing_or_stale_and_a_finished_model_is_kept(tmp_path, monkeypatch):
    """A short stand-in for one GP model (its spec at 3 steps): trained once, then kept; its weights damaged, it
    is trained again; the other seven, copied whole, are never touched."""
    for name in models.ORDER:
        if name != "gp-cem-T1":
            _copy(name, tmp_path)
    spec = gp_trained.GP_MODELS["gp-cem-T1"].spec
    short = replace(spec, train=replace(spec.train, steps=3, eval_size=256))
    monkeypatch.setattr(gp_trained.TrainedGP, "spec",
                        property(lambda self: short if self.name == "gp-cem-T1" else _real(self)))
    lines = []
    cards = models.train_stale(tmp_path, jobs=1, report=lines.append)
    assert [c["name"] for c in cards] == ["gp-cem-T1"] and lines[0] == "1 of 8 models to train: gp-cem-T1"
    assert models.test_time("gp-cem-T1", tmp_path)["T"] == [1, 2, 3, 4]
    before = (tmp_path / "gp-cem-T1" / checkpoints.CARD).read_text()
    assert models.train_stale(tmp_path, jobs=1, report=lines.append) == []
    assert (tmp_path / "gp-cem-T1" / checkpoints.CARD).read_text() == before


def _real(entry):
    (spec,) = [s for s in gp_trained.study_runs() if s.group == entry.group and s.model.attention == entry.attention
               and s.model.cem.T == entry.T and s.train.seed == checkpoints.TRAINED_SEED]
    return spec


def test_the_findings_document_is_generated_from_the_measurements():
    """docs/trained-models.md's tables are trained_findings.findings_markdown of the committed models: the words
    around them can only quote what was measured."""
    from cem_core.experiments import trained_findings

    document = (ROOT / "docs" / "trained-models.md").read_text()
    assert trained_findings.findings_section(document) == trained_findings.findings_markdown(MODELS), (
        "docs/trained-models.md differs from the measurements: paste trained_findings.findings_markdown() between "
        "its markers")


def test_the_trained_models_are_found_from_any_folder_or_where_cem_lab_models_says(tmp_path):
    """`models list` run from an unrelated folder finds the committed models (from the package's location); with
    CEM_LAB_MODELS_DIR naming an empty folder it finds none there, and says so."""
    def listed(**env):
        done = subprocess.run([sys.executable, "-m", "cem_core", "models", "list"], capture_output=True, text=True,
                              cwd=tmp_path, timeout=120, env=child_env(**env))
        assert done.returncode == 0, done.stderr
        return done.stdout
    assert listed().count("; current") == 8
    (tmp_path / "empty").mkdir()
    elsewhere = listed(CEM_LAB_MODELS_DIR=str(tmp_path / "empty"))
    assert "; current" not in elsewhere and elsewhere.count("not trained") == 8


def test_a_learners_own_points_are_read_as_the_same_points_of_a_drawn_function():
    """gp inspect with points: the first 6 points of function 3, typed as "x:y,..." (repr, so exact), give the same
    posterior and the same prediction after every step as the function itself with 6 points seen (to 1e-12), with
    no truth to compare against; bad points are refused with what is wrong."""
    model, task = gp_trained.load_gp_model("gp-block-T8")
    drawn = gp_inspect.inspect_function(model, task, 3, context=6, T_test=12)
    text = ",".join(f"{x!r}:{y!r}" for x, y in zip(drawn["context_x"], drawn["context_y"]))
    own = gp_inspect.inspect_function(model, task, None, T_test=12, points=gp_inspect.parse_points(text, task))
    assert own["context"] == 6 and own["seed"] is None and own["truth"] is None and own["rmse_to_truth"] is None
    for key in ("posterior_mean", "posterior_sd", "prediction", "grid"):
        assert torch.allclose(torch.tensor(own[key]), torch.tensor(drawn[key]), rtol=1e-12, atol=1e-12), key
    for a, b in zip(own["layers"], drawn["layers"]):
        assert torch.allclose(torch.tensor(a["prediction"]), torch.tensor(b["prediction"]), rtol=1e-12, atol=1e-12)
        assert a["rmse_to_posterior"] == pytest.approx(b["rmse_to_posterior"], rel=1e-12)
    assert gp_inspect.parse_points(" ", task) == [] and gp_inspect.parse_points("0.5:1e-3", task) == [(0.5, 0.001)]
    for text, words in (("1.5:0", "outside the box [-1, 1]"), ("0.1:x", "is not a point x:y of two numbers"),
                        ("0.1", "is not a point x:y"), ("nan:1", "is not a point"),
                        (",".join(f"{k / 40}:0" for k in range(32)), "32 points, and the model reads at most 31")):
        with pytest.raises(ValueError, match=re.escape(words)):
            gp_inspect.parse_points(text, task)
