"""`lm sweep`: the eleven variants on the same tokens, resumable, one sweep per folder, and the claims
table under its fixed verdict rule (docs/design.md#55-the-language-model-sweep)."""
import json
import math
import shutil

import pytest
from conftest import ROOT, page_tables, row_values, run_page, shard_corpus

from cem_core.__main__ import main
from cem_core.experiments import verdicts
from cem_core.experiments.integrity import json_hash
from cem_core.experiments.lm import presets, rates, report, rules, runner, variants
from cem_core.experiments.lm.data_config import DataConfig
from cem_core.experiments.lm.sources import content_sha256
from cem_core.experiments.sweep import SWEEP_MANIFEST
from cem_core.nn.model import LanguageModel, ModelConfig

QUICK_DATA = presets.default_data("quick")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """The quick preset, run once in this process (22 runs of a few steps)."""
    out = tmp_path_factory.mktemp("lm-quick")
    return out, runner.run_sweep(out, "quick", jobs=1)


@pytest.mark.slow
def test_quick_sweep_trains_every_variant_and_seed_on_the_same_budget(quick):
    out, records = quick
    preset = presets.SWEEP_PRESETS["quick"]
    assert [(r["name"], r["seed"]) for r in records] == [(n, s) for n in variants.SWEPT for s in preset.seeds]
    assert len({r["tokens"] for r in records}) == 1 and len({r["lr"] for r in records}) == 1
    assert all(math.isfinite(r["val_ppl"]) and r["val_curve"] for r in records)
    two = [r for r in records if r["name"] in ("attn T=2", "mlp T=2", "cem-full")]
    assert all(set(r["val_ppl_by_T"]) == {"1", "2", "4"} for r in two)
    assert runner.LM_SWEEP.load(out / "results.json") == records
    manifest = json.loads((out / SWEEP_MANIFEST).read_text())
    assert manifest["verdict_rule"] == rules.VERDICT_RULE and manifest["data_sha256"]


@pytest.mark.slow
def test_a_finished_sweep_trains_nothing_again(quick):
    out, records = quick
    todo = []
    again = runner.run_sweep(out, "quick", jobs=1, on_start=todo.extend)
    assert todo == [] and again == records


def test_the_budget_is_twenty_tokens_per_llama_parameter():
    """Counted on the built model, not from the closed form the sweep uses."""
    p = presets.SWEEP_PRESETS["default"]
    llama = LanguageModel(ModelConfig.variant("llama", shape=p.shape, vocab_size=257, max_seq_len=p.seq_len))
    params = sum(t.numel() for t in llama.parameters())
    assert presets.steps_for(p) == math.ceil(20 * params / (p.batch_size * p.seq_len))
    specs = presets.preset_runs("default")
    assert len(specs) == 3 * len(variants.SWEPT) == 33 and len({s.config.steps for s in specs}) == 1
    assert {s.config.optim.lr for s in specs} == {presets.DEFAULT_LR}


@pytest.mark.parametrize("change, message", [
    (lambda out: runner.run_sweep(out, "probe", jobs=1), "another sweep"),
    (lambda out: runner.run_sweep(out, "quick", DataConfig(source="demo", demo_max_bytes=100_000), jobs=1),
     "another sweep"),
])
@pytest.mark.slow
def test_another_sweep_or_data_source_is_refused(quick, change, message):
    out, _ = quick
    with pytest.raises(ValueError, match=message):
        change(out)


@pytest.mark.slow
def test_edited_records_and_stray_files_are_refused(quick, tmp_path):
    out, records = quick
    for name, edit, message in (("seed", {"seed": 7}, "does not match"), ("hash", {"hash": "0" * 64}, "not the hash"),
                                ("copy", None, "appears twice")):
        folder = tmp_path / name
        folder.mkdir()
        damaged = [records[0], records[0]] if edit is None else [records[0] | edit]
        (folder / "results.json").write_text(json.dumps(damaged))
        with pytest.raises(ValueError, match=message):
            runner.run_sweep(folder, "quick", jobs=1)
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not an LM sweep's"):
        runner.run_sweep(stray, "quick", jobs=1)


