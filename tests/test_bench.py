"""The benchmark runs end to end at tiny sizes and reports what it claims (no timing asserted)."""
import json
import shutil

import pytest
import torch
from conftest import require_system_package

from cem_core.__main__ import main
from cem_core.experiments.bench import BenchConfig, _layer, eager, kernel_ideal
from cem_core.nn.attention import CEMAttention
from cem_core.nn.config import AttentionConfig, LlamaAttentionConfig, MLPConfig, SwiGLUConfig
from cem_core.nn.flops import attention_flops, mlp_flops


def test_bench_writes_records_with_flop_ratios(tmp_path, capsys):
    path = tmp_path / "bench.json"
    assert main(["bench", "--d-model", "32", "--n-heads", "4", "--seq-len", "16", "--batch", "2", "--d-ff", "64",
                 "--repeats", "1", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "FLOP convention" in out and "time B/A" in out and "ideal at the measured kernel speeds" in out
    data = json.loads(path.read_text())
    records = {r["name"]: r for r in data["records"]}
    for r in data["records"]:
        assert {"name", "time_ratio", "flop_ratio"} <= set(r)
    t2 = records["CEM attention T=2 vs Llama attention"]
    expected = (attention_flops(AttentionConfig(d_model=32, n_heads=4, T=2), 16)["total"]
                / attention_flops(LlamaAttentionConfig(d_model=32, n_heads=4), 16)["total"])
    assert t2["flop_ratio"] == pytest.approx(expected) and t2["time_ratio"] > 0
    core = records["attention core (causal) vs one d x d projection"]
    assert core["flop_ratio"] == pytest.approx(16 / 32)                  # n / d
    assert records["attention core: causal vs no mask"]["flop_ratio"] == 0.5
    assert t2["kernel_ratio"] == pytest.approx((5 * core["time_a_ms"] + 2 * core["time_b_ms"])
                                               / (4 * core["time_a_ms"] + core["time_b_ms"]))
    mlp = records["CEM gated MLP T=1 vs SwiGLU"]
    assert mlp["flop_ratio"] == pytest.approx(mlp_flops(MLPConfig(d_model=32, d_ff=64), 16)["total"]
                                              / mlp_flops(SwiGLUConfig(d_model=32, d_ff=64), 16)["total"])
    assert records["KV cache bytes/token/layer, cem vs llama"]["bytes_ratio"] == 0.5
    assert records["CEM attention T=1 vs Llama attention"]["saved_bytes_b"] > 0
    assert any("tokens_per_s_b" in r for r in data["records"])
    assert data["provenance"]["torch"] and data["threads"] >= 1


def test_kernel_ideal_weights_projections_and_cores_by_their_measured_times():
    """((1 + 2T) p + T c) / (4 p + c): the FLOP ratio when a core costs what a projection costs
    (c = p at n = d) and the cores' share as c grows."""
    def kernels(projection_ms, core_ms):
        return [{"time_a_ms": projection_ms, "time_b_ms": core_ms}]

    assert kernel_ideal(kernels(1.0, 1.0), 1) == pytest.approx(0.8)
    assert kernel_ideal(kernels(1.0, 1.0), 2) == pytest.approx(1.4)
    assert kernel_ideal(kernels(1.0, 3.0), 1) == pytest.approx(6 / 7)
    assert kernel_ideal(kernels(1.0, 3.0), 2) == pytest.approx(11 / 7)


def test_bench_rejects_bad_sizes(capsys):
    assert main(["bench", "--d-model", "30", "--n-heads", "4"]) == 2
    assert "d_model=30 is invalid" in capsys.readouterr().err


@pytest.mark.slow                       # inductor compiles C++ kernels
def test_compiled_rows_run_the_same_layer(float64):
    """--compile wraps each side in torch.compile (inductor); the compiled CEM layer computes what
    the eager one does, forward and backward, and memory is read from the eager module."""
    require_system_package(shutil.which("g++") is not None, "the torch.compile test", "g++")
    c = BenchConfig(d_model=16, n_heads=2, seq_len=8, batch=2, dtype="float64", compile=True)
    layer = _layer(CEMAttention, AttentionConfig(d_model=16, n_heads=2, T=2), c)
    assert eager(layer) is not layer and isinstance(eager(layer), CEMAttention)
    h = torch.randn(2, 8, 16, dtype=torch.float64, requires_grad=True)
    out = layer(h)
    (grad,) = torch.autograd.grad(out.square().sum(), h)
    ref = eager(layer)(h)
    (ref_grad,) = torch.autograd.grad(ref.square().sum(), h)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-12, atol=1e-12)
