"""Which norm a model family uses, read from the installed `transformers` source and classified by behaviour.

For each architecture we find the modules its modeling file assigns to
attributes named like a norm (`self.input_layernorm = LlamaRMSNorm(...)`),
instantiate each norm class at a small width and classify it by behaviour,
not by name (T5's `T5LayerNorm` is an RMSNorm, Cohere's `CohereLayerNorm` is a
bias-free LayerNorm):

- "LayerNorm": the output ignores a shift x + c·1 (mean subtracted);
- "RMSNorm": the output ignores a positive scale but not a shift.
"""

from __future__ import annotations

import importlib
import inspect
import re
import warnings
from dataclasses import dataclass

import torch
from torch import nn

_NORM_ATTRIBUTE = re.compile(r"self\.(\w*(?:norm|ln)\w*)\s*=\s*([\w\.]+)\(", flags=re.IGNORECASE)
PROBE_WIDTH = 16


@dataclass(frozen=True)
class NormUse:
    model_type: str
    attribute: str
    class_name: str
    kind: str  # "LayerNorm", "RMSNorm" or "unclassified"


def _quiet_import(name: str):
    # transformers imports tqdm.auto, which warns in a notebook that ipywidgets is absent: bars stay on the terminal
    from tqdm import TqdmWarning

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=TqdmWarning)
        return importlib.import_module(name)


def transformers_version() -> str:
    return _quiet_import("transformers").__version__


def modeling_module(model_type: str):
    try:
        return _quiet_import(f"transformers.models.{model_type}.modeling_{model_type}")
    except ModuleNotFoundError as error:
        raise ValueError(
            f"transformers has no model type {model_type!r} ({error}); check the spelling, e.g. 'llama'"
        ) from None


def _instantiate(cls: type) -> nn.Module | None:
    # Norm constructors differ in their keyword names; the width is the first positional argument in all seen.
    for args, kwargs in (((PROBE_WIDTH,), {}), ((), {"hidden_size": PROBE_WIDTH}), ((), {"dim": PROBE_WIDTH})):
        try:
            return cls(*args, **kwargs)
        except Exception:  # noqa: BLE001 - any failure means "try the next signature"
            continue
    return None


def classify_norm(module: nn.Module, generator: torch.Generator | None = None) -> str:
    """Classify a norm module by what it is invariant to, on random inputs."""
    with torch.no_grad():
        for parameter in module.parameters():
            # Random gains so that a zero-initialised (offset) gain cannot hide the behaviour.
            parameter.copy_(1 + 0.1 * torch.randn(parameter.shape, generator=generator))
        x = torch.randn(8, PROBE_WIDTH, generator=generator)
        try:
            y = module(x)
        except Exception:  # noqa: BLE001
            return "unclassified"
        if not isinstance(y, torch.Tensor) or y.shape != x.shape:
            return "unclassified"
        scale_change = (module(3.0 * x) - y).abs().max().item()
        shift_change = (module(x + 2.0) - y).abs().max().item()
    if scale_change > 1e-3:
        return "unclassified"
    return "LayerNorm" if shift_change < 1e-3 else "RMSNorm"


def norm_uses(model_type: str, seed: int = 0) -> list[NormUse]:
    """Every norm-like attribute in the architecture's modeling file, with its measured kind."""
    module = modeling_module(model_type)
    generator = torch.Generator().manual_seed(seed)
    uses = []
    for attribute, class_path in _NORM_ATTRIBUTE.findall(inspect.getsource(module)):
        cls = module
        for part in class_path.split("."):
            cls = getattr(cls, part, None)
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)) or cls in (nn.ModuleList, nn.Identity):
            continue
        instance = _instantiate(cls)
        kind = classify_norm(instance, generator) if instance is not None else "unclassified"
        uses.append(NormUse(model_type, attribute, cls.__name__, kind))
    return uses


def dominant_kind(uses: list[NormUse]) -> str:
    """The kind of the decoder-layer norms: the kind most attributes have (ties → 'mixed')."""
    counts: dict[str, int] = {}
    for use in uses:
        if use.kind != "unclassified":
            counts[use.kind] = counts.get(use.kind, 0) + 1
    if not counts:
        return "unclassified"
    ranked = sorted(counts.items(), key=lambda item: -item[1])
    return "mixed" if len(ranked) > 1 and ranked[0][1] == ranked[1][1] else ranked[0][0]


def survey(families, seed: int = 0, progress: bool = True):
    """One row per family: its measured dominant norm kind and the classes behind it.

    `families` is a DataFrame with at least `model_type`; its other columns are kept.
    """
    import pandas as pd

    from normlab.runtime.progress import terminal_progress

    rows = []
    for family in terminal_progress(families.to_dict("records"), desc="architectures", disable=not progress):
        uses = norm_uses(family["model_type"], seed)
        rows.append(
            {
                **family,
                "norm": dominant_kind(uses),
                "norm_classes": ", ".join(sorted({u.class_name for u in uses if u.kind != "unclassified"})),
            }
        )
    return pd.DataFrame(rows)
