"""The width ladder at the paper's budget: the staged rate choice, each seed's own data order, the rule
fixed before the runs, and the committed records against the preset (docs/design.md#55-the-language-model-sweep)."""
import json
import math
import shutil
from dataclasses import replace
from itertools import islice

import pytest
from conftest import ROOT

from cem_core.experiments.lm import decisions, ladder, presets, rates, rules, runner, variants
from cem_core.experiments.lm.data_config import DataConfig
from cem_core.experiments.lm.packing import batches, shuffled
from cem_core.experiments.lm.sources import iter_documents
from cem_core.experiments.lm.tokenizer import ByteTokenizer
from cem_core.experiments.lm.train_config import LMTrainConfig
from cem_core.experiments.sweep import SWEEP_MANIFEST
from cem_core.nn.model import LanguageModel, ModelConfig

PRESET = "budget-ladder"


def _committed(folder):
    return runner.LM_SWEEP.load(ROOT / folder / "results.json")


def test_the_preset_trains_each_width_on_20_tokens_per_parameter_with_three_seeds_of_their_own_data_order():
    """Counted on the built models; the grid's centre at each width is the quarter-budget ladder's best rate there,
    as its committed records choose it under its own rule."""
    p = presets.SWEEP_PRESETS[PRESET]
    assert p.budget == 1.0 and p.seeds == (0, 1, 2) and p.variants == variants.LADDER_VARIANTS and p.data_orders
    for q in p.parts():
        llama = LanguageModel(ModelConfig.variant("llama", shape=q.shape, vocab_size=257, max_seq_len=q.seq_len))
        params = sum(t.numel() for t in llama.parameters())
        assert presets.steps_for(q) == math.ceil(20 * params / (q.batch_size * q.seq_len))
        assert presets.steps_for(q) * q.batch_size * q.seq_len >= 20 * params
    quarter = ladder.best_rates(_committed(presets.COMMITTED_LADDER), "ladder")
    table = decisions.read_decisions(ROOT / presets.COMMITTED_BUDGET_LADDER)
    assert {(w, name): lr for w, name, lr in table["base_rates"]} == {k: b["lr"] for k, b in quarter.items()}
    specs = presets.preset_runs(PRESET, decisions=table)                 # before any record: the seed-0 grids
    assert len(specs) == 3 * 4 * 3 and {s.config.seed for s in specs} == {0}
    for s in specs:
        base = dict(((w, n), lr) for w, n, lr in table["base_rates"])[(s.config.shape.d_model, s.name)]
        assert s.config.optim.lr / base in (0.5, 1.0, 2.0) and s.config.data_order == s.config.seed
    manifest = runner.manifest(PRESET, presets.default_data(PRESET), specs, table)
    assert manifest["verdict_rule"] == rules.BUDGET_LADDER_RULE
    assert manifest["base_rates"] == table["base_rates"]
    for words in ("seed 0", "order of the training documents", "weights 1 / se^2", "lack-of-fit F test",
                  "on the gap's size |g|, not its sign", "an extrapolation printed without an interval"):
        assert words in rules.BUDGET_LADDER_RULE


@pytest.mark.parametrize("ppl, grid, chosen", [
    ({1: 9.0, 2: 8.0, 4: 8.5}, [1, 2, 4], 2),                         # inside: chosen at once
    ({1: 9.0, 2: 8.5, 4: 8.0}, [1, 2, 4, 8], None),                    # best at the top edge: one rate more first
    ({1: 9.0, 2: 8.5, 4: 8.0, 8: 8.2}, [1, 2, 4, 8], 4),
    ({0.5: 7.9, 1: 8.0, 2: 8.5, 4: 9.0}, [0.25, 0.5, 1, 2, 4], None),   # best at the bottom edge: grows downwards
    ({1: math.inf, 2: math.inf, 4: math.inf}, [0.5, 1, 2, 4], None),   # every run diverged: lower rates first
])
def test_the_staged_grid_extends_at_an_edge_until_its_best_is_inside(ppl, grid, chosen):
    seed0 = {k * 1e-3: {"val_ppl": v, "diverged": not math.isfinite(v)} for k, v in ppl.items()}
    got, lr = rates.staged_grid(2e-3, (0.5, 1.0, 2.0), seed0)
    assert got == pytest.approx([k * 1e-3 for k in grid], rel=1e-12)
    assert lr == (None if chosen is None else pytest.approx(chosen * 1e-3))


