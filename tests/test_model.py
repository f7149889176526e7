"""Parameter counts (docs/design.md#invariant-5-parameter-counts), gradients, training, the KV cache and the
info command."""
import subprocess
import sys

import pytest
import torch
from conftest import child_env

import cem_core.nn.attention as attention_module
from cem_core import (
    VARIANTS,
    AttentionCache,
    AttentionConfig,
    CEMAttention,
    CEMGatedMLP,
    CEMOptions,
    LanguageModel,
    LlamaAttention,
    LlamaAttentionConfig,
    MLPConfig,
    ModelConfig,
    SwiGLU,
    SwiGLUConfig,
    param_breakdown,
)
from cem_core.__main__ import main

OPTIONS = dict(cem=CEMOptions(T=2, diagonal="per_head", preconditioner="dlr", rank=3, eta_mode="per_step"))


def _numel(module):
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("d,H", [(16, 2), (48, 6)])
def test_attention_parameter_counts(d, H):
    llama = LlamaAttention(LlamaAttentionConfig(d_model=d, n_heads=H))
    assert _numel(llama) == 4 * d * d + d                                  # q, k, v, o + norm
    assert sum(llama.config.param_counts().values()) == _numel(llama)
    cem = CEMAttention(AttentionConfig(d_model=d, n_heads=H))
    assert _numel(cem) == 2 * d * d + d                                    # q, k (= v) + norm
    assert (_numel(cem) - d) / (_numel(llama) - d) == 0.5
    for diagonal, extra in [("per_head", H * d), ("shared", d)]:
        assert _numel(CEMAttention(AttentionConfig(d_model=d, n_heads=H, diagonal=diagonal))) == 2 * d * d + d + extra
    for kind, extra in [("dlr", d + 2 * d * 3), ("psd", d + d * 3)]:
        layer = CEMAttention(AttentionConfig(d_model=d, n_heads=H, preconditioner=kind, rank=3))
        assert _numel(layer) == 2 * d * d + d + extra
    layer = CEMAttention(AttentionConfig(d_model=d, n_heads=H, T=5, learn_eta=True, eta_per_step=True))
    assert _numel(layer) == 2 * d * d + d + 5
    assert sum(layer.config.param_counts().values()) == _numel(layer)


@pytest.mark.parametrize("d,f", [(16, 40), (32, 88)])
def test_mlp_parameter_counts(d, f):
    swiglu = SwiGLU(SwiGLUConfig(d_model=d, d_ff=f))
    cem = CEMGatedMLP(MLPConfig(d_model=d, d_ff=f))
    assert _numel(swiglu) == 3 * d * f + d
    assert _numel(cem) == 2 * d * f + d
    assert (_numel(cem) - d) / (_numel(swiglu) - d) == pytest.approx(2 / 3)
    assert {n for n, _ in cem.named_parameters()} == {"norm.weight", "up_proj.weight", "gate_proj.weight"}
    for layer in (swiglu, cem):
        assert sum(layer.config.param_counts().values()) == _numel(layer)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("tie", [True, False])