@pytest.mark.parametrize("manifest, message", [("{not json", "is not valid JSON"), ("[1]", "is not a sweep manifest")])
def test_a_damaged_manifest_is_refused_with_its_path(tmp_path, manifest, message):
    (tmp_path / SWEEP_MANIFEST).write_text(manifest)
    with pytest.raises(ValueError, match=message) as refused:
        runner.run_sweep(tmp_path, "quick", None)
    assert str(tmp_path / SWEEP_MANIFEST) in str(refused.value)


@pytest.mark.slow
def test_a_diverged_run_is_recorded_and_contradicts_stable_training(tmp_path, monkeypatch):
    real = runner.train

    def diverge_cem_full(cfg, data, out, progress=False):
        if cfg.variant == "cem-full":
            raise FloatingPointError("loss became nan")
        return real(cfg, data, out, progress=progress)

    monkeypatch.setattr(runner, "train", diverge_cem_full)
    records = runner.run_sweep(tmp_path, "quick", jobs=1)
    full = [r for r in records if r["name"] == "cem-full"]
    assert all(r["diverged"] and math.isnan(r["val_ppl"]) for r in full)
    assert report.claims(records)[7]["verdict"] == "contradicted"


@pytest.mark.slow
def test_local_slimpajama_shards_through_the_command_line(tmp_path, capsys):
    """--data PATH trains on local SlimPajama-format shards; the manifest names them, and the demo corpus
    is then refused in that folder."""
    data = shard_corpus(tmp_path)
    out = tmp_path / "sweep"
    assert main(["lm", "sweep", "--preset", "quick", "--data", data.path, "--out", str(out), "--jobs", "1"]) == 0
    manifest = json.loads((out / SWEEP_MANIFEST).read_text())
    assert manifest["data"]["source"] == "path" and manifest["data_sha256"] == content_sha256(data)   # the shards
    assert "local SlimPajama-format shards" in manifest["data_label"]
    assert len(runner.LM_SWEEP.load(out / "results.json")) == 2 * len(variants.SWEPT)
    capsys.readouterr()
    assert main(["lm", "sweep", "--preset", "quick", "--out", str(out), "--jobs", "1"]) == 2
    assert "data.source" in capsys.readouterr().err


# -- the verdict rule, on hand-made records -----------------------------------------------------------


def _records(ppl: dict[str, list[float]]) -> list[dict]:
    return [{"name": name, "seed": seed, "val_ppl": value, "diverged": False, "lr": 3e-3}
            for name, values in ppl.items() for seed, value in enumerate(values)]


@pytest.mark.parametrize("kind, a, b, expected", [
    ("improves", [9.0, 9.1, 9.0], [10.0, 10.1, 10.05], "supported"),       # m = -1.02, se 0.02
    ("improves", [10.5, 10.6, 10.55], [10.0, 10.1, 10.05], "contradicted"),
    ("improves", [9.0, 11.0, 10.0], [10.0, 10.1, 10.05], "inconclusive"),    # se 0.58 > |m| / 2
    ("comparable", [10.1, 10.2, 10.15], [10.0, 10.1, 10.05], "supported"),  # +1% < 2%
    ("comparable", [9.0, 9.1, 9.0], [10.0, 10.1, 10.05], "supported"),      # better counts
    ("comparable", [10.6, 10.7, 10.65], [10.0, 10.1, 10.05], "contradicted"),  # +6%
    ("comparable", [10.0, 10.8, 10.4], [10.0, 10.1, 10.05], "inconclusive"),   # +3.5% ± 2.3%
    ("marginal", [9.95, 10.05, 10.0], [10.0, 10.1, 10.05], "supported"),
    ("marginal", [9.0, 9.1, 9.0], [10.0, 10.1, 10.05], "contradicted"),     # a 10% gain is not marginal
])
def test_verdicts_follow_the_stated_rule(kind, a, b, expected):
    d = report.variant_difference(_records({"A": a, "B": b}), "A", "B")
    assert d["seeds"] == 3 and d["mean"] == pytest.approx(sum(a) / 3 - sum(b) / 3)
    assert verdicts.verdict(kind, d, rules.TOLERANCE) == expected