def test_each_seed_draws_its_own_order_of_the_same_documents_and_replays_it_on_resume():
    data = DataConfig(source="demo", demo_max_bytes=300_000)
    tok = ByteTokenizer()
    docs = list(iter_documents(data, "train"))
    orders = [list(shuffled(docs, seed=k)) for k in (0, 1)]
    assert all(sorted(o) == sorted(docs) for o in orders) and orders[0] != orders[1] != docs
    small = list(shuffled(range(100), seed=3, buffer=8))           # a buffer smaller than the stream
    assert sorted(small) == list(range(100)) and small != list(range(100))

    def first(order, n=40):
        return [b.tolist() for b in islice(batches(data, tok, "train", 32, 4, order=order), n)]
    assert first(1) == first(1) and first(1) != first(2) and first(None) != first(1)
    assert first(None) == [b.tolist() for b in islice(batches(data, tok, "train", 32, 4), 40)]
    with pytest.raises(ValueError, match="order=1 is invalid: applies to the train split only"):
        batches(data, tok, "validation", 32, 4, order=1)
    with pytest.raises(ValueError, match="data_order=-1 is invalid"):
        LMTrainConfig(data_order=-1)
    plain = LMTrainConfig()
    assert "data_order" not in plain.identity(data)["config"]               # every earlier run keeps its hash
    assert LMTrainConfig(data_order=0).run_hash(data) != plain.run_hash(data)


class _Trained:
    """What ``train`` returns, made up: a perplexity with its minimum at BEST[variant] x the grid's centre."""
    BEST = {"llama": 4.0, "attn T=1": 1.0}

    def __init__(self, cfg, centre):
        self.summary = {"val_ppl": 10 + math.log2(cfg.optim.lr / (centre * self.BEST[
            "llama" if cfg.variant == "llama" else "attn T=1"])) ** 2 + 0.1 * cfg.seed,
            "val_loss": 1.0, "tokens_per_s": 1.0}


def _tiny(monkeypatch, tmp_path):
    p = replace(presets.SWEEP_PRESETS[PRESET], shape=presets.SWEEP_PRESETS["quick"].shape, seq_len=16, batch_size=4,
                budget=0.002, variants=("llama", "attn T=1"), widths=(16, 32), head_width=8, eval_batches=2,
                demo_max_bytes=200_000)
    monkeypatch.setitem(presets.SWEEP_PRESETS, PRESET, p)
    monkeypatch.setattr(runner, "train", lambda cfg, data, folder, progress=False: _Trained(cfg, 1e-3))
    decisions.write_decisions(tmp_path / "ladder", {"base_rates": [[w, name, 1e-3] for w in (16, 32)
                                                                   for name in ("llama", "attn T=1")]})
    return DataConfig(source="demo", demo_max_bytes=200_000), tmp_path / "ladder"


def test_a_staged_sweep_runs_width_by_width_extends_its_grids_and_then_trains_the_other_seeds(monkeypatch, tmp_path):
    data, out = _tiny(monkeypatch, tmp_path)
    stages = []
    records = runner.run_sweep(out, PRESET, data, on_start=lambda todo: stages.append([s.folder for s in todo]))
    assert stages[0] == [f"{v}-d16-lr{lr:g}-seed0" for v in ("llama", "attn-t-1") for lr in (5e-4, 1e-3, 2e-3)]
    assert stages[1] == ["llama-d16-lr0.004-seed0", "attn-t-1-d16-lr0.001-seed1", "attn-t-1-d16-lr0.001-seed2"]
    assert all("-d16-" in f for stage in stages[:4] for f in stage) and all("-d32-" in f for f in stages[-1])
    best = ladder.best_rates(records, PRESET)
    assert {k: (b["lr"], b["inside"], len(b["runs"])) for k, b in best.items()} == {
        (w, "llama"): (4e-3, True, 3) for w in (16, 32)} | {(w, "attn T=1"): (1e-3, True, 3) for w in (16, 32)}
    assert ladder.unfinished(records, PRESET) == [] and ladder.progress_note(records, PRESET) == ""
    assert runner.stale_runs(records, PRESET, data, decisions.read_decisions(out)) == (set(), set())
    assert {r["identity"]["config"]["data_order"] for r in records} == {0, 1, 2}
    assert runner.run_sweep(out, PRESET, data, on_start=stages.append) == records and len(stages) == 8   # idempotent


