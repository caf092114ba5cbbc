"""Sphinx extension for the API reference page (book/api.md): the backend feature table, read from the code.

- The `normlab-backend-features` directive renders `normlab.norms.backends.features.BACKEND_FEATURES` as a table,
  so the page lists exactly what the dispatch and its refusals use.
- The `normlab-torch-range` directive renders the tested torch range from `src/normlab/norms/torch_range.toml` and
  the matrix's committed results (data/torch-range.json) as a sentence and a table, as the README's block says it.
- normlab's docstrings are plain text, not reStructuredText (they write `x**2` and indent freely), so autodoc shows
  each one as written, in a literal block, rather than letting docutils misread it (and warn, which -W makes fatal).
"""

from __future__ import annotations

from docutils import nodes
from docutils.parsers.rst import Directive

YES, NO = "✓", "—"


def feature_table() -> tuple[list[str], list[list[str]], int]:
    """(header, rows, first feature column): one row per backend, a column per norm and per RMSNorm feature."""
    from normlab.norms.backends import features

    reading_order = [features.WEIGHT, features.RESIDUAL, features.OFFSET, features.EPS_OUTSIDE, features.PARTIAL]
    # A feature added to the table later gets its column too (after these), so the page cannot leave one out.
    rms_features = [f for f in reading_order if f in features.ALL_RMS_FEATURES]
    rms_features += sorted(features.ALL_RMS_FEATURES - set(rms_features))
    norms = [features.NORM_NAMES[n] for n in features.NORMS]
    header = ["backend", "what it is", *norms, *rms_features]
    rows = []
    for name, entry in features.BACKEND_FEATURES.items():
        has_norm = [YES if n in entry.norms else NO for n in features.NORMS]
        has_feature = [YES if "rms" in entry.norms and f in entry.rms_features else NO for f in rms_features]
        rows.append([name, entry.summary, *has_norm, *has_feature])
    return header, rows, len(header) - len(rms_features)


class BackendFeatures(Directive):
    has_content = False

    def run(self):
        header, rows, first_feature = feature_table()
        table = nodes.table(classes=["normlab-features"])
        group = nodes.tgroup(cols=len(header))
        table += group
        group.extend(nodes.colspec(colwidth=1) for _ in header)

        def row(cells, as_code=()):
            line = nodes.row()
            for index, text in enumerate(cells):
                # Code, as the API spells it: a literal is also spared Sphinx's curly quotes.
                content = nodes.literal(text=text) if index in as_code else nodes.Text(text)
                line += nodes.entry("", nodes.paragraph("", "", content))
            return line

        group += nodes.thead("", row(header, as_code=range(first_feature, len(header))))
        group += nodes.tbody("", *(row(cells, as_code=(0,)) for cells in rows))
        return [table]


def _table(header: list[str], rows: list[list[str]], as_code_column: int, css_class: str) -> nodes.table:
    table = nodes.table(classes=[css_class])
    group = nodes.tgroup(cols=len(header))
    table += group
    group.extend(nodes.colspec(colwidth=1) for _ in header)

    def row(cells, code=False):
        line = nodes.row()
        for index, text in enumerate(cells):
            content = nodes.literal(text=text) if code and index == as_code_column else nodes.Text(text)
            line += nodes.entry("", nodes.paragraph("", "", content))
        return line

    group += nodes.thead("", row(header))
    group += nodes.tbody("", *(row(cells, code=True) for cells in rows))
    return table


class TorchRange(Directive):
    has_content = False

    def run(self):
        from normlab.norms import torch_versions
        from normlab.study import torch_matrix

        matrix = torch_matrix.read_matrix()
        sentence = (
            f"Tested: {torch_versions.tested_range()}. normlab refuses at import a torch older than "
            f"{torch_versions.OLDEST}, naming this range. Each cell below installed that torch first, then normlab's "
            f"wheel beside it (which left that torch in place), and ran the kernel tests; measured on "
            f"{matrix['gathered'][:10]} ({matrix['machine']})."
        )
        header, rows = torch_matrix.table_rows(matrix)
        return [nodes.paragraph(text=sentence), _table(header, rows, as_code_column=0, css_class="normlab-torch-range")]


def _docstring_as_written(app, what, name, obj, options, lines):
    if name.startswith("normlab") and lines:
        text = [line.rstrip() for line in lines]
        lines[:] = ["::", "", *(f"    {line}" if line else "" for line in text), ""]


def setup(app):
    app.add_directive("normlab-backend-features", BackendFeatures)
    app.add_directive("normlab-torch-range", TorchRange)
    app.connect("autodoc-process-docstring", _docstring_as_written)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
