"""LayerNorm in a pre-norm LLaMA model, written exactly as RMSNorm on a mean-zero residual stream.

Jiang et al. 2023 (*Pre-RMSNorm and Pre-CRMSNorm Transformers*, arXiv 2305.14858) show that a pre-LN
Transformer equals a pre-RMSNorm one whose residual stream is kept mean-zero. Run backwards on a
pre-RMSNorm model: write C = I - 11ᵀ/d for the centring projection. Then

- LayerNorm(x) = (x - mean x) / sqrt(var x + eps) · g, and var x = mean((Cx)²) is the mean square of the
  centred vector, so LayerNorm(x) = RMSNorm(Cx) with the same gain and the same eps: one formula, not an
  approximation;
- if every write into the stream (the token embedding, each attention output projection, each MLP down
  projection) is multiplied by C, the centred model's stream is C times the original's at every depth
  (h' = C·embed, h' += C·out, and C is linear), so every norm, the final one included, receives Cx and
  returns what the LayerNorm returned on x; every block then computes the same outputs from the same
  inputs, and the LM head reads the same normalised vector.

So "every RMSNorm becomes a LayerNorm with the same gain and no bias" is the same function as "centre the
embeddings and the writing matrices, keep the RMSNorms". The LM head reads the stream and does not write
into it, so it keeps the uncentred weights: a model that ties the head to the embedding is untied first,
and only the input embedding copy is centred. What this covers is named in `ASSUMPTIONS`; `centred_model`
refuses a model outside it.

The chapter's section "What the swap measures, exactly" checks the map on SmolLM2 (`measure_centring_map`): the
centred model's logits against the LayerNorm swap's, within a tolerance for float32 rounding, and against the
model as trained.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from normlab.analysis.realmodels.centring_added import CentringAdded
from normlab.analysis.realmodels.load import SmolLM2Run
from normlab.analysis.realmodels.variants import installed, variant_modules
from normlab.norms.huggingface import find_norms, norm_kind
from normlab.study.key_numbers import NATS_PER_TOKEN
from normlab.study.present import significant

ASSUMPTIONS = (
    "a transformers LLaMA-architecture causal LM (config.model_type 'llama'): model.embed_tokens, model.layers, "
    "model.norm, model.rotary_emb and lm_head, nothing else;",
    "each decoder layer is pre-norm with two residual writes: input_layernorm -> self_attn (q/k/v/o_proj) and "
    "post_attention_layernorm -> mlp (gate/up/down_proj), nothing else;",
    "the only modules that write into the residual stream are the embedding, self_attn.o_proj and mlp.down_proj, "
    "none with a bias (a bias would be a write the centring would have to centre too);",
    "the norms are exactly the 2 per layer plus the final one, RMSNorms with a gain and no bias or offset "
    "(not Gemma's 1 + weight); positions enter only through RoPE, inside attention, never as a write.",
)
_MODEL_CHILDREN = {"embed_tokens", "layers", "norm", "rotary_emb"}
_LAYER_CHILDREN = {"self_attn", "mlp", "input_layernorm", "post_attention_layernorm"}
_LAYER_NORMS = ("input_layernorm", "post_attention_layernorm")
_ATTENTION_CHILDREN = {"q_proj", "k_proj", "v_proj", "o_proj"}
_MLP_CHILDREN = {"gate_proj", "up_proj", "down_proj", "act_fn"}


class NotCovered(ValueError):
    """The model is outside what the exact LayerNorm-to-centred-RMSNorm map covers."""


def _refuse(problem: str) -> None:
    raise NotCovered(f"centred_model does not cover this model: {problem}. It assumes " + " ".join(ASSUMPTIONS))


def _children(module: nn.Module) -> set[str]:
    return {name for name, _ in module.named_children()}


def check_covered(model: nn.Module) -> None:
    """Raise `NotCovered`, naming the first broken assumption, unless `model` is one the map covers."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type != "llama":
        _refuse(f"{type(model).__name__} has model_type {model_type!r}, not 'llama'")
    if _children(model) != {"model", "lm_head"}:
        _refuse(f"its top-level modules are {sorted(_children(model))}, not ['lm_head', 'model']")
    inner = model.model
    if _children(inner) != _MODEL_CHILDREN:
        _refuse(f"model.model holds {sorted(_children(inner))}, not {sorted(_MODEL_CHILDREN)}")
    if not isinstance(inner.embed_tokens, nn.Embedding):
        _refuse(f"model.embed_tokens is a {type(inner.embed_tokens).__name__}, not an nn.Embedding")
    for i, layer in enumerate(inner.layers):
        for where, module, expected in (
            (f"layers.{i}", layer, _LAYER_CHILDREN),
            (f"layers.{i}.self_attn", getattr(layer, "self_attn", None), _ATTENTION_CHILDREN),
            (f"layers.{i}.mlp", getattr(layer, "mlp", None), _MLP_CHILDREN),
        ):
            if module is None or _children(module) != expected:
                found = sorted(_children(module)) if module is not None else "nothing"
                _refuse(f"{where} holds {found}, not {sorted(expected)} (unknown layer names)")
        for name, linear in (("self_attn.o_proj", layer.self_attn.o_proj), ("mlp.down_proj", layer.mlp.down_proj)):
            if not isinstance(linear, nn.Linear):
                _refuse(f"layers.{i}.{name} is a {type(linear).__name__}, not an nn.Linear")
            if linear.bias is not None:
                _refuse(f"layers.{i}.{name} has a bias")
    expected_norms = {"model.norm"} | {
        f"model.layers.{i}.{norm}" for i in range(len(inner.layers)) for norm in _LAYER_NORMS
    }
    norms = find_norms(model)
    if set(norms) != expected_norms:
        extra, missing = sorted(set(norms) - expected_norms), sorted(expected_norms - set(norms))
        _refuse(f"its norms differ from the expected ones (unexpected: {extra[:3]}, missing: {missing[:3]})")
    for name, norm in norms.items():
        if norm_kind(norm) != "rms_norm" or type(norm).__name__.startswith("Gemma"):
            _refuse(f"{name} is a {type(norm).__name__}, not a plain RMSNorm")
        if getattr(norm, "bias", None) is not None:
            _refuse(f"{name} has a bias")


