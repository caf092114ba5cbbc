"""Section "Gradient sinks": where SmolLM2's gradient goes, and what its norms' 1/r does to it there (V9).

Chen, Lin & Yao (arXiv 2603.17771 v2) argue that under causal masking the tokens that attract attention (attention
sinks) also collect the gradient (gradient sinks), and that the RMSNorm Jacobian, which scales the gradient passing it
by about 1/r, makes the massive activations on those tokens a regulator of that gradient. One backward pass of the
language-model loss measures both halves in SmolLM2, per token and per norm:

- `r`: the RMS of the norm's input (the residual stream there);
- the gradient at the norm's output, |dL/dy| (for an attention-input norm: what the attention sublayer sends back to
  that token, before the norm);
- the gradient that passes the norm back to its input, |dL/dx through the norm|, and the norm's attenuation
  a = |dL/dx through the norm| / |dL/dy|;
- the total gradient at the residual stream there (through the norm and along the skip path);
- per block, the attention each token receives: summed over the later query positions, averaged over heads.

Tokens are split into B5's massive positions (those whose stream, after B5's edited depth, holds an entry that
passes B5's rule: `massive.MassiveRule`) and the rest. `measure_gradient_sinks` runs the pass; `summarise` turns the
per-token arrays into per-norm ratios; `v9_finding` judges them against the registered thresholds. The exact
Jacobian of B12 (`normlab.analysis.jacobians.closed_forms.rms_input_gradient`) checks the autograd gradient through
the norm at a massive token and an ordinary one.
"""

from __future__ import annotations

import math
import statistics
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from normlab.analysis.jacobians.closed_forms import rms_input_gradient
from normlab.analysis.realmodels.massive import MassiveRule
from normlab.analysis.realmodels.stream import site_of, stream_depth
from normlab.norms.huggingface import find_norms
from normlab.study.findings import Finding
from normlab.study.key_numbers import FACTOR, KeyNumber
from normlab.study.present import significant, table

V9_KEY = KeyNumber(
    "SmolLM2-135M: gradient the attention sublayers send to massive positions over other tokens, median over blocks",
    FACTOR,
)
HOLDS, CAVEATS, FAILS, UNTESTABLE = "holds", "holds with caveats", "does not hold", "not testable here"
QUANTITIES = ("r", "grad_out", "grad_through", "grad_residual")


@dataclass
class TokenGradients:
    """Per-token measurements of one backward pass: per norm, arrays of shape (chunks, tokens)."""

    names: list[str]  # the norms, in model order
    blocks: int
    r: np.ndarray  # (norms, chunks, tokens): RMS of the norm's input
    grad_out: np.ndarray  # |dL/dy| at the norm's output
    grad_through: np.ndarray  # |dL/dx| through the norm alone
    grad_residual: np.ndarray  # |dL/dx| at the norm's input, all paths
    received: np.ndarray  # (blocks, chunks, tokens): attention received from later queries, mean over heads
    massive: np.ndarray  # (chunks, tokens) bool: B5's massive positions
    depth: int  # the stream after this many blocks decides which positions are massive
    jacobian_error: float  # largest relative error of autograd's gradient through a norm against B12's exact one

    @property
    def depths(self) -> list[float]:
        return [stream_depth(name, self.blocks) for name in self.names]


@contextmanager
def _gradient_pass_settings(model):
    """Eager attention (the fused kernels return no attention weights) and frozen weights (only the gradient
    with respect to the activations is wanted, which halves the backward's work); both restored afterwards."""
    implementation = model.config._attn_implementation
    flags = [(p, p.requires_grad) for p in model.parameters()]
    model.set_attn_implementation("eager")
    for p, _ in flags:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)
        model.set_attn_implementation(implementation)


def received_attention(weights: torch.Tensor) -> torch.Tensor:
    """(batch, heads, queries, keys) attention weights -> (batch, keys): the weight each key receives from the
    queries after it (strictly later positions), averaged over heads."""
    if weights.dim() != 4 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"expected (batch, heads, tokens, tokens) attention weights, got {tuple(weights.shape)}")
    tokens = weights.shape[-1]
    later = torch.tril(torch.ones(tokens, tokens, dtype=weights.dtype, device=weights.device), diagonal=-1)
    return (weights.mean(1) * later).sum(1)


