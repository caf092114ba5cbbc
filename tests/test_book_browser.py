"""The smoke book, built as `make book` builds it (warnings are errors), read in headless Chromium.

The book is built from the session's smoke run of every chapter (tests/smoke_book.py), in its copy of the book's
sources and the package under build/smoke-book/: the ledger and jupyter-book run there, warnings as errors.
"""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import threading
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import pytest

from normlab.study import paths
from smoke_book import VENV_BIN, step

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path(shutil.which("chromedriver") or "/usr/bin/chromedriver")
INSTALL = "install them with `apt-get install chromium chromium-driver` (Debian) to run the browser test"
pytestmark = pytest.mark.skipif(
    not (CHROMIUM.exists() and CHROMEDRIVER.exists()), reason=f"Chromium or chromedriver is missing: {INSTALL}"
)
MAX_PAGE_BYTES = 300_000


@pytest.fixture(scope="module")
def book(smoke_book) -> Path:
    python = str(VENV_BIN / "python")
    ledger = step([python, "-m", "normlab.study.ledger"], smoke_book)
    assert ledger.returncode == 0, ledger.stderr
    build = step([str(VENV_BIN / "jupyter-book"), "build", ".", "-W", "--keep-going"], smoke_book)
    assert build.returncode == 0, (
        f"the smoke book does not build with warnings as errors:\n{build.stdout[-6000:]}\n{build.stderr[-3000:]}"
    )
    return smoke_book / "_build" / "html"


@pytest.fixture(scope="module")
def server(book):
    handler = functools.partial(_QuietHandler, directory=str(book))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed: pip install selenium")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
        "--window-size=1280,2000",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=str(CHROMEDRIVER)))
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    yield driver
    driver.quit()


def _sidebar_links(driver, base: str) -> list[str]:
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(base + "index.html")  # a redirect to the opening page: wait for the page it lands on
    selector = "nav.bd-links a.reference.internal"
    WebDriverWait(driver, 30).until(lambda d: d.find_elements("css selector", selector))
    hrefs = [a.get_attribute("href") for a in driver.find_elements("css selector", selector)]
    return list(dict.fromkeys(h.split("#")[0] for h in hrefs if h))


def _open(driver, url: str, selector: str) -> list:
    """The elements matching `selector` on `url`, once the browser is on that page and they are there. A run of the
    API test once read an empty set straight after `get`: the wait rules out a navigation still under way, and a
    timeout names the page the browser is on instead."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url)
    try:
        return WebDriverWait(driver, 30).until(
            lambda d: d.current_url.split("#")[0] == url and d.find_elements("css selector", selector)
        )
    except TimeoutException:
        pytest.fail(
            f"no {selector!r} on {url} within 30 s: the browser is on {driver.current_url!r} ({driver.title!r})"
        )


def test_executed_chapters_carry_no_terminal_output_or_machine_paths(book):
    import nbformat

    from normlab.study import run

    executed = sorted((book.parents[1] / "build" / "executed").glob("*.ipynb"))
    assert executed
    found = [
        f"{path.stem}: {problem}" for path in executed for problem in run.residue(nbformat.read(path, as_version=4))
    ]
    assert not found, "\n".join(found)


def test_no_page_loads_a_script_from_the_network(book):
    for page in book.rglob("*.html"):
        remote = re.findall(r"<script[^>]*\bsrc=\"(?:https?:)?//[^\"]+\"", page.read_text(encoding="utf-8"))
        assert not remote, f"{page.relative_to(book)} loads {remote}: the book must read offline"
    assert (book / "_static" / "mathjax" / "tex-chtml.js").exists()


def test_every_page_reads_cleanly_in_chromium(book, server, browser):
    from selenium.common.exceptions import TimeoutException

    links = _sidebar_links(browser, server)
    assert len(links) >= 5, f"sidebar has only {links}"
    assert browser.current_url in links, f"index.html lands on {browser.current_url}, not a page of the sidebar"
    problems = []
    # index.html itself is only a redirect: a script started there dies with the page it runs in (CI's Chromium then
    # waited out the script timeout), so the loop reads the pages the sidebar names, the landing page among them.
    for url in links:
        assert url.startswith(server), url
        with urllib.request.urlopen(url) as response:  # sidebar links resolve
            assert response.status == 200, url
        page = book / urlparse(url).path.lstrip("/")
        name = page.relative_to(book)
        html = page.read_text(encoding="utf-8")
        if len(html.encode()) >= MAX_PAGE_BYTES:
            problems.append(f"{name}: {len(html.encode()) / 1000:.0f} kB of HTML (limit {MAX_PAGE_BYTES // 1000} kB)")
        for needle in {str(paths.ROOT), str(book.parents[1])}:
            if needle in html:
                problems.append(f"{name}: contains the checkout's path {needle}")
        if re.search(r"\d(it/s|s/it)\]", html):
            problems.append(f"{name}: progress-bar residue")
        if "Warning:" in re.sub(r"<[^>]+>", "", html):
            problems.append(f"{name}: warning text")

        browser.get(url)
        # MathJax typesets asynchronously; wait for it to finish before counting.
        try:
            browser.execute_async_script(
                "const done = arguments[arguments.length - 1];"
                "if (window.MathJax && MathJax.startup && MathJax.startup.promise) {"
                "  MathJax.startup.promise.then(() => done(true), () => done(false)); } else { done(null); }"
            )
        except TimeoutException:
            problems.append(f"{name}: MathJax did not finish typesetting within the script timeout")
        for entry in browser.get_log("browser"):
            if entry["level"] == "SEVERE":
                problems.append(f"{name}: console error {entry['message']}")
        math = browser.find_elements("css selector", ".math")
        untypeset = [m.text[:40] for m in math if not m.find_elements("css selector", "mjx-container")]
        if untypeset:
            problems.append(f"{name}: {len(untypeset)} of {len(math)} math elements not typeset, e.g. {untypeset[0]!r}")
        for figure in browser.find_elements("css selector", "figure"):
            images = figure.find_elements("css selector", "img")
            caption = " ".join(c.text for c in figure.find_elements("css selector", "figcaption")).strip()
            if not images or not caption:
                problems.append(f"{name}: a figure without {'an image' if not images else 'a caption'}")
            for image in images:
                if not browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", image):
                    problems.append(f"{name}: image {image.get_attribute('src')[:60]} did not load")
        loose = browser.execute_script(
            "return Array.from(document.querySelectorAll('.cell_output img')).filter(i => !i.closest('figure')).length"
        )
        if loose:
            problems.append(f"{name}: {loose} output image(s) outside a captioned figure")
    assert not problems, "\n".join(problems)


def test_the_api_page_shows_the_public_api_and_the_code_s_feature_table(book, server, browser):
    from normlab.norms.backends import features

    links = _sidebar_links(browser, server)
    assert server + "book/api.html" in links, links
    documented = {e.get_attribute("id") for e in _open(browser, server + "book/api.html", "dt.sig[id]")}
    assert {"normlab.rms_norm", "normlab.RMSNorm", "normlab.norms.huggingface.apply_to"} <= documented, documented
    rows = browser.find_elements("css selector", "table.normlab-features tbody tr")
    shown = [row.find_elements("css selector", "td")[0].text for row in rows]
    assert shown == list(features.BACKEND_FEATURES)
