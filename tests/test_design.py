"""The registered design (data/design.toml): it loads, covers every claim with a unit, a basis and its pairs, refuses
a file that lacks one (naming the claim), refuses a constant or a recorded threshold that disagrees (naming both
values), and every threshold a chapter judges with comes from it."""

from __future__ import annotations

import ast
import importlib
import json
import re
from pathlib import Path

import jupytext
import pytest

from normlab.runtime.profiles import ReadAtLookup, lookup_profile
from normlab.study import design, ledger
from normlab.study.claims import parse_claims
from normlab.study.design import DesignError
from normlab.study.results import LedgerError
from test_prose_constants import analysis_names, thresholds

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
IDS = {claim.id for claim in parse_claims()}

# Numeric literals a chapter may keep at module level: sizes and settings, none of them a threshold a verdict is
# judged against. Each with its reason; anything else must come from the design.
NOT_THRESHOLDS = {
    ("geometry", "REPEATS"): "timed repeats of each check, for the spread of the run times, not a threshold"
}

MINIMAL = """
assembled = ["A1", "A9", "B7"]

[claims.A1]
chapter = "geometry"
quantity = "largest relative difference"
unit = "1"
test = "closed form against torch"
answered_by = ["this-build"]

[claims.A1.thresholds.formula_tol]
value = 1e-12
basis = "float64 rounding"
source = "chosen: machine epsilon times the computation's length"

[claims.A9]
chapter = "quality"
quantity = "paired loss difference"
unit = "nats per byte"
test = "confidence sequence inside ±margin"
answered_by = ["this-build"]
trains = true
trainer = "reference"
pairs = { smoke = 3, cpu = 24, gpu = 16 }
pairs_setting = "quality:seeds"

[claims.A9.thresholds.margin]
value = 0.02
basis = "about five times Narang et al.'s 0.004 nats per byte"
source = "Narang et al. 2021, Table 1"

[claims.A9.thresholds.trained_minimum]
value = 0.25
basis = "an arm less than this below the byte frequencies' entropy learned little beyond them"
source = "chosen"

[claims.B7.thresholds.margin]
same_as = "A9"

[claims.B7.thresholds.trained_minimum]
same_as = "A9"
"""
B7 = """
[claims.B7]
chapter = "quality"
quantity = "curve mean difference"
unit = "nats per byte"
test = "paired interval"
answered_by = ["this-build"]
trains = true
trainer = "reference"
pairs = { smoke = 3, cpu = 24, gpu = 16 }
pairs_setting = "quality:seeds"
"""


def _parse(tmp_path, text: str, ids=("A1", "A9", "B7")):
    path = tmp_path / "design.toml"
    path.write_text(text)
    return design.parse(path, set(ids))


def test_the_committed_design_covers_every_claim_with_unit_basis_test_and_answering_run():
    registered = design.load()
    assert set(registered.claims) == IDS
    # the assembled 39 and the claims registered since, each with its registration (design._check_registrations)
    assert len(set(IDS) - {c for c in IDS if registered.claims[c].registered}) == 39
    for claim_id, entry in registered.claims.items():
        assert entry.unit and entry.quantity and entry.test and entry.answered_by, claim_id
        assert entry.thresholds, f"{claim_id} registers no threshold"
        for threshold in entry.thresholds.values():
            assert threshold.unit and threshold.basis and threshold.source, (claim_id, threshold.name)
        if entry.trains:
            assert sorted(entry.pairs) == sorted(design.PROFILES), claim_id


def test_the_chapters_profiles_read_their_pairs_from_the_design():
    registered = design.load()
    settings = {entry.pairs_setting for entry in registered.claims.values() if entry.pairs_setting}
    assert len(settings) == 13  # with V5's, V6's, V7's and V8's seeds (issue 46) and V4's confirmation's (issue 45)
    for setting in settings:
        chapter, key = setting.split(":")
        profiles = importlib.import_module(f"normlab.analysis.{chapter}.profiles").PROFILES
        # the table names the setting and reads it from the design when a profile is looked up, not at import
        assert all(isinstance(profiles[p][key], ReadAtLookup) for p in design.PROFILES), setting
        looked_up = {p: lookup_profile(profiles, p, owner=chapter)[key] for p in design.PROFILES}
        assert looked_up == registered.pairs_of(setting), setting
    source = (ROOT / "src/normlab/analysis/quality/profiles.py").read_text()
    assert 'design.pairs_at_lookup("quality:seeds")' in source and "seeds=REGISTERED_SEEDS" in source  # not copied