def massive_positions(hidden: torch.Tensor, rule: MassiveRule) -> torch.Tensor:
    """(batch, tokens) bool: the positions whose hidden state holds at least one entry that passes `rule`."""
    return rule.mask(hidden).any(-1)


def measure_gradient_sinks(
    model, chunks: torch.Tensor, rule: MassiveRule, depth: int, batch: int, check_norm: int | None = None
) -> TokenGradients:
    """One backward pass of the mean next-token loss over `chunks` (chunks, tokens), with the per-token gradients
    and attention of the module's docstring. Massive positions are read from the stream after `depth` blocks (the
    input of block `depth`'s attention-input norm, or of the final norm). `check_norm` (default: that same norm)
    is where autograd's gradient through the norm is compared with B12's exact Jacobian on the first chunk."""
    if chunks.dim() != 2 or chunks.shape[1] < 2:
        raise ValueError(f"chunks must be (chunks, tokens) ids with at least 2 tokens, got {tuple(chunks.shape)}")
    norms = find_norms(model)
    names = list(norms)
    blocks = len(model.model.layers)
    if not 1 <= depth <= blocks:
        raise ValueError(f"depth must lie in 1..{blocks} (the stream after that many blocks), got {depth}")
    depths = [stream_depth(name, blocks) for name in names]
    deciding = depths.index(float(depth))  # the norm whose input is the stream after `depth` blocks
    check = deciding if check_norm is None else check_norm
    record = {key: {name: [] for name in names} for key in QUANTITIES}
    massive, received, kept = [], [[] for _ in range(blocks)], {}

    def keep(key):
        def hook(g):  # returns None: a tensor hook that returns a value would replace the gradient
            kept.setdefault(key, g.detach()[0].double())

        return hook

    def pre_hook(name, index):
        def hook(module, args):
            x = args[0]
            record["r"][name].append(x.detach().float().pow(2).mean(-1).sqrt())
            x.register_hook(lambda g: record["grad_residual"][name].append(g.detach().norm(dim=-1)))
            # a fresh view of x that only the norm reads: the gradient arriving at it is the norm's part alone
            through = x.view_as(x)
            through.register_hook(lambda g: record["grad_through"][name].append(g.detach().norm(dim=-1)))
            if index == deciding:
                massive.append(massive_positions(x.detach(), rule))
            if index == check and "x" not in kept:
                kept["x"] = x.detach()[0].double()
                through.register_hook(keep("through"))
            return (through, *args[1:])

        return hook

    def post_hook(name, index):
        def hook(module, args, output):
            output.register_hook(lambda g: record["grad_out"][name].append(g.detach().norm(dim=-1)))
            if index == check and "out" not in kept:
                output.register_hook(keep("out"))

        return hook

    handles = []
    for index, (name, module) in enumerate(norms.items()):
        handles.append(module.register_forward_pre_hook(pre_hook(name, index)))
        handles.append(module.register_forward_hook(post_hook(name, index)))
    embedding, total = model.get_input_embeddings(), chunks.shape[0]
    try:
        with _gradient_pass_settings(model):
            for start in range(0, total, batch):
                ids = chunks[start : start + batch]
                embeds = embedding(ids).detach().requires_grad_(True)
                out = model(inputs_embeds=embeds, labels=ids, output_attentions=True, use_cache=False)
                # the batch's mean loss, weighted so that the pass is one loss: the mean over all chunks
                (out.loss * ids.shape[0] / total).backward()
                for block, weights in enumerate(out.attentions):
                    received[block].append(received_attention(weights.detach()))
    finally:
        for handle in handles:
            handle.remove()

    def stacked(key):
        # gradients arrive in the backward's order, one tensor per batch: the batches' order is the forward's
        return np.stack([torch.cat(record[key][name]).cpu().numpy() for name in names]).astype(np.float64)

    massive = torch.cat(massive).cpu()
    norm = norms[names[check]]
    gain, eps = norm.weight.detach().double(), float(norm.variance_epsilon)
    # B12's exact Jacobian at the first chunk's massive positions (if any) and its last token, an ordinary one
    positions = [*massive[0].nonzero().flatten().tolist()[:2], chunks.shape[1] - 1]
    error = 0.0
    for p in positions:
        exact = rms_input_gradient(kept["x"][p], gain, kept["out"][p], eps=eps)
        error = max(error, float((exact - kept["through"][p]).norm() / exact.norm().clamp_min(1e-300)))
    return TokenGradients(
        names=names,
        blocks=blocks,
        **{key: stacked(key) for key in QUANTITIES},
        received=np.stack([torch.cat(parts).cpu().numpy() for parts in received]).astype(np.float64),
        massive=massive.numpy(),
        depth=depth,
        jacobian_error=error,
    )


