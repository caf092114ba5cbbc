"""Sphinx extension: refuse to build a partial or stale book.

The book renders notebooks that `make notebooks` executed and pages that
`make ledger` generated; it never executes anything itself. A bare
`jupyter-book build .` on a fresh clone, or after a chapter failed or its
inputs changed, would otherwise publish a book with chapters missing or with
verdicts that no longer follow from the code. This extension checks, before
Sphinx reads any page, that every chapter in the table of contents has a
notebook, a complete executed copy and results, that its inputs are unchanged
since it ran, that every notebook is in the table of contents, and that the
generated pages are newer than the results. Otherwise it stops with one line
that says what to run.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

GENERATED = (
    "build/pages/intro",
    "build/pages/ledger",
    "build/pages/contested",
    "build/pages/design",
    "build/pages/reproducibility",
)


def _toc_files(toc: dict) -> list[str]:
    files = [toc["root"]] if "root" in toc else []

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                files.append(node["file"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk({k: v for k, v in toc.items() if k != "root"})
    return [f.removesuffix(".md").removesuffix(".ipynb") for f in files]


def problems(root: Path) -> list[str]:
    """Everything that stops this checkout's book from being complete and current; [] when it can be built."""
    import yaml

    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files = _toc_files(toc)
    found = []
    for page in files:
        if page.startswith("build/executed/"):
            continue
        if not any((root / f"{page}{suffix}").exists() for suffix in (".md", ".ipynb")):
            fix = (
                "`make ledger` (or `make book`)"
                if page.startswith("build/pages/")
                else "restore it or remove it from _toc.yml"
            )
            found.append(f"{page}.md is missing: run {fix}")
    chapters = [f.split("/", 2)[2] for f in files if f.startswith("build/executed/")]
    notebooks = {p.stem for p in (root / "notebooks").glob("*.py")}
    for name in sorted(notebooks - set(chapters)):
        found.append(f"notebooks/{name}.py is not in _toc.yml: add `- file: build/executed/{name}`")
    # The fingerprint must look at this source tree's notebooks and data, even when normlab was installed from
    # another checkout.
    os.environ.setdefault("NORMLAB_ROOT", str(root))
    try:
        from normlab.study import paths, run

        if paths.ROOT != root.resolve():
            found.append(f"normlab reads its inputs from {paths.ROOT}, not this book's {root}: unset NORMLAB_ROOT")
    except ImportError:
        run = None
    results_dir = root / "build" / "results"
    newest_result = 0.0
    for name in chapters:
        executed = root / "build" / "executed" / f"{name}.ipynb"
        result = results_dir / f"{name}.json"
        stamp = root / "build" / "executed" / f"{name}.fingerprint"
        if name not in notebooks:
            found.append(f"_toc.yml lists chapter {name!r} but notebooks/{name}.py does not exist: remove the entry")
            continue
        if not executed.exists() or not result.exists():
            failed = root / "build" / "failed" / f"{name}.ipynb"
            why = (
                f"its last run failed (see {failed.relative_to(root)})"
                if failed.exists()
                else "it has not been executed"
            )
            found.append(f"chapter {name!r} is missing: {why}; run `make book` (or `make notebooks FORCE={name}`)")
            continue
        newest_result = max(newest_result, result.stat().st_mtime)
        if run is not None:
            try:
                recorded = json.loads(stamp.read_text())
                parameters = recorded["parameters"]
            except (OSError, json.JSONDecodeError, KeyError, TypeError):
                found.append(
                    f"chapter {name!r} has no valid run stamp: run `make book` (or `make notebooks FORCE={name}`)"
                )
                continue
            if run.fingerprint(name, parameters, results_dir) != recorded.get("fingerprint"):
                found.append(
                    f"chapter {name!r} is stale (its notebook, the package or its inputs changed since it ran): "
                    f"run `make book`"
                )
    ledger = root / "build" / "pages" / "ledger.md"
    if ledger.exists() and newest_result > ledger.stat().st_mtime:
        found.append("the ledger is older than the results: run `make ledger` (or `make book`)")
    return found


