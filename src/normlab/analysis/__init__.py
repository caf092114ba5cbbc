"""The chapters' analyses: one module per chapter, returning findings; helpers several chapters use are in `shared/`,
and each chapter's figure functions in `figures/`.

It needs the `study` extra (pandas, matplotlib, seaborn, transformers, ...) besides the norm library and the testbed.
"""

try:
    import matplotlib  # noqa: F401
    import pandas  # noqa: F401
except ImportError as error:  # every chapter's analysis builds tables and figures
    raise ImportError(
        f'normlab.analysis needs the study extra ({error}); install it with `pip install "normlab[study]"`'
    ) from error
