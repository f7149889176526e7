"""The benchmark runs end to end at tiny sizes and reports what it claims (no timing asserted)."""
import json
import shutil
from dataclasses import replace

import pytest
import torch
from conftest import require_system_package

import cem_core.nn.attention as attention_module
from cem_core.__main__ import main
from cem_core.experiments.bench import PROJECTION, SHARED_CORE, BenchConfig, _layer, eager, kernel_time, saved_bytes
from cem_core.nn.attention import QUERY_BLOCK, CEMAttention, query_blocks
from cem_core.nn.config import AttentionConfig, LlamaAttentionConfig, MLPConfig, ModelShape, SwiGLUConfig
from cem_core.nn.flops import attention_flops, mlp_flops, model_flops
from cem_core.nn.model import VARIANT_OPTIONS, ModelConfig


@pytest.mark.slow
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
    t2 = records["CEM attention T=2, query space vs Llama attention"]
    expected = (attention_flops(AttentionConfig(d_model=32, n_heads=4, T=2), 16, batch=2)["total"]
                / attention_flops(LlamaAttentionConfig(d_model=32, n_heads=4), 16)["total"])
    assert t2["flop_ratio"] == pytest.approx(expected) and t2["time_ratio"] > 0
    core = records["attention core (causal) vs one d x d projection"]
    assert core["flop_ratio"] == pytest.approx(16 / 32)                  # n / d
    assert records["attention core: causal vs no mask"]["flop_ratio"] == 0.5
    shared_core = records["shared-diagonal core vs causal core"]
    assert shared_core["flop_ratio"] == 2.0
    # query space at T = 2: k, q, o M, readout and M (one d x d x d product for the batch of 2: 32/16/2 of a
    # projection over 16 tokens) at the projection's speed, two cores; Llama: 4 projections and one core
    p, c = core["time_a_ms"], core["time_b_ms"]
    assert t2["kernel_ratio"] == pytest.approx(((4 + 32 / 16 / 2) * p + 2 * c) / (4 * p + c))
    shared = records["D+LR shared vs no diagonal (CEM attention, T=1)"]
    assert shared["kernel_ratio"] == pytest.approx((3 * p + shared_core["time_b_ms"]) / (3 * p + c))
    assert "kernel_ratio" not in records["D+LR per_head vs no diagonal (CEM attention, T=1)"]
    mlp = records["CEM gated MLP T=1 vs SwiGLU"]
    assert mlp["flop_ratio"] == pytest.approx(mlp_flops(MLPConfig(d_model=32, d_ff=64), 16)["total"]
                                              / mlp_flops(SwiGLUConfig(d_model=32, d_ff=64), 16)["total"])
    assert records["KV cache bytes/token/layer, cem vs llama"]["bytes_ratio"] == 0.5
    assert records["CEM attention T=1 vs Llama attention"]["saved_bytes_b"] > 0
    assert any("tokens_per_s_b" in r for r in data["records"])
    sizes = dict(d_model=32, n_heads=4, d_ff=64, n_layers=2, max_seq_len=16)
    joint, full = (model_flops(ModelConfig.variant("cem-full", cem=cem, **sizes), 16, 2)["block"]
                   for cem in (replace(VARIANT_OPTIONS["cem-full"], block="joint"), VARIANT_OPTIONS["cem-full"]))
    for mode in ("forward", "forward+backward"):
        row = records[f"block ({mode}), cem-full as one energy (joint) vs as it is"]
        assert row["flop_ratio"] == pytest.approx(joint / full) and row["tokens_per_s_b"] > 0
    distance = records["D+LR shared: distance vs bilinear form (CEM attention, T=1)"]
    assert distance["flop_ratio"] == 1.0 and distance["time_ratio"] > 0   # the key bias is not a matmul
    lm = [r for r in data["records"] if r["name"].startswith("LM train step at cpu-tiny")]
    assert [r["b"] for r in lm] == ["cem-attn", "cem-mlp", "cem-full"] and all(r["tokens_per_s_b"] > 0 for r in lm)
    assert data["provenance"]["torch"] and data["threads"] >= 1


