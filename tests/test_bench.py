"""The benchmark runs end to end at tiny sizes and reports what it claims (no timing asserted)."""
import json

import pytest

from cem_core.__main__ import main
from cem_core.config import AttentionConfig, MLPConfig
from cem_core.flops import attention_flops, mlp_flops


def test_bench_writes_records_with_flop_ratios(tmp_path, capsys):
    path = tmp_path / "bench.json"
    assert main(["bench", "--d-model", "32", "--n-heads", "4", "--seq-len", "16", "--batch", "2", "--d-ff", "64",
                 "--repeats", "1", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "FLOP convention" in out and "time B/A" in out
    data = json.loads(path.read_text())
    records = {r["name"]: r for r in data["records"]}
    for r in data["records"]:
        assert {"name", "time_ratio", "flop_ratio"} <= set(r)
    t2 = records["CEM attention T=2 vs Llama attention"]
    expected = (attention_flops(AttentionConfig(d_model=32, n_heads=4, T=2), 16)["total"]
                / attention_flops(AttentionConfig(d_model=32, n_heads=4, untied=True), 16)["total"])
    assert t2["flop_ratio"] == pytest.approx(expected) and t2["time_ratio"] > 0
    mlp = records["CEM gated MLP T=1 vs SwiGLU"]
    assert mlp["flop_ratio"] == pytest.approx(mlp_flops(MLPConfig(d_model=32, d_ff=64), 16)["total"]
                                              / mlp_flops(MLPConfig(d_model=32, d_ff=64, untied=True), 16)["total"])
    assert records["KV cache bytes/token/layer, cem vs llama"]["bytes_ratio"] == 0.5
    assert records["CEM attention T=1 vs Llama attention"]["saved_bytes_b"] > 0
    assert any("tokens_per_s_b" in r for r in data["records"])


def test_bench_rejects_bad_sizes(capsys):
    assert main(["bench", "--d-model", "30", "--n-heads", "4"]) == 2
    assert "d_model=30 is invalid" in capsys.readouterr().err
