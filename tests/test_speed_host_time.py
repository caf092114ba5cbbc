"""The host-time reading of the GPU runs (normlab.analysis.speed.host_time): the fit, and the committed H200 files."""

from __future__ import annotations

from pathlib import Path

import pytest

from normlab.analysis.speed import host_time
from normlab.bench import provenance, report
from normlab.study.findings import Finding


def test_the_fit_recovers_a_fixed_cost_and_a_bandwidth():
    moved = [1e5, 1e6, 1e7, 1e8, 1e9]
    a, b = 100e-6, 4e12
    times = [a + m / b for m in moved]
    fitted_a, fitted_b = host_time.fit_fixed_cost(times, moved)
    assert fitted_a == pytest.approx(a, rel=1e-6) and fitted_b == pytest.approx(b, rel=1e-6)


def test_the_fit_keeps_a_and_b_positive():
    # times that fall with size: the unconstrained fit would give 1/b < 0; the constant is kept instead
    fitted_a, fitted_b = host_time.fit_fixed_cost([3e-6, 2e-6, 1e-6], [1.0, 2.0, 3.0])
    assert fitted_a > 0 and fitted_b == float("inf")


DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def committed():
    runs = {m.source: m for m in provenance.committed(DATA)}
    if not {"gpu-bench.json", "gpu-bench-2.json"} <= set(runs):
        pytest.skip("the committed H200 files are not here")
    return runs


def _triton(m, direction):
    ok = report.stable(m.frame)
    return ok[(ok["implementation"] == "triton") & (ok["direction"] == direction)]


def test_the_committed_triton_times_never_go_below_a_floor(committed):
    for m in committed.values():
        assert _triton(m, "forward")["median_s"].min() > 100e-6
        assert _triton(m, "forward+backward")["median_s"].min() > 800e-6


def test_the_committed_triton_fixed_cost_is_ten_times_a_copys(committed):
    for m in committed.values():
        fits = host_time.fits(m.frame).set_index(["path", "direction"])
        triton, copy = fits.loc[("triton", "forward")], fits.loc[("copy", "forward")]
        assert triton.fixed_cost_s > 80e-6 and copy.fixed_cost_s < 15e-6
        assert triton.fixed_cost_s > 5 * copy.fixed_cost_s
        assert fits.loc[("triton", "forward+backward")].fixed_cost_s > 700e-6


def test_host_shares_come_from_the_fit_and_mark_small_batches_host_bound(committed):
    m = committed["gpu-bench.json"]
    shared = host_time.shares(m.frame)
    small = shared[(shared["study"] == "small-batch") & (shared["implementation"] == "triton")]
    assert not small.empty and small["host_bound"].all() and (shared["share_from"] == "fit").all()


def test_annotate_adds_a_host_time_caveat_and_keeps_the_verdict(committed):
    finding = Finding("holds", "a summary", {"x": 1.0}, key_number=0.1, threshold=0.2)
    annotated = host_time.annotate(finding, "B10", list(committed.values()))
    assert annotated.verdict == "holds" and annotated.key_number == 0.1
    clauses = [c for c in annotated.caveats if c.startswith("host time:")]
    assert len(clauses) == 2 and all("µs" in c for c in clauses)
    assert {p["run"] for p in annotated.evidence["host_time"]} == {"gpu-bench.json", "gpu-bench-2.json"}


def test_every_speed_claim_names_the_cases_it_reads(committed):
    m = committed["gpu-bench.json"]
    for claim in host_time.CLAIMS:
        assert not host_time.cases_read(claim, m.frame, 0.5).empty, claim
    with pytest.raises(ValueError):
        host_time.cases_read("A1", m.frame)
