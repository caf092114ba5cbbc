# %% [markdown]
# # Who actually uses RMSNorm?
#
# Article A says LLaMA, Mistral and Gemma use RMSNorm (A11). Article B goes further:
# large models trained after 2019 "almost all" use it (B1). Both are checkable against
# the reference implementations in Hugging Face `transformers`, installed with this
# project. For each architecture we find every module its modeling file assigns to a
# norm-like attribute, instantiate the class, and classify it **by behaviour**: a
# LayerNorm ignores a shift $x + c\mathbf 1$, an RMSNorm ignores only a positive scale.
# Names are not trusted: T5's `T5LayerNorm` is an RMSNorm.
#
# The list of families and their first-release dates is in `data/model_families.csv`,
# with a source for each date. It is a selection of well-known open decoder families
# with a `transformers` implementation, not a census: the share below is of this list.

# %% tags=["parameters", "remove-cell"]
profile = "smoke"
results_dir = "build/results"

# %% tags=["remove-cell"]
settings = {
    # The survey reads source code, so it is equally cheap in every profile.
    "smoke": {"families_csv": "data/model_families.csv", "almost_all": 0.9},
    "cpu": {"families_csv": "data/model_families.csv", "almost_all": 0.9},
    "gpu": {"families_csv": "data/model_families.csv", "almost_all": 0.9},
}[profile]
if not 0 < settings["almost_all"] <= 1:
    raise ValueError(f"almost_all must be a share in (0, 1], got {settings['almost_all']}")

import warnings

import matplotlib.pyplot as plt
import pandas as pd
from tqdm import TqdmWarning

# transformers imports tqdm.auto, which warns that ipywidgets is absent: bars stay on the terminal here anyway
warnings.filterwarnings("ignore", category=TqdmWarning)
import transformers  # noqa: E402
from IPython.display import Markdown

from normlab.analysis.ecosystem import survey
from normlab.study import Results, decide
from normlab.study.present import claims_box, verdict_table
from normlab.study.present import table as html_table

results = Results("ecosystem", profile, results_dir)
families = pd.read_csv(settings["families_csv"], dtype=str)
table = survey(families)
table["year"] = table["first_release"].str[:4].astype(int)
# The classification probes each norm with random inputs; a second probe seed gives the spread of the shares below.
table_again = survey(families, seed=1)

# %% tags=["remove-input"]
claims_box(["A11", "B1"])

# %% [markdown]
# (ecosystem-families)=
# ## The norm of each family, by release date
#
# {numref}`fig-ecosystem-years` counts the families of the list by year and by the norm their decoder layers measure as;
# the {ref}`table <tab-ecosystem-families>` below it gives each family, its classes and the source of its date.

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Model families of the list by year of first release, coloured by the norm their decoder layers measure as in transformers' code (classified by behaviour, not by name). What to see: RMSNorm takes over from 2023, but LayerNorm families keep appearing after 2019.", "name": "fig-ecosystem-years"}}
palette = {"RMSNorm": "tab:blue", "LayerNorm": "tab:orange", "mixed": "tab:gray", "unclassified": "tab:gray"}
counts = table.groupby(["year", "norm"]).size().unstack(fill_value=0)
ax = counts.plot(kind="bar", stacked=True, color=[palette[c] for c in counts.columns], figsize=(7, 3.5))
ax.set_xlabel("year of first release")
ax.set_ylabel("model families (count)")
plt.tight_layout()
plt.show()

# %% tags=["remove-input"]
html_table(
    table[["family", "first_release", "norm", "norm_classes", "source"]],
    caption=f"Each family's measured norm and the classes behind it (transformers {transformers.__version__}).",
)

# %% [markdown]
# (tab-ecosystem-families)=
# The table above lists every family; "norm" is what the classes do, not what they are called.

# %% [markdown]
# (ecosystem-verdicts)=
# ## Verdicts
#
# A11 holds if all three named families measure as RMSNorm. For B1, "almost all" is
# taken as at least 90% of the listed families first released after 2019; the four
# families the essay names must also be RMSNorm.

# %% tags=["remove-cell"]
kind = dict(zip(table["model_type"], table["norm"]))
named_a11 = ["llama", "mistral", "gemma"]
a11_all_rms = all(kind[m] == "RMSNorm" for m in named_a11)
results.record(
    "A11",
    decide(a11_all_rms),
    f"LLaMA, Mistral and Gemma measure as {', '.join(kind[m] for m in named_a11)} in transformers "
    f"{transformers.__version__}.",
    {"kinds": {m: kind[m] for m in named_a11}, "transformers": transformers.__version__},
    section="ecosystem-families",
    key_number=sum(kind[m] != "RMSNorm" for m in named_a11),
    threshold=0.5,
    spread=float(
        abs(
            sum(kind[m] != "RMSNorm" for m in named_a11)
            - sum(dict(zip(table_again["model_type"], table_again["norm"]))[m] != "RMSNorm" for m in named_a11)
        )
    ),
    rule="Holds if none of the three named families measures as anything but RMSNorm (key number: how many do).",
)

named_b1 = ["llama", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "deepseek_v3"]
after_2019 = table[table["year"] > 2019]
rms_share = float((after_2019["norm"] == "RMSNorm").mean())
rms_share_again = float(
    (table_again[table_again["first_release"].str[:4].astype(int) > 2019]["norm"] == "RMSNorm").mean()
)
# sd of two probe draws: |a − b| / √2
share_spread = abs(rms_share - rms_share_again) / 2**0.5
layer_norm_families = after_2019.loc[after_2019["norm"] == "LayerNorm", "family"].tolist()
named_all_rms = all(kind[m] == "RMSNorm" for m in named_b1)
results.record(
    "B1",
    decide(named_all_rms, caveat=rms_share < settings["almost_all"]),
    f"The named families (LLaMA, Qwen, Gemma, DeepSeek) all use RMSNorm, but of {len(after_2019)} listed families "
    f"released after 2019 only {rms_share:.0%} do: {', '.join(layer_norm_families)} use LayerNorm.",
    {
        "rms_share_after_2019": rms_share,
        "families_after_2019": len(after_2019),
        "layer_norm_families": layer_norm_families,
        "rms_share_by_year": after_2019.groupby("year")["norm"]
        .apply(lambda s: float((s == "RMSNorm").mean()))
        .to_dict(),
        "rms_share_second_probe_seed": rms_share_again,
    },
    section="ecosystem-families",
    key_number=rms_share,
    threshold=settings["almost_all"],
    spread=share_spread,
    rule="Holds if the named families are all RMSNorm and at least 90% of the listed families released after 2019 are; "
    "named families all RMSNorm but a smaller share gives a caveat; a named family that is not gives 'does not hold'.",
)

# %% tags=["remove-input"]
Markdown("\n\n".join(f"**{c['id']}** — {c['verdict']}: {c['summary']}" for c in results.claims))

# %% [markdown]
# ## Verdicts

# %% tags=["remove-input"]
verdict_table(results)

# %% tags=["remove-cell"]
_ = results.save()