def _group_mean(values: np.ndarray, mask: np.ndarray) -> float:
    return float(values[mask].mean()) if mask.any() else math.nan


def per_norm_table(tokens: TokenGradients, chunks: slice | np.ndarray | None = None) -> pd.DataFrame:
    """One row per norm at and past the massive depth: each quantity's mean at massive and at other positions, the
    attenuation a = |dL/dx through| / |dL/dy| per group, and the ratios the claim reads (`chunks` picks a subset)."""
    pick = slice(None) if chunks is None else chunks
    massive = tokens.massive[pick]
    other = ~massive
    rows = []
    for index, (name, depth) in enumerate(zip(tokens.names, tokens.depths)):
        if depth < tokens.depth:
            continue
        row = {"norm": name, "depth": depth, "site": site_of(depth, tokens.blocks)}
        for key in QUANTITIES:
            values = getattr(tokens, key)[index][pick]
            row[f"{key}_massive"], row[f"{key}_other"] = _group_mean(values, massive), _group_mean(values, other)
        attenuation = tokens.grad_through[index][pick] / np.maximum(tokens.grad_out[index][pick], 1e-300)
        row["attenuation_massive"] = _group_mean(attenuation, massive)
        row["attenuation_other"] = _group_mean(attenuation, other)
        row["gradient_ratio"] = row["grad_out_massive"] / row["grad_out_other"]
        row["measured_ratio"] = row["attenuation_massive"] / row["attenuation_other"]
        row["predicted_ratio"] = row["r_other"] / row["r_massive"]
        row["agreement"] = row["measured_ratio"] / row["predicted_ratio"]
        block = int(depth) if row["site"] == "attention input" else None
        if block is not None:
            received = tokens.received[block][pick]
            row["received_massive"], row["received_other"] = (
                _group_mean(received, massive),
                _group_mean(received, other),
            )
        rows.append(row)
    return pd.DataFrame(rows)


@dataclass
class GradientSinks:
    tokens: TokenGradients
    per_norm: pd.DataFrame
    concentration: float  # median over attention-input norms of the gradient ratio massive/other
    agreement: float  # median over norms of measured attenuation ratio / predicted ratio
    share_within: float  # share of norms whose agreement lies within the tolerance
    concentration_sd: float  # sd over chunks of the per-chunk concentration
    agreement_sd: float  # sd over chunks of the per-chunk agreement
    massive_tokens: int
    massive_on_first_token: int
    tokens_per_chunk: int
    found: bool  # B5's rule found massive activations at its depth (else the depth came closest)
    tolerance: float


def _medians(frame: pd.DataFrame) -> tuple[float, float]:
    attention = frame[frame["site"] == "attention input"]["gradient_ratio"].dropna()
    agreement = frame["agreement"].dropna()
    return (
        float(attention.median()) if len(attention) else math.nan,
        float(agreement.median()) if len(agreement) else math.nan,
    )