def test_kernel_time_weights_projections_and_cores_by_their_measured_times():
    """Llama 4 p + c; CEM (1 + 2T) p + T c in x space, (T + 2) p + T c (+ M) in query space, T shared
    cores with a shared diagonal: at p = c = 1 (n = d) these are the FLOP counts in projections."""
    kernels = [{"name": PROJECTION, "time_a_ms": 1.0, "time_b_ms": 3.0},
               {"name": SHARED_CORE, "time_a_ms": 3.0, "time_b_ms": 5.0}]
    c = BenchConfig(shape=ModelShape(d_model=64, n_heads=4), seq_len=64, batch=4)
    assert kernel_time(kernels, LlamaAttentionConfig(d_model=64, n_heads=4), c) == pytest.approx(7.0)
    assert kernel_time(kernels, AttentionConfig(d_model=64, n_heads=4), c) == pytest.approx(6.0)
    assert kernel_time(kernels, AttentionConfig(d_model=64, n_heads=4, T=2), c) == pytest.approx(4.25 + 6.0)
    assert kernel_time(kernels, AttentionConfig(d_model=64, n_heads=4, T=2, anchor=0.5, preconditioner="psd"),
                       c) == pytest.approx(5.0 + 6.0)                   # x space: the anchor with P != I
    assert kernel_time(kernels, AttentionConfig(d_model=64, n_heads=4, T=2, diagonal="shared"),
                       c) == pytest.approx(5.0 + 10.0)
    with pytest.raises(ValueError, match="per-head"):
        kernel_time(kernels, AttentionConfig(d_model=64, n_heads=4, diagonal="per_head"), c)


def test_bench_rejects_bad_sizes(capsys):
    assert main(["bench", "--d-model", "30", "--n-heads", "4"]) == 2
    assert "d_model=30 is invalid" in capsys.readouterr().err


@pytest.mark.slow                       # inductor compiles C++ kernels
@pytest.mark.parametrize("diagonal", ["none", "shared"])
def test_compiled_rows_run_the_same_layer(float64, monkeypatch, diagonal):
    """--compile wraps each side in torch.compile (inductor); the compiled CEM layer computes what
    the eager one does, forward and backward, and memory is read from the eager module. Query space
    (no diagonal) and the shared diagonal's core in blocks of 3 queries."""
    require_system_package(shutil.which("g++") is not None, "the torch.compile test", "g++")
    monkeypatch.setattr(attention_module, "QUERY_BLOCK", 3)
    c = BenchConfig(shape=ModelShape(d_model=16, n_heads=2), seq_len=8, batch=2, dtype="float64",
                    compile=True)
    layer = _layer(CEMAttention, AttentionConfig(d_model=16, n_heads=2, T=2, diagonal=diagonal), c)
    assert eager(layer) is not layer and isinstance(eager(layer), CEMAttention)
    h = torch.randn(2, 8, 16, dtype=torch.float64, requires_grad=True)
    out = layer(h)
    (grad,) = torch.autograd.grad(out.square().sum(), h)
    ref = eager(layer)(h)
    (ref_grad,) = torch.autograd.grad(ref.square().sum(), h)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-12, atol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("d,H", [(768, 12), (512, 8), (128, 4), (64, 4)])
@pytest.mark.parametrize("n", [128, 512, 1024])
def test_shared_diagonal_memory_stays_within_the_concatenated_paths(d, H, n):
    """Activation memory (each storage autograd saves, counted once) of the shared diagonal's core, kept
    or recomputed in blocks, is no larger than the per-head layout's concatenated path at the same sizes,
    from the benchmark's and the GPU presets' widths down to d = 64, up to n = 1024."""
    torch.manual_seed(0)
    h = torch.randn(1, n, d, requires_grad=True)
    shared, per_head = (saved_bytes(CEMAttention(AttentionConfig(d_model=d, n_heads=H, diagonal=diagonal)), h)
                        for diagonal in ("shared", "per_head"))
    assert shared <= per_head, (shared / 2**20, per_head / 2**20)


@pytest.mark.slow
def test_recomputed_blocks_keep_only_their_inputs(monkeypatch):
    """Where the blocks' weights would not fit (d = 64, n = 512) they are recomputed in backward: forcing
    them kept instead takes more than twice the memory."""
    assert query_blocks(512, 512, 4, 16, 64)[1] and not query_blocks(512, 512, 8, 64, 512)[1]
    layer = CEMAttention(AttentionConfig(d_model=64, n_heads=4, diagonal="shared"))
    h = torch.randn(1, 512, 64, requires_grad=True)
    recomputed = saved_bytes(layer, h)
    monkeypatch.setattr(attention_module, "query_blocks", lambda *sizes: (QUERY_BLOCK, False))
    assert saved_bytes(layer, h) > 2 * recomputed
