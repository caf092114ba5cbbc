"""normlab's norms inside HuggingFace transformers models: patched before loading, or swapped after.

Before loading (as Liger-Kernel's `apply_liger_kernel_to_llama`), so `from_pretrained` builds normlab's
modules directly, with any `dtype`, `device_map` and `low_cpu_mem_usage` (meta-device initialisation):

    from normlab.norms import huggingface
    with huggingface.apply_to("llama", backend="auto"):    # or apply_to(...) now, undo("llama") later
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)

`apply_to` replaces the model type's norm class in its transformers module (`MODEL_TYPES` lists the types).
The patched modules keep the attribute names transformers and users read (`weight`, `eps`,
`variance_epsilon`) and the state dict keys, so checkpoints load and `save_pretrained` round-trips; they
round as the model's own norm does (`casting_mode` "llama", or "gemma" for Gemma's 1 + weight gain).

After loading, for a model already built:

    from normlab.norms.huggingface import swap_norms
    swapped = swap_norms(model, backend="compile")          # same maths, normlab kernels
    swap_norms(model, convert="layer_norm")                 # RMSNorm -> LayerNorm, same gain, no bias

`swap_norms` recognises LLaMA-family RMSNorm modules (any class whose name ends in "RMSNorm" and that holds
a `weight` and `variance_epsilon` or `eps`, which covers LlamaRMSNorm and so SmolLM2, Mistral, Qwen2),
torch.nn.RMSNorm and torch.nn.LayerNorm (BERT's LayerNorm is torch.nn.LayerNorm). Gemma's RMSNorm computes
`(1 + weight)`; it is recognised by its class name and swapped with normlab's `offset=1`.

transformers is imported only by `apply_to` and `undo`: `swap_norms` walks `named_modules`, so it works on
any torch model that contains these modules.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import torch
from torch import nn

from normlab.norms.backends.features import AUTO, LLAMA_ROUNDING, OFFSET, WEIGHT, rms_feature_refusal
from normlab.norms.functional import BACKENDS, UnsupportedFeature, _check_backend, rms_norm
from normlab.norms.modules import LayerNorm, RMSNorm
from normlab.norms.validation import check_casting_mode

CONVERSIONS = (None, "layer_norm", "rms_norm")


class RMSNormWithBias(RMSNorm):
    """RMSNorm followed by a bias: what a LayerNorm becomes when its centring is removed but its
    affine parameters are kept (y = x / rms(x) * weight + bias)."""

    def __init__(self, normalized_shape, eps: float = 1e-5, *, backend: str = "auto", device=None, dtype=None):
        super().__init__(normalized_shape, eps, backend=backend, device=device, dtype=dtype)
        self.bias = nn.Parameter(torch.zeros(self.normalized_shape, device=device, dtype=dtype))

    def forward(self, x, residual=None):
        if residual is not None:
            raise ValueError("RMSNormWithBias takes no residual; add it before calling the norm")
        return rms_norm(x, self.weight, self.eps, backend=self.backend) + self.bias


class HFRMSNorm(RMSNorm):
    """normlab's RMSNorm under the names transformers' RMSNorms use: `weight`, `eps` and `variance_epsilon`
    (LlamaRMSNorm's name for eps, which code written against transformers' modules reads)."""

    @property
    def variance_epsilon(self) -> float | None:
        return self.eps

    @variance_epsilon.setter
    def variance_epsilon(self, value: float | None) -> None:
        self.eps = value


def _rms_eps(module: nn.Module) -> float | None:
    for name in ("variance_epsilon", "eps"):
        value = getattr(module, name, None)
        if isinstance(value, (int, float)):
            return float(value)
    return None


def norm_kind(module: nn.Module) -> str | None:
    """'rms_norm', 'layer_norm' or None (not a norm this helper knows)."""
    if isinstance(module, (RMSNorm, LayerNorm)):
        return None  # already normlab's
    if isinstance(module, nn.LayerNorm):
        return "layer_norm"
    if isinstance(module, nn.RMSNorm):
        return "rms_norm"
    if (
        type(module).__name__.endswith("RMSNorm")
        and isinstance(getattr(module, "weight", None), torch.Tensor)
        and _rms_eps(module) is not None
    ):
        return "rms_norm"
    return None


def find_norms(model: nn.Module) -> dict[str, nn.Module]:
    """Every norm module `swap_norms` would replace, by qualified name, in model order."""
    return {name: m for name, m in model.named_modules() if name and norm_kind(m) is not None}


def _replacement(module: nn.Module, kind: str, backend: str, convert: str | None) -> nn.Module:
    weight = getattr(module, "weight", None)
    bias = getattr(module, "bias", None)
    width = module.weight.shape[-1] if weight is not None else module.normalized_shape[-1]
    factory = {"device": weight.device, "dtype": weight.dtype} if weight is not None else {}
    target = convert or kind
    if kind == "rms_norm":
        eps = _rms_eps(module)
        if eps is None:  # torch.nn.RMSNorm with eps=None uses the dtype's machine epsilon
            eps = torch.finfo(weight.dtype if weight is not None else torch.get_default_dtype()).eps
        offset = 1.0 if type(module).__name__.startswith("Gemma") else 0.0
        if target == "rms_norm":
            new = HFRMSNorm(
                width, eps, elementwise_affine=weight is not None, offset=offset, backend=backend, **factory
            )
            if weight is not None:
                new.weight.data.copy_(weight.detach())
            return new
        # Centring added: LayerNorm with the same gain (offset folded in) and no bias.
        new = LayerNorm(width, eps, elementwise_affine=weight is not None, bias=False, backend=backend, **factory)
        if weight is not None:
            new.weight.data.copy_(weight.detach() + offset)
        return new
    eps = float(module.eps)
    if target == "layer_norm":
        new = LayerNorm(
            width, eps, elementwise_affine=weight is not None, bias=bias is not None, backend=backend, **factory
        )
        if weight is not None:
            new.weight.data.copy_(weight.detach())
        if bias is not None:
            new.bias.data.copy_(bias.detach())
        return new
    # Centring removed: RMSNorm with the same gain and, if the LayerNorm had one, the same bias.
    if bias is not None:
        new = RMSNormWithBias(width, eps, backend=backend, **factory)
        new.bias.data.copy_(bias.detach())
    else:
        new = RMSNorm(width, eps, elementwise_affine=weight is not None, backend=backend, **factory)
    if weight is not None:
        new.weight.data.copy_(weight.detach())
    return new


def _set_submodule(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)


def swap_norms(
    model: nn.Module, backend: str = "auto", *, convert: str | None = None, only=None
) -> dict[str, nn.Module]:
    """Replace the model's norms in place by normlab modules with the same weights; return the originals.

    backend: any normlab backend ('reference', 'eager', 'torch', 'compile', 'triton', 'auto').
    convert: None keeps each norm's kind; 'layer_norm' turns every RMSNorm into a LayerNorm with the
        same gain and no bias (centring added); 'rms_norm' turns every LayerNorm into an RMSNorm with
        the same gain and bias (centring removed).
    only: optional collection of module names (as in `find_norms`) to swap; the rest stay as they are.

    The returned dict maps each swapped name to its original module, so `restore_norms(model, originals)`
    undoes the swap.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid backends: {', '.join(BACKENDS)}")
    if convert not in CONVERSIONS:
        raise ValueError(f"convert must be one of {CONVERSIONS}, got {convert!r}")
    norms = find_norms(model)
    if not norms:
        raise ValueError(
            f"{type(model).__name__} has no norm module swap_norms recognises "
            "(LLaMA-family *RMSNorm, torch.nn.RMSNorm, torch.nn.LayerNorm)"
        )
    if only is not None:
        only = list(only)
        unknown = [name for name in only if name not in norms]
        if unknown:
            raise ValueError(
                f"only= names {unknown[:3]} are not norms of this model; "
                f"valid names look like {list(norms)[:2]} (see find_norms)"
            )
        norms = {name: norms[name] for name in only}
    for name, module in norms.items():
        _set_submodule(model, name, _replacement(module, norm_kind(module), backend, convert))
    return norms