NEW_CLAIM = """
[claims.V5]
chapter = "gain"
quantity = "paired loss difference"
unit = "nats per byte"
test = "paired interval"
answered_by = ["this-build"]
registered = "2026-12-05"

[claims.V5.thresholds.margin]
value = 0.03
basis = "b"
source = "chosen"

[claims.V5.source_numbers.effect]
value = 27.3
unit = "percent"
where = "paper, Table 2"
"""

REGISTRATION = """
[[change]]
date = "2026-12-05"
claim = "V5"
field = "registration"
old = "not registered"
new = "registered"
why = "w"
look = "none"
"""


def test_a_claim_added_after_the_assembled_design_needs_a_registration_entry_of_its_date(tmp_path):
    ids = ("A1", "A9", "B7", "V5")
    with pytest.raises(DesignError, match=r"claim V5 is not in `assembled` and has no registration"):
        _parse(tmp_path, MINIMAL + B7 + NEW_CLAIM, ids)
    with pytest.raises(DesignError, match=r"claim V5 says registered = '2026-12-05'.*'2026-12-04'"):
        _parse(tmp_path, MINIMAL + B7 + NEW_CLAIM + REGISTRATION.replace("2026-12-05", "2026-12-04"), ids)
    registered = _parse(tmp_path, MINIMAL + B7 + NEW_CLAIM + REGISTRATION, ids)
    assert registered.claims["V5"].registered == "2026-12-05"
    assert registered.source_number("V5", "effect") == {"value": 27.3, "unit": "percent", "where": "paper, Table 2"}
    with pytest.raises(DesignError, match=r"no source number 'gain'.*\['effect'\]"):
        registered.source_number("V5", "gain")


def test_a_run_made_before_its_claim_was_registered_is_refused(tmp_path):
    registered = _parse(tmp_path, MINIMAL + B7 + NEW_CLAIM + REGISTRATION, ("A1", "A9", "B7", "V5"))
    run = {"notebook": "gain", "started": "2026-12-04T23:59:00+00:00", "claims": [{"id": "V5", "verdict": None}]}
    with pytest.raises(
        DesignError, match=r"claim V5 was run on 2026-12-04, before its design was registered on 2026-12-05"
    ):
        design.check_runs([run], registered)
    design.check_runs([dict(run, started="2026-12-05T00:00:01+00:00")], registered)


def test_a_source_number_without_where_is_refused(tmp_path):
    with pytest.raises(DesignError, match=r"claim V5: source number 'effect' lacks where"):
        _parse(
            tmp_path,
            MINIMAL + B7 + NEW_CLAIM.replace('where = "paper, Table 2"', "") + REGISTRATION,
            ("A1", "A9", "B7", "V5"),
        )


def test_claims_read_on_the_same_runs_with_different_pairs_are_refused_naming_both(tmp_path):
    text = MINIMAL + B7.replace("cpu = 24", "cpu = 30")
    with pytest.raises(DesignError, match=r"claims A9 and B7 are read on the same runs \(quality:seeds\).*24.*30"):
        _parse(tmp_path, text).pairs_of("quality:seeds")


def test_a_chapter_run_whose_pairs_differ_from_the_design_is_refused_naming_both():
    run = {
        "notebook": "quality",
        "profile": "cpu",
        "overrides": {"seeds": 24},
        "claims": [{"id": "A9", "verdict": "holds"}],
    }
    with pytest.raises(
        DesignError, match=r"A9: the quality chapter ran seeds = 24 \(an override\), but .* registers 19"
    ):
        design.check_runs([run])
    design.check_runs([{**run, "overrides": {"seeds": 19}}])  # the registered count, overridden to itself
    design.check_runs([{**run, "overrides": {"width": 96}}])  # a size, not the pairs
    design.check_runs([{**run, "claims": [{"id": "A9", "verdict": None}]}])  # evidence only: nothing judged


