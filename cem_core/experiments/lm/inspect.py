"""Inside a trained language model: a logit lens along the in-layer steps (``cem_core.nn.readout``).

``inspect_text`` reads a text with a trained model: for every CEM layer and every step t = 0 .. T_test, the model's
next-token distribution with that layer stopped after step t (its top 5 at each position), the true next token's
loss, each token's energy, the update norms and the attention weights; and the model's own prediction (the
forward pass) beside them. ``validation_ppl_by_T`` measures what test-time T does to validation perplexity.
"""
from __future__ import annotations

import math
from contextlib import nullcontext

import torch
import torch.nn.functional as F

from cem_core.nn.model import LanguageModel, full_precision, recursion_depth
from cem_core.nn.readout import TEST_T_FACTOR, read_output, read_steps
from cem_core.nn.validate import check_int

from .step import evaluate

TOP = 5


def token_label(tokenizer, token: int) -> str:
    """A byte token as a reader sees it: the character, "␣" for a space, "⏎" for a newline, \\xNN otherwise."""
    if token == tokenizer.eot_id:
        return "⟨end⟩"
    text = tokenizer.decode([token])
    if text == " ":
        return "␣"
    if text == "\n":
        return "⏎"
    return text if len(text) == 1 and text.isprintable() and text != "\ufffd" else f"\\x{token:02x}"


def encode_text(tokenizer, text, max_len: int) -> list[int]:
    """The ids of ``text`` (at least 2, at most ``max_len`` + 1: the inputs and the next token of each); a clear
    ValueError otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text is empty: type a sentence (at least two characters) for the model to read")
    ids = tokenizer.encode(text)
    if len(ids) < 2:
        raise ValueError("text is too short: the model needs at least two tokens (two bytes) to predict one")
    if len(ids) > max_len + 1:
        raise ValueError(f"text is too long: {len(ids)} tokens (bytes of UTF-8); the models read at most "
                         f"{max_len + 1} (a context of {max_len} and the next token)")
    return ids


def _top(logits: torch.Tensor, tokenizer) -> list:
    """For each position the TOP most likely next tokens as [label, probability] pairs."""
    probs = torch.softmax(full_precision(logits), -1)
    values, ids = probs.topk(TOP, dim=-1)
    return [[[token_label(tokenizer, int(i)), round(float(p), 4)] for p, i in zip(vs, js)]
            for vs, js in zip(values, ids)]


@torch.no_grad()
def inspect_text(model: LanguageModel, tokenizer, text: str, T_test: int | None = None) -> dict:
    """The logit lens along the steps of every CEM layer for ``text`` (JSON-ready; ``python -m cem_core lm
    inspect`` writes it)."""
    ids = encode_text(tokenizer, text, model.config.max_seq_len)
    cem = bool(model.cem_layers())
    T = model.config.cem.T if T_test is None else T_test
    if T_test is not None:
        check_int("T_test", T_test, 1, TEST_T_FACTOR * model.config.cem.T if cem else 1)
    idx = torch.tensor([ids[:-1]])
    targets = torch.tensor(ids[1:])
    layers = []
    for steps in (read_steps(model, (idx,), T_test=T) if cem else []):
        logits = steps.outputs[:, 0]                                   # (T+1, n, V)
        loss = F.cross_entropy(full_precision(logits).transpose(1, 2), targets.expand(len(logits), -1),
                               reduction="none")                       # (T+1, n)
        layers.append({"name": steps.name, "trained_T": steps.trained_T, "T": steps.T,
                       "loss": loss.tolist(), "mean_loss": loss.mean(-1).tolist(),
                       "top": [_top(step, tokenizer) for step in logits],
                       "energies": steps.energies[:, 0].tolist(), "update_norms": steps.update_norms[:, 0].tolist(),
                       "step_sizes": steps.step_sizes.tolist(),
                       "attention": (None if steps.weights is None else
                                     [[[[round(v, 5) for v in row] for row in head] for head in step]
                                      for step in steps.weights[:, 0].tolist()])})
    logits = read_output(model, (idx,))[0]
    loss = F.cross_entropy(full_precision(logits), targets, reduction="none")
    return {"text": text, "tokens": [token_label(tokenizer, i) for i in ids[:-1]],
            "targets": [token_label(tokenizer, i) for i in ids[1:]], "trained_T": model.config.cem.T if cem else None,
            "T_test": T if cem else None,
            "final": {"loss": loss.tolist(), "mean_loss": float(loss.mean()), "top": _top(logits, tokenizer)},
            "layers": layers}


@torch.no_grad()
def validation_ppl_by_T(model: LanguageModel, val: torch.Tensor, Ts, batch_size: int = 16) -> dict:
    """Validation perplexity with every CEM layer run at each test-time T ({T: ppl})."""
    out = {}
    for T in Ts:
        with recursion_depth(model, T):
            out[int(T)] = math.exp(evaluate(model, val, batch_size, torch.device("cpu"), nullcontext))
    model.eval()
    return out


@torch.no_grad()
def loss_by_step(model: LanguageModel, val: torch.Tensor, batch_size: int = 16) -> list[dict]:
    """For every CEM layer, the mean validation loss (nats per token) of the model read with that layer stopped
    after step t = 0 .. T (the others as trained), and whether each token's energy fell at every step: the share
    of (token, step) pairs where it rose, over the validation sequences ``val`` (B, seq_len + 1)."""
    sums, rises, count = {}, {}, 0
    for i in range(0, len(val), batch_size):
        batch = val[i:i + batch_size]
        targets = batch[:, 1:]
        for steps in read_steps(model, (batch[:, :-1],)):
            losses = [F.cross_entropy(full_precision(out).flatten(0, 1), targets.flatten(), reduction="sum").item()
                      for out in steps.outputs]
            rose = (steps.energies[1:] > steps.energies[:-1]).sum().item()
            sums[steps.name] = [a + b for a, b in zip(sums.get(steps.name, [0.0] * len(losses)), losses)]
            rises[steps.name] = rises.get(steps.name, 0) + rose
        count += targets.numel()
    T = model.config.cem.T
    return [{"name": name, "loss": [v / count for v in values], "share_of_rises": rises[name] / (count * T)}
            for name, values in sums.items()]