def restore_norms(model: nn.Module, originals: dict[str, nn.Module]) -> None:
    """Put back the modules that `swap_norms` returned."""
    for name, module in originals.items():
        _set_submodule(model, name, module)


# ---------------------------------------------------------------- patching a model type before it is loaded


@dataclass(frozen=True)
class ModelType:
    """Where a transformers model type defines its norm, and what that norm computes."""

    module: str  # the transformers module that defines the class and builds its layers from it
    norm_class: str
    offset: float  # 1.0: the gain is 1 + weight (Gemma)
    casting_mode: str  # the rounding order of the model's own norm (see normlab.norms.functional.rms_norm)


MODEL_TYPES = {
    "llama": ModelType("transformers.models.llama.modeling_llama", "LlamaRMSNorm", 0.0, "llama"),
    "mistral": ModelType("transformers.models.mistral.modeling_mistral", "MistralRMSNorm", 0.0, "llama"),
    "qwen2": ModelType("transformers.models.qwen2.modeling_qwen2", "Qwen2RMSNorm", 0.0, "llama"),
    "qwen3": ModelType("transformers.models.qwen3.modeling_qwen3", "Qwen3RMSNorm", 0.0, "llama"),
    "gemma": ModelType("transformers.models.gemma.modeling_gemma", "GemmaRMSNorm", 1.0, "gemma"),
}


