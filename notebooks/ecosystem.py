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
#
# The classification probes each norm with random inputs; the survey runs twice, with two probe seeds, and the
# verdicts' spreads are how far their numbers move between the two.

# %% tags=["parameters", "remove-cell"]
profile = "smoke"
results_dir = "build/results"

# %% tags=["remove-cell"]
import matplotlib.pyplot as plt
from IPython.display import Markdown

from normlab.analysis.ecosystem import classify, family_norms, figures, verdicts
from normlab.study import Results, design
from normlab.study.present import claims_box, verdict_table
from normlab.study.present import table as html_table
from normlab.study.prose import percent, state

ALMOST_ALL = design.value("B1", "almost_all")  # B1's "almost all": a share of the families released after 2019
state(almost_all=percent(ALMOST_ALL))
results = Results("ecosystem", profile, results_dir)
families = family_norms.read_families("data/model_families.csv")  # read from source code: the same in every profile
table, table_again = (family_norms.dated_survey(families, seed) for seed in (0, 1))

# %% tags=["remove-input"]
claims_box(["A11", "B1"])

# %% [markdown]
# (ecosystem-families)=
# ## The norm of each family, by release date
#
# {numref}`fig-ecosystem-years` counts the families of the list by year and by the norm their decoder layers measure as;
# the {ref}`table <tab-ecosystem-families>` below it gives each family, its classes and the source of its date.

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Model families of the list by year of first release, coloured by the norm their decoder layers measure as in transformers' code (classified by behaviour, not by name). What to see: RMSNorm takes over from 2023, but LayerNorm families keep appearing after 2019.", "name": "fig-ecosystem-years"}}
figures.years(family_norms.families_by_year(table))
plt.show()

# %% tags=["remove-input"]
html_table(
    table[["family", "first_release", "norm", "norm_classes", "source"]],
    caption=f"Each family's measured norm and the classes behind it (transformers {classify.transformers_version()}).",
)

# %% [markdown]
# (tab-ecosystem-families)=
# The table above lists every family; "norm" is what the classes do, not what they are called.

# %% [markdown]
# (ecosystem-verdicts)=
# ## Verdicts
#
# A11 holds if all three named families measure as RMSNorm. For B1, "almost all" is
# taken as at least {glue:text}`almost_all` of the listed families first released after 2019; the four
# families the essay names must also be RMSNorm.

# %% tags=["remove-cell"]
verdicts.a11_named_families(table, table_again).record(results, "A11", "ecosystem-families")
verdicts.b1_almost_all(table, table_again, ALMOST_ALL).record(results, "B1", "ecosystem-families")

# %% tags=["remove-input"]
Markdown(verdicts.verdict_paragraphs(results.claims))

# %% [markdown]
# ## Verdicts

# %% tags=["remove-input"]
verdict_table(results)

# %% tags=["remove-cell"]
_ = results.save()
