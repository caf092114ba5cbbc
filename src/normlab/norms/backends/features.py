"""What each backend implements: which norms, and which optional RMSNorm features.

The one table behind functional's dispatch and refusals, DyT's backend check and the GPT model's
config check. HuggingFace's norms and F.rms_norm put ε inside the square root over the whole row,
so "eager" and "torch" have no "outside" placement and no partial RMS. The offset gain (Gemma) is a
weight pre-add that any backend can do. The Triton kernels round once, so LLaMA's extra rounding
(casting_mode="llama") is not theirs; the CPU kernel takes float32/float64 only, where that rounding
changes nothing. LayerNorm's features (weight, bias, residual) are universal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

NORMS = ("rms", "layer", "dyt")
NORM_NAMES = {"rms": "RMSNorm", "layer": "LayerNorm", "dyt": "DyT"}

# The optional RMSNorm features, named as the error messages name them.
WEIGHT = "weight"
RESIDUAL = "residual"
OFFSET = "offset"
EPS_OUTSIDE = "eps_placement='outside'"
PARTIAL = "partial"
LLAMA_ROUNDING = "casting_mode='llama'"
ALL_RMS_FEATURES = frozenset({WEIGHT, RESIDUAL, OFFSET, EPS_OUTSIDE, PARTIAL, LLAMA_ROUNDING})
_WHOLE_ROW_EPS_INSIDE = frozenset({WEIGHT, RESIDUAL, OFFSET, LLAMA_ROUNDING})


@dataclass(frozen=True)
class BackendFeatures:
    summary: str  # what the backend is, as a message says it ("'cpp' is an RMSNorm kernel")
    norms: frozenset[str]  # of NORMS
    rms_features: frozenset[str]  # of ALL_RMS_FEATURES
    kernel: str = ""  # for a backend of its own kernels: what a norm it lacks has none of ("Triton kernel")
    why_not: dict[str, str] = field(default_factory=dict)  # per norm it lacks, why, when worth telling


_EVERY_NORM = frozenset(NORMS)

BACKEND_FEATURES = {
    "reference": BackendFeatures("the float64-capable specification", _EVERY_NORM, ALL_RMS_FEATURES),
    "eager": BackendFeatures("the unfused composite (HuggingFace's ops)", _EVERY_NORM, _WHOLE_ROW_EPS_INSIDE),
    "torch": BackendFeatures("PyTorch's native ops", _EVERY_NORM, _WHOLE_ROW_EPS_INSIDE),
    "compile": BackendFeatures("the composite compiled by inductor", _EVERY_NORM, ALL_RMS_FEATURES),
    "triton": BackendFeatures(
        "a set of RMSNorm and LayerNorm kernels",
        frozenset({"rms", "layer"}),
        ALL_RMS_FEATURES - {LLAMA_ROUNDING},
        kernel="Triton kernel",
    ),
    "cpp": BackendFeatures(
        "an RMSNorm kernel",
        frozenset({"rms"}),
        ALL_RMS_FEATURES - {PARTIAL},
        kernel="C++ kernel",
        why_not={"layer": "on CPU, PyTorch's native LayerNorm is already one pass each way"},
    ),
}

AUTO = "auto"  # not a backend of its own: it picks one of the table's for each call
BACKENDS = (*BACKEND_FEATURES, AUTO)
RMS_FEATURES = {name: entry.rms_features for name, entry in BACKEND_FEATURES.items() if "rms" in entry.norms}


def _listed(names) -> str:
    quoted = [repr(name) for name in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def backends_for(norm: str) -> tuple[str, ...]:
    """The backends that implement `norm`, in the table's order, then 'auto'."""
    return (*(name for name, entry in BACKEND_FEATURES.items() if norm in entry.norms), AUTO)


def backend_choices(norm: str) -> str:
    """The backends for `norm`, written for a message: "'reference', 'eager', ... or 'auto'"."""
    return _listed(backends_for(norm))


def lacking_norm(backend: str, norm: str) -> str | None:
    """None if `backend` implements `norm`, else what is missing: "LayerNorm has no C++ kernel (why)"."""
    entry = BACKEND_FEATURES.get(backend)
    if entry is None or norm in entry.norms:
        return None
    what = entry.kernel or f"{backend!r} implementation"
    why = entry.why_not.get(norm)
    return f"{NORM_NAMES[norm]} has no {what}" + (f" ({why})" if why else "")


def norm_refusal(backend: str, norm: str) -> str | None:
    """None if `backend` implements `norm`, else a sentence saying so (without the backends to use instead)."""
    missing = lacking_norm(backend, norm)
    if missing is None:
        return None
    implemented = " and ".join(NORM_NAMES[n] for n in NORMS if n in BACKEND_FEATURES[backend].norms)
    return f"backend {backend!r} implements {implemented} only: {missing}"


def requested_rms_features(weight, residual, offset, eps_placement, partial) -> set[str]:
    """The optional features an RMSNorm call asks for (weight, residual: a tensor or None).

    LLaMA's rounding is not among them: it matters only where the weight is applied (see functional.rms_norm)."""
    requested = set()
    if weight is not None:
        requested.add(WEIGHT)
    if residual is not None:
        requested.add(RESIDUAL)
    if offset != 0:
        requested.add(OFFSET)
    if eps_placement == "outside":
        requested.add(EPS_OUTSIDE)
    if partial != 1.0:
        requested.add(PARTIAL)
    return requested


def rms_feature_refusal(backend: str, requested: set[str]) -> str | None:
    """None if `backend` has every requested RMSNorm feature, else what it lacks and which backends have them."""
    missing = requested - RMS_FEATURES[backend]
    if not missing:
        return None
    having = [name for name, features in RMS_FEATURES.items() if requested <= features]
    return (
        f"backend {backend!r} does not support {', '.join(sorted(missing))}; "
        f"use backend={having[0]!r} (also: {', '.join(having[1:])}) or backend='auto'"
    )