@dataclass(frozen=True)
class Patch:
    """One model type's norm class replaced by normlab's; `undo()` or leaving a `with` block puts it back."""

    model_type: str
    original: type  # transformers' class
    patched: type  # the class from_pretrained now builds
    backend: str
    casting_mode: str

    def undo(self) -> None:
        undo(self.model_type)

    def __enter__(self) -> Patch:
        return self

    def __exit__(self, *exc) -> None:
        self.undo()


_APPLIED: dict[str, Patch] = {}


def _model_type(model_type: str) -> ModelType:
    if model_type not in MODEL_TYPES:
        raise ValueError(
            f"apply_to knows no model type {model_type!r}; known types: {', '.join(MODEL_TYPES)} "
            "(for another model, build it and call swap_norms(model))"
        )
    return MODEL_TYPES[model_type]


def _transformers_module(spec: ModelType):
    try:
        return importlib.import_module(spec.module)
    except ImportError as error:
        raise ImportError(
            f"apply_to patches transformers' {spec.norm_class}, but {spec.module} cannot be imported ({error}); "
            "install transformers (`pip install transformers`)"
        ) from error


def needed_features(model_type: str, casting_mode: str | None = None) -> set[str]:
    """The RMSNorm features a model type's norms ask of a backend (its offset, its rounding order)."""
    spec = _model_type(model_type)
    needed = {WEIGHT}
    if spec.offset:
        needed.add(OFFSET)
    if (casting_mode or spec.casting_mode) == "llama":
        needed.add(LLAMA_ROUNDING)
    return needed


def _refuse_lacking_backend(model_type: str, backend: str, casting_mode: str) -> None:
    if backend == AUTO:  # auto routes each call to a backend that has what it asks for
        return
    refusal = rms_feature_refusal(backend, needed_features(model_type, casting_mode))
    if refusal is not None:
        rounding = " (or casting_mode='none', which rounds once)" if casting_mode == "llama" else ""
        raise UnsupportedFeature(f"a patched {model_type} model cannot run on it: {refusal}{rounding}")


def _patched_class(original: type, spec: ModelType, backend: str, casting_mode: str) -> type:
    class Patched(HFRMSNorm):
        replaces = original

        # transformers' own signature (hidden_size, eps), so its modelling code builds this class unchanged.
        def __init__(self, hidden_size, eps: float = 1e-6):
            super().__init__(hidden_size, eps, offset=spec.offset, casting_mode=casting_mode, backend=backend)

    # "RMSNorm" in the name: transformers' _init_weights recognises norms by name (Gemma's starts its weight at 0).
    Patched.__name__ = Patched.__qualname__ = f"Normlab{original.__name__}"
    Patched.__doc__ = f"normlab's RMSNorm (backend={backend!r}) in place of transformers' {original.__name__}."
    return Patched


def apply_to(model_type: str, backend: str = "auto", *, casting_mode: str | None = None) -> Patch:
    """Patch `model_type`'s norm class, so that models built from now on (from_pretrained included) use normlab's.

    model_type: a key of MODEL_TYPES ("llama", "mistral", "qwen2", "qwen3", "gemma").
    backend: a normlab backend; one that lacks what the model's norm needs (its offset, its rounding) is
        refused here, before anything is loaded, naming the feature and a backend that has it.
    casting_mode: None keeps the model's own rounding ("llama", "gemma"); "none" rounds once.

    Applying the same patch again is a no-op; applying it with other settings replaces the first (transformers'
    class is kept as the one to restore, never wrapped twice). Returns the Patch, a context manager that undoes
    it on exit. Models built while it was applied keep normlab's modules after the undo.
    """
    spec = _model_type(model_type)
    _check_backend(backend)
    check_casting_mode(casting_mode)
    casting_mode = casting_mode or spec.casting_mode
    _refuse_lacking_backend(model_type, backend, casting_mode)
    module = _transformers_module(spec)
    current = _APPLIED.get(model_type)
    if current is not None and getattr(module, spec.norm_class) is current.patched:
        if (current.backend, current.casting_mode) == (backend, casting_mode):
            return current
        original = current.original
    else:
        original = getattr(module, spec.norm_class)
    patch = Patch(model_type, original, _patched_class(original, spec, backend, casting_mode), backend, casting_mode)
    setattr(module, spec.norm_class, patch.patched)
    _APPLIED[model_type] = patch
    return patch


def undo(model_type: str) -> None:
    """Put back transformers' own norm class for `model_type`; nothing to do if it is not patched."""
    spec = _model_type(model_type)
    patch = _APPLIED.pop(model_type, None)
    if patch is not None:
        setattr(_transformers_module(spec), spec.norm_class, patch.original)


def applied() -> dict[str, Patch]:
    """The patches in force, by model type."""
    return dict(_APPLIED)