def _centre_rows(weight: torch.Tensor, dim: int) -> None:
    weight.sub_(weight.mean(dim=dim, keepdim=True))


@torch.no_grad()
def centred_model(model: nn.Module) -> nn.Module:
    """A deep copy of `model` whose every write into the residual stream is centred over the hidden dimension.

    The embedding rows and the output of each o_proj and down_proj (the columns of their (out, in) weights,
    over `out`) lose their mean; the norms stay the model's RMSNorms; the LM head keeps the original weights
    (untied from the embedding when they were tied). The copy computes the same function as `model` with every
    RMSNorm replaced by a LayerNorm of the same gain and eps and no bias (see the module's docstring).
    """
    check_covered(model)
    centred = copy.deepcopy(model)
    embedding, head = centred.model.embed_tokens, centred.lm_head
    if head.weight is embedding.weight or head.weight.data_ptr() == embedding.weight.data_ptr():
        head.weight = nn.Parameter(head.weight.detach().clone(), requires_grad=head.weight.requires_grad)
    centred.config.tie_word_embeddings = False  # nothing may re-tie the head to the centred embedding
    _centre_rows(embedding.weight, dim=1)  # each token's vector: (vocab, hidden)
    for layer in centred.model.layers:
        _centre_rows(layer.self_attn.o_proj.weight, dim=0)  # (hidden, heads * head_dim): centre over hidden
        _centre_rows(layer.mlp.down_proj.weight, dim=0)  # (hidden, intermediate)
    return centred


@dataclass(frozen=True)
class LogitComparison:
    """Two models' logits on the same chunks: the largest absolute difference over the largest reference logit."""

    max_relative_difference: float
    max_abs_difference: float
    max_abs_logit: float
    chunks: int
    tokens: int