def summarise(tokens: TokenGradients, tolerance: float, found: bool = True) -> GradientSinks:
    """The per-norm table and the numbers V9's rule reads, with their spread over chunks."""
    frame = per_norm_table(tokens)
    concentration, agreement = _medians(frame) if tokens.massive.any() else (math.nan, math.nan)
    within = frame["agreement"].dropna()
    within = within[(within <= tolerance) & (within >= 1 / tolerance)]
    per_chunk = [
        _medians(per_norm_table(tokens, np.array([c])))
        for c in range(tokens.massive.shape[0])
        if tokens.massive[c].any() and not tokens.massive[c].all()
    ]

    def spread(values):
        values = [v for v in values if math.isfinite(v)]
        return statistics.stdev(values) if len(values) >= 2 else math.nan

    return GradientSinks(
        tokens=tokens,
        per_norm=frame,
        concentration=concentration,
        agreement=agreement,
        share_within=len(within) / max(frame["agreement"].notna().sum(), 1),
        concentration_sd=spread([c for c, _ in per_chunk]),
        agreement_sd=spread([a for _, a in per_chunk]),
        massive_tokens=int(tokens.massive.sum()),
        massive_on_first_token=int(tokens.massive[:, 0].sum()),
        tokens_per_chunk=int(tokens.massive.shape[1]),
        found=found,
        tolerance=tolerance,
    )


def measure(run, stream, rule: MassiveRule, settings: dict, tolerance: float) -> GradientSinks:
    """The section's pass on the run's stream chunks (their first `gradient_chunks`, cut to `gradient_length`),
    massive positions read after B5's edited depth (`massive.edited_depth`)."""
    from normlab.analysis.realmodels.massive import edited_depth

    depth, found = edited_depth(stream, rule)
    chunks = run.stream_chunks[: settings["gradient_chunks"], : settings["gradient_length"]]
    tokens = measure_gradient_sinks(run.model, chunks, rule, depth, batch=settings["batch"])
    return summarise(tokens, tolerance, found)


def v9_verdict(
    concentration: float, agreement: float, share_within: float, *, threshold: float, tolerance: float, share: float
) -> str:
    """V9's rule as re-registered 2026-12-07 (data/design.toml), limited to what is measured: not testable without
    massive positions (NaN); does not hold if the gradient is not concentrated at them; else holds with caveats, never
    holds: the source's evidence for the regulator half is an intervention, not run here, and the 1/r agreement is
    B12's Jacobian identity, reported beside the verdict (`agreement`, `share_within`), not voting."""
    if not (math.isfinite(concentration) and math.isfinite(agreement)):
        return UNTESTABLE
    return FAILS if concentration < threshold else CAVEATS


# What V9's verdict does not test, the caveats every measured verdict carries (issue 55; data/design.toml's
# [[change]] of 2026-12-07 for V9)
NOT_RUN = (
    "the source's evidence that massive activations regulate the gradient is an intervention (attenuating the "
    "sink-induced gradients weakens the massive activations during training); it was not run here, so the verdict "
    "covers the gradient sink alone"
)
IDENTITY = (
    "the norms' 1/r attenuation is B12's Jacobian identity (the jacobians chapter), shown as a check of the "
    "measurement, not a test of the claim"
)
MODEL = "the model is SmolLM2-135M-Instruct in a 4-bit GGUF file, not the base model in full precision"