def test_the_a9_margin_basis_is_in_its_own_unit():
    margin = design.load().threshold("A9", "margin")
    assert margin.unit == "nats per byte" and margin.value == 0.02
    assert "per byte" in margin.basis and "must exclude" not in margin.basis


def test_same_as_reuses_another_claims_value_and_basis(tmp_path):
    parsed = _parse(tmp_path, MINIMAL + B7)
    assert parsed.value("B7", "margin") == 0.02
    assert parsed.threshold("B7", "margin").same_as == "A9.margin"


@pytest.mark.parametrize(
    ("drop", "message"),
    [
        ('unit = "nats per byte"\n', r"claim A9 lacks 'unit'"),
        (
            'basis = "about five times Narang et al.\'s 0.004 nats per byte"\n',
            r"claim A9, threshold margin lacks 'basis'",
        ),
        ("pairs = { smoke = 3, cpu = 24, gpu = 16 }\n", r"claim A9 trains models but registers pairs for no profile"),
        ('source = "Narang et al. 2021, Table 1"\n', r"claim A9, threshold margin lacks 'source'"),
        ('trainer = "reference"\n', r"claim A9 trains models, so it names the update its runs use: trainer = one of"),
    ],
)
def test_a_claim_lacking_a_unit_a_basis_or_its_pairs_is_refused_naming_it(tmp_path, drop, message):
    assert drop in MINIMAL
    with pytest.raises(DesignError, match=message):
        _parse(tmp_path, MINIMAL.replace(drop, "", 1) + B7)


def test_every_trained_claim_names_a_trainer_the_training_code_has():
    from normlab.gpt.train import STEPS

    assert design.TRAINERS == STEPS
    registered = design.load().claims.values()
    assert {entry.id: entry.trainer for entry in registered if entry.trains} == {
        # designs that ran before 2026-12-05 keep the reference; those registered since use the compiled step
        entry.id: "compiled" if entry.registered else "reference"
        for entry in registered
        if entry.trains
    }
    assert all(entry.trainer is None for entry in registered if not entry.trains)
    assert design.training_step("V7", "cpu") == "compiled" and design.training_step("V7", "smoke") == "reference"
    assert design.training_step("A9", "cpu") == "reference"
    with pytest.raises(DesignError, match=r"claim B12 trains no model"):
        design.training_step("B12", "cpu")


def test_a_run_trained_with_another_step_than_its_design_is_refused(tmp_path):
    registered = design.load()
    record = {"id": "V7", "verdict": None, "evidence": {"trainer": "reference"}}
    run = {"notebook": "landscape", "profile": "cpu", "started": "2026-12-05T08:00:00+00:00", "claims": [record]}
    with pytest.raises(
        DesignError, match=r"claim V7 trained with 'reference' at profile 'cpu', but its design registers 'compiled'"
    ):
        design.check_runs([run], registered)
    design.check_runs([dict(run, profile="smoke")], registered)  # smoke runs take the reference step


def test_a_trainer_the_code_lacks_or_without_training_is_refused(tmp_path):
    with pytest.raises(DesignError, match=r"trainer = one of 'reference', 'compiled' \(got 'fused'\)"):
        _parse(tmp_path, MINIMAL.replace('trainer = "reference"', 'trainer = "fused"', 1) + B7)
    no_training = MINIMAL.replace(
        'answered_by = ["this-build"]\n', 'answered_by = ["this-build"]\ntrainer = "compiled"\n', 1
    )
    with pytest.raises(DesignError, match=r"claim A1 names trainer = 'compiled' but trains no model"):
        _parse(tmp_path, no_training + B7)


def test_an_unknown_or_missing_claim_is_refused(tmp_path):
    with pytest.raises(DesignError, match=r"unknown claim ID\(s\) Z9"):
        _parse(tmp_path, MINIMAL + B7 + MINIMAL.split("[claims.A9]")[0].replace("A1", "Z9"))
    with pytest.raises(DesignError, match=r"no entry for claim\(s\) B7"):
        _parse(tmp_path, MINIMAL.split("[claims.B7.thresholds.margin]")[0])