@torch.no_grad()
def logit_comparisons(
    reference: Callable[[torch.Tensor], torch.Tensor],
    others: dict[str, Callable[[torch.Tensor], torch.Tensor]],
    chunks: torch.Tensor,
    batch: int = 4,
) -> dict[str, LogitComparison]:
    """Logits of `reference` against each of `others` (functions from (batch, tokens) ids to logits) on `chunks`
    (n, tokens), batch by batch, the reference run once per batch.

    The relative difference is max |a - b| over max |a| (a the reference), over every chunk, position and
    vocabulary entry: a per-element ratio would divide by logits that happen to sit near zero.
    """
    if chunks.dim() != 2 or chunks.shape[0] < 1 or batch < 1:
        raise ValueError(f"chunks must be (n >= 1, tokens) ids and batch >= 1, got {tuple(chunks.shape)}, {batch}")
    largest_difference, largest_logit = dict.fromkeys(others, 0.0), 0.0
    for start in range(0, chunks.shape[0], batch):
        ids = chunks[start : start + batch]
        a = reference(ids)
        largest_logit = max(largest_logit, float(a.abs().max()))
        for name, other in others.items():
            b = other(ids)
            if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
                raise ValueError(f"non-finite logits (reference or {name!r}); the comparison would be meaningless")
            largest_difference[name] = max(largest_difference[name], float((a - b).abs().max()))
    return {
        name: LogitComparison(
            max_relative_difference=difference / largest_logit if largest_logit > 0 else float("inf"),
            max_abs_difference=difference,
            max_abs_logit=largest_logit,
            chunks=int(chunks.shape[0]),
            tokens=int(chunks.numel()),
        )
        for name, difference in largest_difference.items()
    }


def logits_of(model: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """A transformers causal LM as a function from token ids to logits, without a KV cache."""
    return lambda ids: model(ids, use_cache=False).logits


def compare_logits(reference: nn.Module, other: nn.Module, chunks: torch.Tensor, batch: int = 4) -> LogitComparison:
    """Two models' logits on `chunks`: `logit_comparisons` with one other model."""
    return logit_comparisons(logits_of(reference), {"other": logits_of(other)}, chunks, batch)["other"]


@dataclass
class CentringMap:
    mapped: LogitComparison  # the model with centred writes and its own RMSNorms vs every RMSNorm a LayerNorm
    unmapped: LogitComparison  # the centred model vs the model as trained: the gap the map has to close
    length: int
    tolerance: float  # largest relative logit difference that counts as float32 rounding


def measure_centring_map(run: SmolLM2Run, chunks: int, batch: int, tolerance: float) -> CentringMap:
    """`centred_model` against the LayerNorm swap of Q4's measurement and against the model as trained, on the
    first `chunks` loss chunks; differences relative to the centred model's largest logit."""
    model, sample = run.model, run.loss_chunks[:chunks]
    centred = centred_model(model)
    layer_norm = variant_modules(model, "torch", convert="layer_norm")

    def with_layer_norms(ids):
        with installed(model, layer_norm):
            return model(ids, use_cache=False).logits

    found = logit_comparisons(
        logits_of(centred), {"mapped": with_layer_norms, "unmapped": logits_of(model)}, sample, batch
    )
    del centred
    return CentringMap(found["mapped"], found["unmapped"], length=int(sample.shape[1]), tolerance=tolerance)


def centring_map_paragraph(result: CentringMap, added: CentringAdded) -> str:
    """The map's check against its tolerance (the largest logit difference over the largest logit), and what
    Q4's number then means."""
    m, u, tolerance = result.mapped, result.unmapped, result.tolerance
    chunks = f"{m.chunks} chunk{'s' if m.chunks > 1 else ''} of {result.length} tokens"
    measured = (
        f"On {chunks}, the logits of the LayerNorm model and of the centred RMSNorm model differ by at most "
        f"{significant(m.max_abs_difference)}, {significant(m.max_relative_difference)} of the largest logit "
        f"({significant(m.max_abs_logit)}), against {significant(u.max_relative_difference)} between the centred "
        "model and the model as trained. "
    )
    if m.max_relative_difference > tolerance:
        return measured + (
            f"That is more than the {tolerance:g} that float32 rounding allows: here the map does not hold, and the "
            "LayerNorm swap's loss change cannot be read as the cost of the mean direction alone."
        )
    return measured + (
        f"That is within the {tolerance:g} tolerance for float32 rounding, so the "
        f"{added.added['mean_difference']:+.4f} {NATS_PER_TOKEN} of the LayerNorm swap are exactly the cost of removing the mean "
        "direction from everything written into "
        "SmolLM2's residual stream: they measure how much the trained model uses that direction."
    )


def centring_map_evidence(result: CentringMap) -> dict:
    tolerance = result.tolerance
    return {
        "centring_map_max_relative_difference": result.mapped.max_relative_difference,
        "centring_map_max_abs_difference": result.mapped.max_abs_difference,
        "centring_map_tolerance": tolerance,
        "centring_map_holds": result.mapped.max_relative_difference <= tolerance,
        "centring_map_chunks": result.mapped.chunks,
        "centring_map_tokens_per_chunk": result.length,
        "centred_vs_trained_max_relative_difference": result.unmapped.max_relative_difference,
    }