def test_the_probe_rule_picks_the_learning_rate_that_suits_every_variant():
    """lr 1e-2 is best for one variant but 30% worse for the other; 3e-3 is within 5% of both."""
    records = [{"name": n, "lr": lr, "val_ppl": p, "diverged": False, "seed": 0}
               for n, lr, p in [("llama", 1e-3, 10.0), ("llama", 3e-3, 10.5), ("llama", 1e-2, 13.0),
                                ("cem", 1e-3, 12.0), ("cem", 3e-3, 10.4), ("cem", 1e-2, 10.0)]]
    assert rates.choose_lr(records) == 3e-3
    records[-1]["diverged"] = True
    assert rates.choose_lr(records) == 3e-3


@pytest.mark.slow
def test_lm_sweep_command_prints_the_claims_table(quick, capsys):
    out, _ = quick
    assert main(["lm", "sweep", "--preset", "quick", "--out", str(out), "--jobs", "1"]) == 0
    text = capsys.readouterr().out
    assert "0 to run" in text and text.count("| **") == len(report.CLAIMS) == 10 and "verdict rule" in text
    assert "not SlimPajama" in text
    assert main(["lm", "sweep", "--preset", "probe", "--out", str(out)]) == 2
    assert "another sweep" in capsys.readouterr().err


@pytest.mark.slow
def test_a_sweep_that_grew_trains_only_its_new_runs_and_another_sweep_is_still_refused(quick, tmp_path):
    """A folder of the same sweep from before two variants were added (its manifest lists a subset of the
    runs) is taken up: the new runs train, the old are kept, the manifest lists them all. A manifest with a
    run the preset does not have is another sweep's."""
    source, records = quick
    out = tmp_path / "grown"
    shutil.copytree(source, out, ignore=shutil.ignore_patterns("runs"))
    new = [s for s in presets.preset_runs("quick") if s.name in ("attn T=2, diag shared, distance", "cem-full, joint")]
    new_hashes = {json_hash(s.config.identity(QUICK_DATA)) for s in new}
    manifest = json.loads((out / SWEEP_MANIFEST).read_text())
    old = dict(manifest, runs=[h for h in manifest["runs"] if h not in new_hashes])
    (out / SWEEP_MANIFEST).write_text(json.dumps(old))
    runner.LM_SWEEP.save(out, [r for r in records if r["hash"] not in new_hashes])
    trained = []
    grown = runner.run_sweep(out, "quick", jobs=1, on_start=trained.extend)
    assert {json_hash(s.config.identity(QUICK_DATA)) for s in trained} == new_hashes and len(trained) == 4
    assert [r["hash"] for r in grown] == [r["hash"] for r in records]
    assert json.loads((out / SWEEP_MANIFEST).read_text())["runs"] == manifest["runs"]
    (out / SWEEP_MANIFEST).write_text(json.dumps(dict(manifest, runs=manifest["runs"] + ["f" * 64])))
    with pytest.raises(ValueError, match="holds another sweep"):
        runner.run_sweep(out, "quick", jobs=1)


# -- the committed sweep ------------------------------------------------------------------------------


def test_committed_sweep_matches_the_current_configuration():
    """results/lm-default holds all 33 runs of the default preset as it is configured now, under the
    verdict rule stated now; the probe's rule picks the learning rate the default preset uses."""
    records = runner.LM_SWEEP.load(ROOT / presets.COMMITTED_SWEEP / "results.json")
    missing, extra = runner.stale_runs(records, "default")
    assert not missing and not extra, f"{len(missing)} runs missing, {len(extra)} stale: rerun `make lm-sweep`"
    assert len(records) == 33 and all(r["provenance"]["git_commit"] for r in records)
    manifest = json.loads((ROOT / presets.COMMITTED_SWEEP / SWEEP_MANIFEST).read_text())
    assert manifest["verdict_rule"] == rules.VERDICT_RULE and manifest["tolerance"] == rules.TOLERANCE
    probe = runner.LM_SWEEP.load(ROOT / presets.COMMITTED_PROBE / "results.json")
    assert runner.stale_runs(probe, "probe") == (set(), set())
    assert rates.choose_lr(probe) == presets.DEFAULT_LR