def test_a_disagreeing_constant_is_refused_naming_both_values():
    registered = design.load()
    registered.check_constant("A9", "margin", 0.02)
    with pytest.raises(DesignError, match=r"A9: the chapter judges margin against 0.03, but .* registers 0.02"):
        registered.check_constant("A9", "margin", 0.03)
    with pytest.raises(DesignError, match=r"registers \(0.01, 0.1\)"):
        registered.check_constant("B10", "few_percent", (0.01, 0.2))


@pytest.mark.parametrize(
    "answered_by", ['"this build"', "[]", '["gpu-bench"]', '["this-build", "gpu-bench"]', '["gpu-study", "this-build"]']
)
def test_answered_by_names_registered_builds_ending_with_this_one(tmp_path, answered_by):
    text = MINIMAL.replace('answered_by = ["this-build"]', f"answered_by = {answered_by}", 1) + B7
    with pytest.raises(DesignError, match=r"claim A1: answered_by = .* ending with 'this-build'"):
        _parse(tmp_path, text)
    both = MINIMAL.replace('answered_by = ["this-build"]', 'answered_by = ["gpu-bench", "this-build"]', 1)
    assert _parse(tmp_path, both + B7).claim("A1").answered_by == ("gpu-bench", "this-build")


def test_a_verdict_answered_by_a_build_its_claim_does_not_register_is_refused():
    registered = design.load()
    assert registered.claim("A7").answered_by == ("gpu-bench", "this-build")
    assert registered.claim("A9").answered_by == ("this-build",)
    record = {"id": "A9", "verdict": "holds", "threshold": 0.02, "evidence": {"answered_by": "gpu-bench"}}
    run = {"notebook": "quality", "profile": "cpu", "started": "2026-12-05T08:00:00+00:00", "claims": [record]}
    with pytest.raises(DesignError, match=r"claim A9's verdict was answered by 'gpu-bench', but .* \['this-build'\]"):
        design.check_runs([run], registered)
    registered.check_answered("A7", "gpu-bench")
    registered.check_answered("A9", "this-build")


def test_a_recorded_threshold_the_design_does_not_hold_is_refused_naming_both():
    registered = design.load()
    registered.check_recorded("A9", 0.02)
    registered.check_recorded("B16", 0.01)  # the real-model part's per-token margin, registered as same_as Q4
    with pytest.raises(DesignError, match=r"A9's verdict was judged against 0.025, .* \(its values: .*0.02"):
        registered.check_recorded("A9", 0.025)


def test_the_ledger_refuses_a_verdict_against_an_unregistered_threshold_and_writes_the_design_page(tmp_path):
    from test_study import _run

    run = _run("geometry", "holds", threshold=1e-12)
    results, pages = tmp_path / "results", tmp_path / "pages"
    results.mkdir()
    (results / "geometry.json").write_text(json.dumps(run))
    ledger.build(results, pages, executed_dir=tmp_path / "ex")
    page = (pages / "design.md").read_text()
    assert "# The registered design" in page and "- `margin` = 0.02 (nats per byte): " in page
    assert "Changes after results were seen" in page and "**2026-12-01, A9, pairs.cpu:** 12 → 24. Why: " in page
    run["claims"][0]["threshold"] = 1e-6
    (results / "geometry.json").write_text(json.dumps(run))
    with pytest.raises(LedgerError, match=r"geometry.json: claim A1's verdict was judged against 1e-06"):
        ledger.build(results, pages, executed_dir=tmp_path / "ex")


def test_every_threshold_a_chapter_judges_with_comes_from_the_design():
    """A numeric literal in a module-level UPPER_CASE assignment, or passed by keyword to the chapter's analysis, is a
    threshold the design does not hold: read it with design.value(...) instead (or, for a size that is no threshold,
    name it in NOT_THRESHOLDS with the reason)."""
    problems = []
    for path in sorted(NOTEBOOKS.glob("*.py")):
        code = [cell.source for cell in jupytext.read(path).cells if cell.cell_type == "code"]
        analysis = set().union(*(analysis_names(source) for source in code))
        for source in code:
            literal = thresholds(_without_design_reads(source), analysis)
            for value, line in literal.items():
                name = line.split("=")[0].strip()
                if (path.stem, name) not in NOT_THRESHOLDS:
                    problems.append(
                        f"notebooks/{path.name}: `{line}` defines {value:g}, which the design does not hold"
                    )
    assert not problems, "read each from normlab.study.design:\n  " + "\n  ".join(problems)


