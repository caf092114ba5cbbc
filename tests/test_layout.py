"""The package's layout is its architecture: floors that import only downwards, and no import cycles.

Read from the package's own source (every `import`, lazy ones inside functions included), so a new
module lands on a floor by its path, and an upward or circular import fails here before review. A module named as a
string (what `importlib.import_module` would load) counts as imported.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "normlab"

# Bottom to top. A module may import from its own floor and from floors below it, never above.
FLOORS = (
    ("norms", ("normlab", "normlab.norms")),  # the norm library and its public face
    ("runtime", ("normlab.runtime",)),  # progress bars, worker pool, provenance
    ("gpt", ("normlab.gpt",)),  # the GPT testbed
    ("bench", ("normlab.bench",)),  # the benchmark harness
    ("study", ("normlab.study",)),  # runner, results, ledger, presentation
    ("analysis", ("normlab.analysis",)),  # per-chapter analyses
    ("entry points", ("normlab.train",)),  # python -m normlab.train
)
# What a core install (torch and numpy) lacks: the norm library must import without any of them.
NOT_IN_CORE = ("pandas", "tqdm", "matplotlib", "seaborn", "papermill", "transformers", "triton", "scipy")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def floor_of(module: str) -> int:
    best, rank = -1, None
    for index, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            matches = module == prefix or (prefix != "normlab" and module.startswith(prefix + "."))
            if matches and len(prefix) > best:
                best, rank = len(prefix), index
    if rank is None:
        raise AssertionError(f"{module} is on no floor: add its folder to FLOORS in tests/test_layout.py")
    return rank


def imports_of(module: str) -> set[str]:
    """The normlab modules `module` imports, resolved to modules (a name imported from a package counts
    as its submodule when there is one)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                found.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in MODULES else source)
    return {name for name in found if name == "normlab" or name.startswith("normlab.")}


GRAPH = {module: imports_of(module) & set(MODULES) for module in MODULES}


def test_every_module_is_on_a_floor():
    for module in MODULES:
        floor_of(module)


def named_modules(source: str) -> set[str]:
    """The normlab modules a source names as a string that `importlib.import_module` could load: a string that is a
    dotted module path ("normlab.analysis.quality.profiles"), or an f-string that starts with one
    (f"normlab.analysis.{chapter}.profiles" names normlab.analysis). The import checks above do not see these."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            text = str(node.values[0].value).rsplit(".", 1)[0] if len(node.values) > 1 else str(node.values[0].value)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        else:
            continue
        if re.fullmatch(r"normlab(\.\w+)*", text):
            found.add(text)
    return found


def module_named(name: str) -> str:
    """The package module a dotted name lies in: itself, or its longest prefix that is one ("normlab.LayerNorm",
    a class, lies in normlab)."""
    parts = name.split(".")
    return next(".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in MODULES)


def test_no_floor_names_a_module_above_it_to_import_by_string():
    upward = [
        f"{m} ({FLOORS[floor_of(m)][0]}) names {t} ({FLOORS[floor_of(t)][0]})"
        for m, path in MODULES.items()
        for t in sorted(map(module_named, named_modules(path.read_text())))
        if floor_of(t) > floor_of(m)
    ]
    assert not upward, (
        "modules named as strings above their floor (an import by string is still an upward import: hand the "
        "values down from a module that may import them, as normlab.analysis.__main__ hands the runner the "
        "chapters' profile tables):\n" + "\n".join(upward)
    )


def test_no_floor_imports_from_a_floor_above_it():
    upward = [
        f"{m} ({FLOORS[floor_of(m)][0]}) imports {t} ({FLOORS[floor_of(t)][0]})"
        for m, targets in GRAPH.items()
        for t in sorted(targets)
        if floor_of(t) > floor_of(m)
    ]
    assert not upward, "imports that go up a floor:\n" + "\n".join(upward)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_cycles():
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_checks_catch_what_they_are_for():
    by_name = 'TABLES = {"quality": "normlab.analysis.quality.profiles"}\nimport_module(TABLES[name])'
    assert named_modules(by_name) == {"normlab.analysis.quality.profiles"}
    assert named_modules('import_module(f"normlab.analysis.{chapter}.profiles")') == {"normlab.analysis"}
    assert named_modules('"""Reads `normlab.analysis.quality`."""\nerror = "normlab.analysis needs pandas"') == set()
    assert module_named("normlab.LayerNorm") == "normlab" and module_named("normlab.analysis") == "normlab.analysis"
    assert floor_of("normlab.analysis") > floor_of("normlab.study.run")
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert floor_of("normlab.norms.functional") < floor_of("normlab.gpt.model") < floor_of("normlab.analysis.depth")
    assert floor_of("normlab") == floor_of("normlab.norms.reference")
    with pytest.raises(AssertionError, match="on no floor"):
        floor_of("normlab.somewhere_new")


# A chapter's package splits by the chapter's sections; a module past this has grown two sections in one.
LONGEST_ANALYSIS_MODULE = 600
ANALYSIS = PACKAGE / "analysis"


def too_long(paths, limit: int = LONGEST_ANALYSIS_MODULE) -> list[str]:
    return [f"{p.name}: {n} lines" for p in paths if (n := len(p.read_text().splitlines())) > limit]


def test_no_analysis_module_is_longer_than_a_section():
    long = too_long(sorted(ANALYSIS.rglob("*.py")))
    assert ANALYSIS.is_dir() and not long, (
        f"split these by the chapter's sections (limit {LONGEST_ANALYSIS_MODULE} lines):\n" + "\n".join(long)
    )


def test_each_chapter_is_a_package_and_shared_imports_no_chapter():
    chapters = {p.name for p in ANALYSIS.iterdir() if p.is_dir() and p.name not in ("shared", "__pycache__")}
    # __main__.py is the command that runs the chapters (python -m normlab.analysis), not a chapter's code
    loose = [p.name for p in ANALYSIS.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    assert not loose, f"chapter code belongs in its chapter's package, not at the top of analysis/: {loose}"
    assert all((ANALYSIS / c / "__init__.py").exists() for c in chapters)
    chapter_prefixes = tuple(f"normlab.analysis.{c}" for c in chapters)
    upward = [
        f"{m} imports {t}"
        for m, targets in GRAPH.items()
        if m.startswith("normlab.analysis.shared")
        for t in sorted(targets)
        if t.startswith(chapter_prefixes)
    ]
    assert not upward, "analysis/shared is used by several chapters and imports none of them:\n" + "\n".join(upward)


def test_the_length_check_catches_a_long_module(tmp_path):
    long = tmp_path / "long.py"
    long.write_text("x = 1\n" * (LONGEST_ANALYSIS_MODULE + 1))
    short = tmp_path / "short.py"
    short.write_text("x = 1\n" * LONGEST_ANALYSIS_MODULE)
    assert too_long([short, long]) == [f"long.py: {LONGEST_ANALYSIS_MODULE + 1} lines"]


# Hides the packages of NOT_IN_CORE as if they were not installed (find_spec answers None, as for a missing one).
BLOCKER = """
import importlib.machinery, sys
_find = importlib.machinery.PathFinder.find_spec
def _hidden(name, path=None, target=None):
    return None if name.split(".")[0] in {blocked!r} else _find(name, path, target)