def test_model_breakdown_equals_closed_form(variant, tie):
    cfg = ModelConfig.variant(variant, vocab_size=50, d_model=24, n_heads=3, d_ff=40, n_layers=3,
                              tie_embeddings=tie, **OPTIONS)
    model = LanguageModel(cfg)
    counts = cfg.param_counts()
    assert param_breakdown(model) == counts
    assert counts["total"] == _numel(model)
    d, L = 24, 3
    assert counts["attention.projections"] == L * (2 if variant in ("cem-attn", "cem-full") else 4) * d * d
    assert counts["mlp.projections"] == L * (2 if variant in ("cem-mlp", "cem-full") else 3) * d * 40


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_parameter_receives_gradient(variant):
    torch.manual_seed(0)
    cfg = ModelConfig.variant(variant, vocab_size=30, d_model=16, n_heads=2, d_ff=24, n_layers=2, **OPTIONS)
    model = LanguageModel(cfg)
    with torch.no_grad():   # a zero diagonal would still get gradient; make it non-trivial anyway
        for name, p in model.named_parameters():
            if name.endswith(".diag"):
                p.normal_(0, 0.1)
    idx = torch.randint(0, 30, (2, 9))
    _, loss = model(idx[:, :-1], idx[:, 1:])
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.slow                       # 150 training steps per variant
@pytest.mark.parametrize("variant", VARIANTS)
def test_tiny_model_overfits_a_fixed_batch(variant):
    torch.manual_seed(0)
    cfg = ModelConfig.variant(variant, vocab_size=32, d_model=32, n_heads=4, d_ff=64, n_layers=2,
                              cem=CEMOptions(T=2))
    model = LanguageModel(cfg)
    idx = torch.randint(0, 32, (4, 17))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    _, first = model(idx[:, :-1], idx[:, 1:])
    for _ in range(150):
        _, loss = model(idx[:, :-1], idx[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert first.item() > 3.0 and loss.item() < 0.1, (first.item(), loss.item())


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("diagonal", ["none", "shared"])
def test_generate_with_cache_equals_without(float64, variant, diagonal):
    torch.manual_seed(1)
    cfg = ModelConfig.variant(variant, vocab_size=40, d_model=16, n_heads=2, d_ff=24, n_layers=2, max_seq_len=32,
                              cem=CEMOptions(T=3, diagonal=diagonal, preconditioner="psd"))
    model = LanguageModel(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".diag"):
                p.normal_(0, 0.3)
    prompt = torch.randint(0, 40, (3, 5))
    greedy = [model.generate(prompt, 12, temperature=0.0, use_cache=c) for c in (True, False)]
    assert torch.equal(greedy[0].tokens, greedy[1].tokens)
    sampled = [model.generate(prompt, 12, temperature=1.0, top_k=10, use_cache=c,
                              generator=torch.Generator().manual_seed(7)) for c in (True, False)]
    assert torch.equal(sampled[0].tokens, sampled[1].tokens)
    assert sampled[0].tokens.shape == (3, 17) and torch.equal(sampled[0].tokens[:, :5], prompt)
    # the cache holds the prompt and every fed-back token: 5 + 11, in float64
    per_token = cfg.cache_bytes_per_token(torch.float64)
    assert greedy[0].cache_bytes == 3 * 16 * per_token and greedy[1].cache_bytes == 0


@pytest.mark.parametrize("variant,diagonal", [("llama", "none"), ("cem-full", "none"), ("cem-full", "per_head"),
                                               ("cem-full", "shared")])
def test_cached_logits_equal_full_forward(float64, monkeypatch, variant, diagonal):
    """Chunks of 4, 1 and 6 tokens against a growing cache (queries at an offset; the shared diagonal's
    core in blocks of 2 queries) give the logits of one full forward."""
    monkeypatch.setattr(attention_module, "QUERY_BLOCK", 2)
    torch.manual_seed(2)
    cfg = ModelConfig.variant(variant, vocab_size=40, d_model=16, n_heads=2, d_ff=24, n_layers=2,
                              cem=CEMOptions(T=4, diagonal=diagonal))
    model = LanguageModel(cfg)
    idx = torch.randint(0, 40, (2, 11))
    caches = [AttentionCache() for _ in model.blocks]
    chunks = [model(idx[:, :4], caches=caches), model(idx[:, 4:5], caches=caches), model(idx[:, 5:], caches=caches)]
    torch.testing.assert_close(torch.cat(chunks, 1), model(idx), rtol=1e-10, atol=1e-10)


def test_cem_cache_stores_keys_only():
    d, H = 32, 4
    h = torch.randn(2, 7, d)
    sizes = {}
    for name, layer in [("llama", LlamaAttention(LlamaAttentionConfig(d_model=d, n_heads=H))),
                        ("cem", CEMAttention(AttentionConfig(d_model=d, n_heads=H, T=2))),
                        ("cem-diag", CEMAttention(AttentionConfig(d_model=d, n_heads=H, diagonal="shared")))]:
        cache = AttentionCache()
        layer(h, cache)
        sizes[name] = cache.nbytes
        assert cache.nbytes == 2 * 7 * layer.config.cache_floats_per_token() * 4
        assert (cache.values is not None) == (name == "llama")    # Llama caches values, CEM's are its keys
        assert (cache.inputs is not None) == (name == "cem-diag")
    assert sizes["cem"] * 2 == sizes["llama"]
    assert sizes["cem-diag"] == sizes["llama"]      # keys plus the normalized inputs for the diagonal


def test_info_command(capsys):
    assert main(["info", "--d-model", "768", "--n-layers", "12", "--n-heads", "12", "--d-ff", "2048"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines()
            if line.split()[:1] and line.split()[0] in VARIANTS}
    assert set(rows) == set(VARIANTS)
    # columns: attn proj, x, diag, precond, mlp proj, x, precond, block precond, total, KV, x
    assert rows["cem-attn"][2] == "0.500" and rows["cem-full"][2] == "0.500" and rows["llama"][2] == "1.000"
    assert rows["cem-mlp"][6] == "0.667" and rows["cem-full"][6] == "0.667"
    assert rows["cem-attn"][11] == "0.500" and rows["cem-mlp"][11] == "1.000"
    assert rows["llama"][1] == f"{12 * 4 * 768 * 768:,}"
    assert rows["cem-full"][5] == f"{12 * 2 * 768 * 2048:,}"
    assert rows["llama"][10] == f"{12 * 2 * 768 * 2:,}"          # K and V, bf16, per token
    assert rows["cem-full"][8] == "0"                             # cem-full as it is: two descents per block


def test_info_command_extras_and_errors(capsys):
    assert main(["info", "--d-model", "64", "--n-layers", "2", "--n-heads", "4", "--d-ff", "128",
                 "--diagonal", "shared", "--preconditioner", "psd", "--rank", "2"]) == 0
    out = capsys.readouterr().out
    cem = next(line.split() for line in out.splitlines() if line.startswith("cem-full"))
    assert cem[3] == f"{2 * 64:,}" and cem[4] == f"{2 * (64 + 64 * 2):,}" and cem[7] == f"{2 * (64 + 64 * 2):,}"
    assert main(["info", "--d-model", "65", "--n-heads", "4"]) == 2
    assert "d_model=65 is invalid" in capsys.readouterr().err


@pytest.mark.slow                       # a fresh interpreter
def test_module_entry_point_runs():
    out = subprocess.run([sys.executable, "-m", "cem_core", "info", "--d-model", "64", "--n-layers", "1",
                          "--n-heads", "4", "--d-ff", "96"], env=child_env(), capture_output=True, text=True,
                         check=True).stdout
    assert "cem-full" in out and "KV bytes/token" in out