def _without_design_reads(source: str) -> str:
    """The cell with its design reads blanked: what remains is what the chapter typed itself."""
    tree = ast.parse(source)
    spans = [
        ast.get_source_segment(source, node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "design"
    ]
    for span in spans:
        source = source.replace(span, "None")
    return source


def test_the_checker_finds_a_typed_threshold_and_passes_a_design_read():
    typed = (
        'MARGIN = design.value("A9", "margin")\nVISIBLE = 0.95\nRULE = dict(share=design.value("V4", "curse_share"))\n'
    )
    found = thresholds(_without_design_reads(typed), set())
    assert list(found) == [0.95] and re.match(r"VISIBLE = 0.95", found[0.95])


GLUE = re.compile(r"\{glue:text\}`([\w-]+)`")
# A cell that shows a result: a verdict paragraph, a table, a figure, or a recorded verdict.
RESULT = re.compile(r"^(Markdown\(|verdict_table|table\(|display\()|\.record\(results", re.MULTILINE)


def _design_reads(node) -> list[str]:
    """The registered names a statement reads (`design.value("A9", "margin")` gives ["margin"])."""
    return [
        arg.value
        for call in ast.walk(node)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id == "design"
        for arg in call.args[1:]
        if isinstance(arg, ast.Constant)
    ]


def _stated_keys(tree, constants: dict[str, list[str]]) -> dict[str, set[str]]:
    """Glue key (or a key prefix ending in '*') -> the design-read constants its state(...) call pastes."""
    keys: dict[str, set[str]] = {}
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "state"):
            continue
        for keyword in call.keywords:
            used = {n.id for n in ast.walk(keyword.value) if isinstance(n, ast.Name)} & set(constants)
            if keyword.arg:
                names = [keyword.arg]
            elif isinstance(keyword.value, ast.DictComp) and isinstance(keyword.value.key, ast.JoinedStr):
                names = [keyword.value.key.values[0].value + "*"]  # **{f"visible_{k}": v ...}
            else:
                names = [name for constant in used for name in constants[constant]]  # **RULE: its registered names
            for name in names:
                keys.setdefault(name, set()).update(used)
    return keys


def unstated_thresholds(notebook) -> list[str]:
    """Each design-read constant whose value no prose pastes before the first result that follows its first use."""
    cells = notebook.cells
    prose = []
    for cell in cells:
        text = cell.source if cell.cell_type == "markdown" else ""
        text += cell.metadata.get("mystnb", {}).get("figure", {}).get("caption", "")
        prose.append(set(GLUE.findall(text)))
    constants, defined_in, keys = {}, {}, {}
    for index, cell in enumerate(cells):
        if cell.cell_type != "code":
            continue
        tree = ast.parse(cell.source)
        for statement in tree.body:
            reads = _design_reads(statement) if isinstance(statement, ast.Assign) else []
            for target in statement.targets if reads else []:
                for name in (n.id for n in ast.walk(target) if isinstance(n, ast.Name)):
                    constants[name], defined_in[name] = reads, index
        for key, used in _stated_keys(tree, constants).items():
            keys.setdefault(key, set()).update(used)
    problems = []
    for name, start in defined_in.items():
        stated = {key for key, used in keys.items() if name in used}
        if not stated:
            problems.append(f"{name} is never stated with state(...)")
            continue
        use = next(
            (
                index
                for index in range(start, len(cells))
                if cells[index].cell_type == "code"
                for line in cells[index].source.splitlines()
                if re.search(rf"\b{name}\b", line) and not re.match(rf"\s*(#|state\(|[\w, ]*\b{name}\b[\w, ]*=)", line)
            ),
            None,
        )
        if use is None:
            continue
        result = next(
            (
                index
                for index in range(use, len(cells))
                if cells[index].cell_type == "code"
                and (RESULT.search(cells[index].source) or "figure" in cells[index].metadata.get("mystnb", {}))
            ),
            len(cells) - 1,
        )

        def pasted(key: str, index: int) -> bool:
            return any(ref.startswith(key[:-1]) for ref in prose[index]) if key.endswith("*") else key in prose[index]

        if not any(pasted(key, index) for key in stated for index in range(result + 1)):
            problems.append(
                f"{name} ({', '.join(sorted(stated))}): no prose pastes it before its result in cell {result}"
            )
    return problems