@pytest.mark.slow                      # a whole app page
def test_the_app_and_the_docs_show_the_committed_sweep():
    records = runner.LM_SWEEP.load(ROOT / presets.COMMITTED_SWEEP / "results.json")
    _, frames = page_tables("lm")
    assert frames[0] == report.variant_rows(records)
    assert row_values(report.claim_rows(records)) in [row_values(f) for f in frames]
    page = (ROOT / "docs" / "results-lm.md").read_text()
    assert report.markdown_tables(records) in page and report.reading_summary(records) in page
    at = run_page("lm")
    assert any(report.reading_summary(records) in c.value for c in at.caption)
    notebook = (ROOT / "notebooks" / "05_what_the_evidence_says.ipynb").read_text()
    assert json.dumps(report.reading_summary(records))[1:-1] in notebook                 # its committed output


def test_the_t_based_reading_of_the_claims():
    """The second reading of the committed claims: a 95% t interval (4.30 se at 3 seeds, scipy's quantile as the
    yardstick) moves claims 3 and 4 (t = 3.3 and 2.2 under the recorded 2 se) to inconclusive, and claim 6, whose
    preconditioner helps more than marginally, counts in CEM's favour, not against it."""
    from scipy import stats

    assert abs(verdicts.t_multiplier(3) - stats.t.ppf(0.975, 2)) < 1e-9
    assert abs(verdicts.coverage(2.0, 3) - (2 * stats.t.cdf(2.0, 2) - 1)) < 1e-12
    for dof in (1, 2, 4, 9, 29):
        for x in (-7.0, -1.3, 0.0, 0.4, 2.5, 40.0):
            assert abs(verdicts.t_cdf(x, dof) - stats.t.cdf(x, dof)) < 1e-12
    rows = {c["claim"]: c for c in report.claims(runner.LM_SWEEP.load(ROOT / presets.COMMITTED_SWEEP / "results.json"))}
    assert (rows[3]["verdict"], rows[3]["reading"]) == ("contradicted", "inconclusive")
    assert (rows[4]["verdict"], rows[4]["reading"]) == ("supported", "inconclusive")
    assert rows[6]["reading"] == "in CEM's favour beyond the paper's claim" and rows[6]["pairs"][0]["mean"] < 0
    assert all(rows[k]["reading"] == "against the paper" for k in (1, 5, 8))
    worse = {"mean": 0.5, "se": 0.01, "seeds": 3, "reference": 5.0, "diverged": False}     # the preconditioner hurts
    assert verdicts.t_reading("marginal", worse, 0.02) == "against the paper"


def test_own_rates_follow_the_rule_fixed_before_the_grid_ran():
    """rules.RATE_RULE on hand-made records: the lowest perplexity wins, a diverged run never does, and a best at an
    edge of the grid is flagged (the grid is then extended past that edge)."""
    def record(name, lr, ppl, diverged=False):
        return {"name": name, "lr": lr, "val_ppl": ppl, "diverged": diverged}

    found = rates.own_rates([record("a", 1e-3, 7.0), record("a", 2e-3, 6.5), record("a", 4e-3, 6.9),
                             record("b", 1e-3, 9.0), record("b", 2e-3, 8.0), record("b", 4e-3, 1.0, diverged=True),
                             record("c", 1e-3, 5.0), record("c", 2e-3, 6.0), record("c", 4e-3, 7.0)])
    assert found["a"] == {"lr": 2e-3, "ppl": 6.5, "grid": [1e-3, 2e-3, 4e-3], "inside": True}
    assert (found["b"]["lr"], found["b"]["inside"]) == (2e-3, True)             # the diverged 4e-3 never wins
    assert (found["c"]["lr"], found["c"]["inside"]) == (1e-3, False)            # at the edge: extend the grid


def test_the_rates_sweep_is_whole_and_every_best_rate_is_inside_its_grid():
    """results/lm-rates holds all 66 runs of the rates preset as configured now, under the manifest's rule (fixed
    before the first run), and every variant's best rate lies strictly inside its grid."""
    folder = ROOT / "results" / "lm-rates"
    records = runner.LM_SWEEP.load(folder / "results.json")
    assert runner.stale_runs(records, "rates") == (set(), set()) and len(records) == 66
    found = rates.own_rates(records)
    assert set(found) == set(presets.SWEEP_PRESETS["rates"].variants)
    assert all(r["inside"] and r["grid"] == sorted(presets.RATE_GRID) for r in found.values()), found
    manifest = json.loads((folder / SWEEP_MANIFEST).read_text())
    assert manifest["rate_rule"] == rules.RATE_RULE and manifest["preset"] == "rates"
