"""The chapters' analyses: one package per chapter, one module per section of the chapter, named like its heading
(each package's docstring maps the chapter), returning findings, with the chapter's figures in its `figures.py`.
Helpers that several chapters use are in `shared/`, which imports no chapter.

It needs the `study` extra (pandas, matplotlib, seaborn, transformers, ...) besides the norm library and the testbed.
"""

try:
    import matplotlib  # noqa: F401
    import pandas  # noqa: F401
except ImportError as error:  # every chapter's analysis builds tables and figures
    raise ImportError(
        f'normlab.analysis needs the study extra ({error}); install it with `pip install "normlab[study]"`'
    ) from error