@pytest.mark.parametrize("chapter", sorted(path.stem for path in NOTEBOOKS.glob("*.py")))
def test_every_registered_threshold_is_on_the_page_before_its_result(chapter):
    problems = unstated_thresholds(jupytext.read(NOTEBOOKS / f"{chapter}.py"))
    assert not problems, (
        f"{chapter}: state each threshold in the prose before the result it decides:\n  " + "\n  ".join(problems)
    )


LATE = """# %% [markdown]
# The margin is {glue:text}`margin`.

# %%
MARGIN = design.value("A9", "margin")
TOL = design.value("A1", "formula_tol")
state(margin=MARGIN, tol=TOL)
finding = judge(runs, MARGIN, TOL)

# %%
Markdown(finding.sentence)

# %% [markdown]
# Only now: {glue:text}`tol`.
"""


def test_the_order_check_finds_a_threshold_stated_only_after_its_result():
    assert unstated_thresholds(jupytext.reads(LATE, fmt="py:percent")) == [
        "TOL (tol): no prose pastes it before its result in cell 2"
    ]


def test_no_analysis_judges_against_a_typed_threshold():
    """`threshold=` on a finding names what its verdict is judged against: it must be a registered value (or a
    variable holding one), never a number typed in the analysis."""
    typed = []
    for path in sorted((ROOT / "src" / "normlab" / "analysis").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.keyword) and node.arg == "threshold":
                # an index (ARTICLE_B6_RANGE[1]) picks a registered value; it is not one
                indices = {
                    id(n) for s in ast.walk(node.value) if isinstance(s, ast.Subscript) for n in ast.walk(s.slice)
                }
                literals = [
                    n
                    for n in ast.walk(node.value)
                    if isinstance(n, ast.Constant) and type(n.value) in (int, float) and id(n) not in indices
                ]
                if literals:
                    typed.append(f"{path.relative_to(ROOT)}:{node.value.lineno} threshold={ast.unparse(node.value)}")
    assert not typed, "register each in data/design.toml and read it with design.value(...):\n  " + "\n  ".join(typed)


def test_the_ledger_refuses_a_design_lacking_a_unit_naming_the_claim_and_leaves_no_pages(tmp_path):
    broken = tmp_path / "design.toml"
    broken.write_text(design.DESIGN.read_text(encoding="utf-8").replace('unit = "nats per byte"\n', "", 1))
    results, pages = tmp_path / "results", tmp_path / "pages"
    results.mkdir()
    run = {
        "notebook": "geometry",
        "profile": "smoke",
        "hardware": {},
        "versions": {},
        "git_commit": "abc",
        "started": "t0",
        "finished": "t1",
        "claims": [],
    }
    (results / "geometry.json").write_text(json.dumps(run))
    with pytest.raises(LedgerError, match=r"claim A9 lacks 'unit'"):
        ledger.build(results, pages, executed_dir=tmp_path / "ex", design_path=broken)
    assert not (pages / "design.md").exists()


def test_a_look_before_a_claim_s_registration_is_stated_beside_the_claim_on_the_design_page():
    from normlab.study.pages.design_page import looks_before_registration, render_design

    registered = design.load()
    looked = {claim for claim in registered.claims if looks_before_registration(registered, claim)}
    # V5's timing runs and V8's pilot were seen before their registrations (their change-log entries say so)
    assert {"V5", "V8"} <= looked
    page = render_design(registered, sorted(IDS))
    v5 = page.split("**V5** (", 1)[1].split("\n\n**", 1)[0]
    assert "- **Seen before its registration:** 2026-12-05:" in v5
    # a registration made before any look says nothing more
    quiet = [c for c in registered.claims if registered.claim(c).registered and c not in looked]
    for claim in quiet:
        assert "Seen before its registration" not in page.split(f"**{claim}** (", 1)[1].split("\n\n**", 1)[0]
