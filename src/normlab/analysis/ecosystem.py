"""Which norm do real model families use? Read from the installed `transformers` source.

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

from normlab.study.findings import Finding
from normlab.study.results import decide

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


# ---------------------------------------------------------------- the chapter: the survey and its verdicts

# The families each article names, as model types of the list (data/model_families.csv).
A11_NAMED = ("llama", "mistral", "gemma")  # LLaMA, Mistral, Gemma
B1_NAMED = ("llama", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "deepseek_v3")  # LLaMA, Qwen, Gemma, DeepSeek
B1_AFTER_YEAR = 2019


def read_families(path):
    import pandas as pd

    return pd.read_csv(path, dtype=str)


def dated_survey(families, seed: int = 0, progress: bool = True):
    """`survey` with each family's year of first release (the first four characters of `first_release`)."""
    table = survey(families, seed, progress)
    table["year"] = table["first_release"].str[:4].astype(int)
    return table


def families_by_year(table):
    """Count of families per year of first release (rows) and measured norm (columns)."""
    return table.groupby(["year", "norm"]).size().unstack(fill_value=0)


def _kinds(table) -> dict[str, str]:
    return dict(zip(table["model_type"], table["norm"]))


def a11_named_families(table, table_again) -> Finding:
    """A11 holds if none of the named families measures as anything but RMSNorm; the second table is the same survey
    with another probe seed, and the spread is how far the count moves between the two."""
    kind, version = _kinds(table), transformers_version()
    not_rms = sum(kind[m] != "RMSNorm" for m in A11_NAMED)
    not_rms_again = sum(_kinds(table_again)[m] != "RMSNorm" for m in A11_NAMED)
    return Finding(
        decide(all(kind[m] == "RMSNorm" for m in A11_NAMED)),
        f"LLaMA, Mistral and Gemma measure as {', '.join(kind[m] for m in A11_NAMED)} in transformers {version}.",
        {"kinds": {m: kind[m] for m in A11_NAMED}, "transformers": version},
        key_number=not_rms,
        threshold=0.5,
        spread=float(abs(not_rms - not_rms_again)),
        rule="Holds if none of the three named families measures as anything but RMSNorm (key number: how many do).",
    )


def b1_almost_all(table, table_again, almost_all: float) -> Finding:
    """B1: the named families must all be RMSNorm (else "does not hold"), and "almost all" means a share of at least
    `almost_all` of the listed families released after B1_AFTER_YEAR (a smaller share gives a caveat)."""
    if not 0 < almost_all <= 1:
        raise ValueError(f"almost_all must be a share in (0, 1], got {almost_all}")
    kind = _kinds(table)
    after = table[table["year"] > B1_AFTER_YEAR]
    rms_share = float((after["norm"] == "RMSNorm").mean())
    again = table_again[table_again["first_release"].str[:4].astype(int) > B1_AFTER_YEAR]
    rms_share_again = float((again["norm"] == "RMSNorm").mean())
    share_spread = abs(rms_share - rms_share_again) / 2**0.5  # sd of two probe draws: |a − b| / √2
    layer_norm_families = after.loc[after["norm"] == "LayerNorm", "family"].tolist()
    named_all_rms = all(kind[m] == "RMSNorm" for m in B1_NAMED)
    short = rms_share < almost_all
    named = "all use RMSNorm" if named_all_rms else "do not all use RMSNorm"
    listed = f"{'but' if short else 'and'} of {len(after)} listed families released after {B1_AFTER_YEAR}"
    others = f": {', '.join(layer_norm_families)} use LayerNorm." if layer_norm_families else "."
    return Finding(
        decide(named_all_rms, caveat=short),
        f"The named families (LLaMA, Qwen, Gemma, DeepSeek) {named}, {listed} {'only ' if short else ''}"
        f"{rms_share:.0%} do{others}",
        {
            "rms_share_after_2019": rms_share,
            "families_after_2019": len(after),
            "layer_norm_families": layer_norm_families,
            "rms_share_by_year": after.groupby("year")["norm"]
            .apply(lambda s: float((s == "RMSNorm").mean()))
            .to_dict(),
            "rms_share_second_probe_seed": rms_share_again,
        },
        key_number=rms_share,
        threshold=almost_all,
        spread=share_spread,
        rule=f"Holds if the named families are all RMSNorm and at least {almost_all:.0%} of the listed families released "
        f"after {B1_AFTER_YEAR} are; named families all RMSNorm but a smaller share gives a caveat; a named family that "
        "is not gives 'does not hold'.",
    )


def verdict_paragraphs(records) -> str:
    """Each recorded verdict as a bold id, the verdict and its sentence, one paragraph each."""
    return "\n\n".join(f"**{c['id']}** — {c['verdict']}: {c['summary']}" for c in records)