importlib.machinery.PathFinder.find_spec = _hidden
"""


def _run(code: str, *, core_only: bool = True) -> subprocess.CompletedProcess:
    prelude = BLOCKER.format(blocked=NOT_IN_CORE) if core_only else ""
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=300)


def test_a_core_install_imports_the_whole_norm_library():
    # Triton is its own extra: the triton backend is imported by functional only when it is asked for.
    library = [m for m in MODULES if floor_of(m) == 0 and not m.startswith("normlab.norms.backends.triton")]
    done = _run(
        "\n".join(f"import {m}" for m in library) + "\nfrom normlab import rms_norm, layer_norm, RMSNorm, LayerNorm\n"
        "import torch\nx = torch.randn(3, 8)\nprint(float((rms_norm(x) - RMSNorm(8)(x)).abs().max()))"
    )
    assert done.returncode == 0, done.stderr
    assert float(done.stdout.split()[-1]) < 1e-6


def test_the_testbed_trains_without_its_extra_and_names_it_for_tables():
    # training needs torch alone; a DataFrame names the extra
    done = _run(
        "import normlab.gpt.model, normlab.gpt.train\nfrom normlab.gpt.train import frame\nframe([{'step': 1}])"
    )
    assert done.returncode != 0 and 'pip install "normlab[gpt]"' in done.stderr, done.stderr
    assert "normlab.gpt.model" not in done.stderr.split("Traceback")[0]


def test_the_analyses_without_their_extra_name_the_extra():
    done = _run("import normlab.analysis.jacobians.against_autograd")
    assert done.returncode != 0 and 'pip install "normlab[study]"' in done.stderr, done.stderr


# ---- the ledger reads findings as data: no page builder names a chapter's evidence key ---------------------------

# The design page renders data/design.toml's own tables (a confirmation's margin, a registered decision's model and
# train), whose keys share names with some chapters' evidence keys; it reads no results, so it is not among them.
PAGE_BUILDERS = [
    PACKAGE / "study" / "ledger.py",
    PACKAGE / "study" / "builds.py",
    *(p for p in (PACKAGE / "study" / "pages").glob("*.py") if p.name != "design_page.py"),
]
# Fields of the results contract itself (normlab.study.results, Finding), and of each claim's slot in the reader's
# `verdicts` table (its record and its parts): the pages read these by name.
CONTRACT_FIELDS = {
    *("notebook", "profile", "hardware", "versions", "git_commit", "started", "finished", "claims", "overrides"),
    *("python", "torch", "triton"),  # the contract's `versions`
    *("id", "verdict", "summary", "evidence", "section", "key_number", "threshold", "spread", "rule"),
    *("meaning", "unit", "headline"),
    *("record", "parts"),
}


def _dict_keys(node: ast.AST, names: dict[str, list[ast.AST]], seen: set[str]) -> set[str]:
    """The top-level string keys of an evidence expression: a dict literal (with its ** spreads), `dict(..., k=v)`,
    or a local name assigned one (and its `name["key"] = ...` assignments)."""
    if isinstance(node, ast.Dict):
        keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        for k, v in zip(node.keys, node.values):
            if k is None:  # {**spread}
                keys |= _dict_keys(v, names, seen)
        return keys
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
        keys = {kw.arg for kw in node.keywords if kw.arg}
        for part in [*node.args, *(kw.value for kw in node.keywords if kw.arg is None)]:
            keys |= _dict_keys(part, names, seen)
        return keys
    if isinstance(node, ast.Name) and node.id not in seen:
        seen = seen | {node.id}
        return set().union(*(_dict_keys(value, names, seen) for value in names.get(node.id, [])))
    return set()


def evidence_keys(source: str) -> set[str]:
    """Every evidence key a module's findings record: the `evidence` of each `Finding(...)`, `paired_finding(...)`
    (the landscape chapter's Finding keyed on a paired interval, evidence third as in Finding) or `replace(...)`
    call, read from the source."""
    keys: set[str] = set()
    tree = ast.parse(source)
    for scope in [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))]:
        names: dict[str, list[ast.AST]] = {}
        for node in ast.walk(scope):
            for target in node.targets if isinstance(node, ast.Assign) else []:
                if isinstance(target, ast.Name):
                    names.setdefault(target.id, []).append(node.value)
                elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                    if isinstance(target.slice, ast.Constant) and isinstance(target.slice.value, str):
                        names.setdefault(target.value.id, []).append(ast.Dict([target.slice], [node.value]))
        for call in ast.walk(scope):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
                continue
            if call.func.id in ("Finding", "paired_finding", "replace"):
                given = call.args[2:3] if call.func.id != "replace" else []
                given += [kw.value for kw in call.keywords if kw.arg == "evidence"]
                for expression in given:
                    keys |= _dict_keys(expression, names, set())
    return keys - CONTRACT_FIELDS


def string_literals(source: str) -> set[str]:
    return {n.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def named_evidence(page_sources: dict[str, str], keys: set[str]) -> list[str]:
    return [
        f"{name} names {sorted(string_literals(source) & keys)}"
        for name, source in page_sources.items()
        if string_literals(source) & keys
    ]


def chapters_evidence_keys() -> set[str]:
    keys = set().union(*(evidence_keys(p.read_text()) for p in sorted(ANALYSIS.rglob("*.py"))))
    for results in sorted((PACKAGE.parents[1] / "build" / "results").glob("*.json")):  # a built book's, when present
        import json

        for record in json.loads(results.read_text())["claims"]:
            keys |= set(record.get("evidence") or {}) - CONTRACT_FIELDS
    return keys


def test_the_ledger_and_the_pages_name_no_evidence_key_of_any_chapter():
    keys = chapters_evidence_keys()
    # the keys the ledger's headline writers once read, now each chapter's own
    assert {"decided_on", "by_run", "deepest_init_depth", "exponent_pre_xiong_init", "saturation"} <= keys
    found = named_evidence({p.relative_to(PACKAGE).as_posix(): p.read_text() for p in PAGE_BUILDERS}, keys)
    assert not found, (
        "the pages read findings as data (meaning, unit, headline), not a chapter's evidence:\n" + "\n".join(found)
    )


def test_the_evidence_check_catches_a_page_that_reads_a_chapter_s_key():
    chapter = """
def claim(measures):
    evidence = {"offset_share": measures["share"], **extra}
    evidence["deepest"] = 3
    return Finding("holds", "s.", dict(evidence, decided_on="GPU"), 0.5)
extra = {"spread_key": 1}
"""
    # a local dict, its ** spread (here a module constant), a key set later, and dict(..., key=...)
    assert evidence_keys(chapter) == {"offset_share", "spread_key", "deepest", "decided_on"}
    page = "def sentence(record):\n    return f\"{record['evidence']['decided_on']} {record['key_number']}\"\n"
    assert named_evidence({"page.py": page}, evidence_keys(chapter)) == ["page.py names ['decided_on']"]
    assert named_evidence({"page.py": "x = record['key_number']"}, evidence_keys(chapter)) == []