def test_a_staged_sweep_stopped_mid_stage_resumes_it_and_refuses_another_sweeps_folder(monkeypatch, tmp_path):
    data, out = _tiny(monkeypatch, tmp_path)
    real, calls = runner.train, []

    def stop_after(n):
        def train(cfg, data, folder, progress=False):
            if len(calls) == n:
                raise KeyboardInterrupt
            calls.append(folder.name)
            return real(cfg, data, folder, progress)
        return train
    monkeypatch.setattr(runner, "train", stop_after(7))                     # in the second stage of d = 16
    with pytest.raises(KeyboardInterrupt):
        runner.run_sweep(out, PRESET, data)
    kept = runner.LM_SWEEP.load(out / "results.json")
    assert len(kept) == 7 and json.loads((out / SWEEP_MANIFEST).read_text())["runs"]
    monkeypatch.setattr(runner, "train", real)
    records = runner.run_sweep(out, PRESET, data)
    assert [r["hash"] for r in records[:7]] == [r["hash"] for r in kept] or {r["hash"] for r in kept} <= {
        r["hash"] for r in records}
    assert ladder.unfinished(records, PRESET) == [] and len({r["hash"] for r in records}) == len(records)
    other = tmp_path / "other"
    shutil.copytree(out, other)
    decisions.write_decisions(other, {"own_rates": dict.fromkeys(variants.LADDER_VARIANTS, 1e-3), "extensions": []})
    with pytest.raises(ValueError, match="holds another sweep"):
        runner.run_sweep(other, "ladder", data)


def test_the_committed_budget_ladder_matches_its_preset_and_every_chosen_rate_lies_inside_its_grid():
    """Every committed record is a run the preset asks for given the records before it (no stranger, no other
    configuration), the folder's manifest holds the rule fixed before the first run, every rate chosen lies strictly
    inside its grid with all three seeds trained there, and the cells not finished yet are named, not hidden."""
    records = _committed(presets.COMMITTED_BUDGET_LADDER)
    assert len(records) >= 22
    missing, strangers = runner.stale_runs(records, PRESET,
                                           decisions=decisions.read_decisions(ROOT / presets.COMMITTED_BUDGET_LADDER))
    assert not strangers
    manifest = json.loads((ROOT / presets.COMMITTED_BUDGET_LADDER / SWEEP_MANIFEST).read_text())
    assert manifest["verdict_rule"] == rules.BUDGET_LADDER_RULE and manifest["preset"] == PRESET
    assert manifest["data"]["source"] == "demo" and {r["identity"]["data"]["source"] for r in records} == {"demo"}
    assert all(r["identity"]["config"]["data_order"] == r["seed"] for r in records)
    for (width, name), b in ladder.best_rates(records, PRESET).items():
        if (width, name) not in ladder.unfinished(records, PRESET):
            assert b["inside"] and sorted(r["seed"] for r in b["runs"]) == [0, 1, 2], (width, name)
        assert all(r["lr"] == b["lr"] for r in records if r["seed"] > 0 and r["name"] == name
                   and r["identity"]["config"]["d_model"] == width)          # other seeds only at the chosen rate
    done = len(presets.SWEEP_PRESETS[PRESET].widths) * 4 - len(ladder.unfinished(records, PRESET))
    page = (ROOT / "docs" / "results-lm.md").read_text()
    note = ladder.progress_note(records, PRESET)
    assert (note in page) if note else (done == 12 and not missing)
    start, end = ladder.doc_markers(PRESET)
    block = page[page.index(start) + len(start) + 1:page.index(end)]
    assert block == ladder.doc_block(records, PRESET) + "\n"
