"""The book's API reference page (book/api.md), built alone with the book's Sphinx settings and warnings as errors.

The whole book is built and read in Chromium by tests/test_book_browser.py; this builds only the API page (the
book's `_config.yml` without the check that every chapter has run), so the page is tested on a machine without
Chromium and without the session's smoke run. Its feature table is compared with features.py, read here anew.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

import normlab
from normlab.norms import huggingface, torch_versions
from normlab.norms.backends import features
from normlab.study import paths, torch_matrix
from smoke_book import VENV_BIN

PUBLIC = [
    "normlab.rms_norm",
    "normlab.layer_norm",
    "normlab.dyt",
    "normlab.RMSNorm",
    "normlab.LayerNorm",
    "normlab.DyT",
    "normlab.norms.huggingface.apply_to",
    "normlab.norms.huggingface.undo",
    "normlab.norms.huggingface.swap_norms",
    "normlab.norms.huggingface.restore_norms",
]


@pytest.fixture(scope="module")
def api_page(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("api-book")
    shutil.copytree(paths.ROOT / "book", root / "book", ignore=shutil.ignore_patterns("__pycache__"))
    config = yaml.safe_load((paths.ROOT / "_config.yml").read_text())
    del config["sphinx"]["local_extensions"]["normlab_check"]  # it refuses a book whose chapters have not run
    (root / "_config.yml").write_text(yaml.safe_dump(config))
    (root / "_toc.yml").write_text("format: jb-book\nroot: book/api\n")
    build = subprocess.run(
        [str(VENV_BIN / "jupyter-book"), "build", ".", "-W", "--keep-going"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, f"book/api.md does not build with -W:\n{build.stdout[-4000:]}\n{build.stderr[-2000:]}"
    return (root / "_build" / "html" / "book" / "api.html").read_text(encoding="utf-8")


def _cells(row_html: str) -> list[str]:
    return [
        html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()
        for cell in re.findall(r"<t[hd]\b.*?</t[hd]>", row_html, re.S)
    ]


def test_the_api_page_documents_every_public_name_with_its_docstring(api_page):
    missing = [name for name in PUBLIC if f'id="{name}"' not in api_page]
    assert not missing, missing
    # The docstrings are shown as written: rms_norm's formula and its dtype rules both reach the page.
    assert "x / sqrt(mean(x[..., :k]**2) + eps)" in html.unescape(api_page)
    assert "Dtypes (the same on every backend)" in api_page


def test_the_feature_table_is_the_code_s_table(api_page):
    table = re.search(r'<table class="normlab-features.*?</table>', api_page, re.S).group(0)
    header, *rows = [_cells(row) for row in re.findall(r"<tr\b.*?</tr>", table, re.S)]
    assert [row[0] for row in rows] == list(features.BACKEND_FEATURES)
    norm_names = {features.NORM_NAMES[n]: n for n in features.NORMS}
    assert set(header[2:]) == set(norm_names) | features.ALL_RMS_FEATURES
    for row in rows:
        entry = features.BACKEND_FEATURES[row[0]]
        for column, cell in zip(header[2:], row[2:]):
            has = norm_names[column] in entry.norms if column in norm_names else column in features.RMS_FEATURES[row[0]]
            assert cell == ("✓" if has else "—"), (row[0], column, cell)


def test_the_torch_range_is_the_matrix_configuration_and_its_results(api_page):
    text = html.unescape(re.sub(r"<[^>]+>", "", api_page))
    assert f"Tested: {torch_versions.tested_range()}." in re.sub(r"\s+", " ", text)
    table = re.search(r'<table class="normlab-torch-range.*?</table>', api_page, re.S).group(0)
    header, *rows = [_cells(row) for row in re.findall(r"<tr\b.*?</tr>", table, re.S)]
    assert (header, rows) == torch_matrix.table_rows(torch_matrix.read_matrix())
    assert [row[0] for row in rows] == sorted(torch_versions.RANGE["torch"], key=torch_versions.release)


def test_each_casting_mode_has_an_example(api_page):
    text = html.unescape(re.sub(r"<[^>]+>", "", api_page))
    for mode in ("none", "gemma", "llama"):
        assert re.search(rf'casting_mode="{mode}"', text), mode
    assert 'rms_norm(x_bf16, weight_bf16, eps=1e-6, casting_mode="llama")' in text


@pytest.mark.parametrize("obj", [normlab.rms_norm, normlab.layer_norm, huggingface.apply_to], ids=lambda f: f.__name__)
def test_public_functions_have_docstrings(obj):
    # rms_norm's and layer_norm's were once a parenthesised expression, which Python does not take as a docstring.
    assert obj.__doc__ and len(obj.__doc__) > 200, obj


def test_the_api_page_is_in_the_table_of_contents():
    toc = yaml.safe_load((paths.ROOT / "_toc.yml").read_text())
    files = [chapter["file"] for part in toc["parts"] for chapter in part["chapters"]]
    assert "book/api" in files and Path(paths.ROOT / "book" / "api.md").exists()
