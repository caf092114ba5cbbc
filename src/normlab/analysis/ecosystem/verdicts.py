"""Section "Verdicts": A11 (LLaMA, Mistral and Gemma use RMSNorm) and B1 ("almost all" after 2019), judged on
the surveyed families."""

from __future__ import annotations

from normlab.analysis.ecosystem.classify import transformers_version
from normlab.study import design
from normlab.study.findings import Finding
from normlab.study.key_numbers import SHARE, KeyNumber
from normlab.study.results import decide

A11_KEY = KeyNumber("named families (of 3) not measured as RMSNorm", "families")
B1_KEY = KeyNumber("share of the listed families released after 2019 that use RMSNorm", SHARE)

# The families each article names, as model types of the list (data/model_families.csv).
A11_NAMED = ("llama", "mistral", "gemma")  # LLaMA, Mistral, Gemma
B1_NAMED = ("llama", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "deepseek_v3")  # LLaMA, Qwen, Gemma, DeepSeek
B1_AFTER_YEAR = 2019


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
        threshold=design.value("A11", "none_other"),
        spread=float(abs(not_rms - not_rms_again)),
        **A11_KEY.fields(),
        reads=("none_other",),
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
    finding = Finding(
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
        **B1_KEY.fields(),
        reads=("almost_all", "after_year"),
    )
    finding.scale = b1_scale(finding)
    finding.headline = b1_headline(finding)
    return finding


def b1_scale(b1: Finding) -> str:
    """What B1 counted: the listed families released after the cut-off year."""
    count = b1.evidence.get("families_after_2019")
    return (
        f"the {count} model families released after {B1_AFTER_YEAR} that this book lists"
        if count
        else (f"the model families released after {B1_AFTER_YEAR} that this book lists")
    )


def b1_headline(b1: Finding) -> str | None:
    """The opening page's sentence on B1; None without a key number or threshold."""
    k, t = b1.key_number, b1.threshold
    if k is None or t is None:
        return None
    return (
        f"Of {b1.scale or b1_scale(b1)}, {B1_KEY.format(k)} use RMSNorm, "
        f"{'short of' if k < t else 'above'} the {B1_KEY.limit(t)} that 'almost all' needs"
        + {
            "holds with caveats": ", although the families the essay names all do.",
            "does not hold": ", and not even all the families the essay names do.",
        }.get(b1.verdict, ".")
    )


def verdict_paragraphs(records) -> str:
    """Each recorded verdict as a bold id, the verdict and its sentence, one paragraph each."""
    return "\n\n".join(f"**{c['id']}** — {c['verdict']}: {c['summary']}" for c in records)