def check(app, config) -> None:
    root = Path(app.srcdir)
    found = problems(root)
    if found:
        more = f" (and {len(found) - 1} more problem{'s' if len(found) > 2 else ''})" if len(found) > 1 else ""
        print(
            f"normlab: cannot build a complete book: {found[0]}{more}. `make book` runs the chapters, "
            f"the ledger and this build in order.",
            file=sys.stderr,
        )
        raise SystemExit(2)  # not an Exception: jupyter-book would wrap one in a traceback and a banner


def _page_assets(app, pagename, templatename, context, doctree) -> None:
    """Keep the page offline and its console clean.

    sphinx-thebe (always loaded by jupyter-book, unused here: no Binder) adds its inline configuration twice,
    a `const` redeclaration that is a console error on every page, and it points at a CDN. The theme's mode
    defaults to an empty string, which its script reports as an error on a first visit.
    """
    scripts = context.get("script_files")
    if scripts is not None:
        context["script_files"] = [
            js
            for js in scripts
            if "THEBE_JS_URL" not in (getattr(js, "attributes", {}) or {}).get("body", "")
            and "sphinx-thebe" not in str(getattr(js, "filename", js) or "")
        ]
    context.setdefault("default_mode", "light")


def _add_static(app) -> None:
    app.config.html_static_path.append(str(Path(__file__).parent / "static"))


def _root_favicon(app, exception) -> None:
    """A /favicon.ico: browsers ask for it on pages without an icon link (jupyter-book's index redirect), and a 404 is
    a console error."""
    if exception is None and app.builder.format == "html":
        from PIL import Image

        Image.new("RGB", (32, 32), (42, 157, 143)).save(Path(app.outdir) / "favicon.ico", format="ICO")


def source_number_problem(text: str, registered) -> tuple[str, str, str | None]:
    """Read the {source} role's `ID.NAME=VALUE`; return (value as written, where, problem or None). `registered` is
    normlab.study.design.source_number: a page's VALUE that differs from the design's copy is a problem naming both."""
    from normlab.study.prose import number_text

    key, sep, written = text.partition("=")
    claim_id, dot, name = key.strip().partition(".")
    written = written.strip()
    if not (sep and dot and claim_id and name and written):
        return (
            written,
            "",
            f"{{source}}`{text}`: write it as {{source}}`ID.NAME=VALUE`, e.g. {{source}}`V6.small_budget=27.3`",
        )
    try:
        number = registered(claim_id, name)
    except ValueError as error:
        return written, "", f"{{source}}`{text}`: {error}"
    try:
        agrees = abs(float(written.replace("×", "e").replace(" ", "")) - float(number["value"])) <= 1e-9 * max(
            1.0, abs(float(number["value"]))
        )
    except ValueError:
        agrees = written == number_text(number["value"])
    if not agrees:
        return (
            written,
            number["where"],
            (
                f"{{source}}`{text}`: the page writes {written} but the design's copy of {claim_id}.{name} is "
                f"{number_text(number['value'])} {number['unit']} ({number['where']}); correct the page or the design's "
                "copy, whichever differs from the source"
            ),
        )
    return written, f"{number['where']} ({number['unit']})", None


def _source_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """{source}`ID.NAME=VALUE`: a source's number as the page writes it, checked against the registered design."""
    from docutils import nodes

    from normlab.study import design

    written, where, problem = source_number_problem(text, design.source_number)
    if problem:
        message = inliner.reporter.error(problem, line=lineno)
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    return [nodes.abbreviation(rawtext, written, explanation=where)], []


def setup(app):
    app.add_role("source", _source_role)
    app.connect("builder-inited", _add_static)
    app.connect("build-finished", _root_favicon)
    app.add_css_file("normlab.css")
    app.connect("html-page-context", _page_assets)
    # Before sphinx-external-toc reads _toc.yml (default priority 500), so a missing chapter gets this message.
    app.connect("config-inited", check, priority=100)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