def v9_finding(result: GradientSinks, threshold: float, share: float, provenance: dict) -> Finding:
    r, frame = result, result.per_norm
    verdict = v9_verdict(
        r.concentration, r.agreement, r.share_within, threshold=threshold, tolerance=r.tolerance, share=share
    )
    if verdict == UNTESTABLE:
        summary = (
            f"No token of SmolLM2's {r.tokens.blocks}-block cut passes B5's massive-activation rule: massive "
            "positions are absent, so there is nothing to compare at this profile."
        )
    else:
        # the first sentence: what was measured, and only that
        summary = (
            f"Only the gradient sink is measured: SmolLM2-135M's attention sublayers send "
            f"{significant(r.concentration)} times the gradient to B5's massive positions that they send to the other "
            f"tokens (median over blocks; sink at ≥{threshold:g}). The norms attenuate it there by "
            f"{significant(r.agreement)} times what 1/r predicts, B12's Jacobian identity, not a test; the source's "
            f"intervention was not run."
        )
    caveats = ()
    if verdict != UNTESTABLE:
        first = (
            [f"all {r.massive_tokens} massive positions are the first token of their chunk"]
            if r.massive_tokens and r.massive_on_first_token == r.massive_tokens
            else []
        )
        caveats = tuple(f"{c[0].upper()}{c[1:]}." for c in (NOT_RUN, IDENTITY, *first, MODEL))
    evidence = {
        "massive_depth": r.tokens.depth,
        "depth_passed_rule": r.found,
        "massive_tokens": r.massive_tokens,
        "massive_on_first_token": r.massive_on_first_token,
        "chunks": int(r.tokens.massive.shape[0]),
        "tokens_per_chunk": r.tokens_per_chunk,
        "gradient_concentration_median": r.concentration,
        "gradient_concentration_sd_over_chunks": r.concentration_sd,
        "attenuation_agreement_median": r.agreement,
        "attenuation_agreement_sd_over_chunks": r.agreement_sd,
        "share_of_norms_within_tolerance": r.share_within,
        "jacobian_check_relative_error": r.tokens.jacobian_error,
        "per_norm": {
            column: frame[column].tolist()
            for column in frame.columns
            if column in ("norm", "depth", "gradient_ratio", "measured_ratio", "predicted_ratio", "agreement")
        },
        "provenance": provenance,
    }
    finding = Finding(
        verdict,
        summary,
        evidence,
        key_number=r.concentration,
        threshold=threshold,
        spread=r.concentration_sd,
        meaning=V9_KEY.meaning,
        unit=V9_KEY.unit,
        reads=("concentration",),
        caveats=caveats,
        scale=f"SmolLM2-135M, {r.tokens.blocks} blocks, {evidence['chunks']} chunks of {r.tokens_per_chunk} tokens",
    )
    return finding


def gradient_table(result: GradientSinks):
    """A few norms past the massive depth: the two groups' r, gradients and attenuation."""
    frame = result.per_norm
    picked = sorted({0, 1, len(frame) // 2, len(frame) - 2, len(frame) - 1} & set(range(len(frame))))
    shown = frame.iloc[picked]
    return table(
        pd.DataFrame(
            {
                "depth": shown["depth"],
                "site": shown["site"],
                "r (massive)": shown["r_massive"],
                "r (other)": shown["r_other"],
                "|dL/dy| massive / other": shown["gradient_ratio"],
                "attenuation massive / other": shown["measured_ratio"],
                "r_other / r_massive": shown["predicted_ratio"],
                "measured / predicted": shown["agreement"],
            }
        ),
        caption="Norms at and past the massive depth, a few of them (all are in the figure and the results file). "
        "|dL/dy|: the gradient at the norm's output; attenuation: the gradient through the norm over that.",
    )


def gradient_paragraph(result: GradientSinks, finding: Finding) -> str:
    r, frame = result, result.per_norm
    if finding.verdict == UNTESTABLE:
        return finding.summary
    attention = frame[frame["site"] == "attention input"]
    mlp = frame[frame["site"] == "MLP input"]
    received = (attention["received_massive"] / attention["received_other"]).median()
    residual = (frame["grad_residual_massive"] / frame["grad_residual_other"]).median()
    return (
        f"B5's rule marks {r.massive_tokens} positions in {r.tokens.massive.shape[0]} chunks of {r.tokens_per_chunk} "
        f"tokens ({r.massive_on_first_token} of them the chunk's first token), in the stream after block "
        f"{r.tokens.depth}. Those positions receive {significant(received)} times the attention of the other tokens "
        f"(median over blocks), and the attention sublayers send them {significant(r.concentration)} times the "
        f"gradient (sd over chunks {significant(r.concentration_sd)}); the MLP sublayers send them "
        f"{significant(float(mlp['gradient_ratio'].median()))} times, so the concentration is the attention's. The "
        f"norms attenuate what they pass back at those positions by {significant(r.agreement)} times the factor 1/r "
        f"predicts (median over {len(frame)} norms, sd over chunks {significant(r.agreement_sd)}; "
        f"{r.share_within:.0%} of them within a factor {r.tolerance:g}). What reaches the residual stream there, "
        f"through the norms and the skip path together, is {significant(residual)} times the other tokens' gradient. "
        f"Autograd's gradient through the norm agrees with B12's exact Jacobian to a relative "
        f"{significant(r.tokens.jacobian_error)} at a massive token and an ordinary one. **V9 {finding.verdict}.**"
    )
