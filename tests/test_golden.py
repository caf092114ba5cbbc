"""tests/golden.py: a golden file is compared only where its record names every field and each matches here."""

import json
from pathlib import Path

import pytest

from golden import READERS, compare_only_where_recorded, cpu_id_of, environment

DATA = Path(__file__).parent / "data"


def _skip_reason(recorded, fields) -> str | None:
    try:
        compare_only_where_recorded("golden.json", recorded, fields)
    except pytest.skip.Exception as skipped:
        return str(skipped)
    return None


def test_a_record_without_a_needed_field_skips_naming_the_field():
    here = environment(("torch", "numpy"))
    reason = _skip_reason({"torch": here["torch"]}, ("torch", "numpy"))
    assert reason == "golden.json records no numpy: it cannot say whether its bytes hold here"
    assert _skip_reason(None, ("torch",)) == "golden.json records no torch: it cannot say whether its bytes hold here"


def test_a_record_from_another_cpu_skips_naming_what_differs():
    reason = _skip_reason({"cpu_id": "0" * 16, "machine": environment(("machine",))["machine"]}, ("cpu_id", "machine"))
    assert reason.startswith("golden.json was recorded elsewhere (cpu_id '0000000000000000' there, ")
    assert "machine" not in reason


def test_a_record_of_this_environment_compares():
    fields = tuple(READERS)
    assert _skip_reason(environment(fields), fields) is None


def test_the_cpu_id_tells_cpus_of_one_family_apart():
    """Two EPYCs with one model name, Zen 2 and Zen 4: different ids (the key the old training golden lacked)."""

    def cpuinfo(family: int, model: int) -> str:
        return f"vendor_id\t: AuthenticAMD\ncpu family\t: {family}\nmodel\t\t: {model}\nmodel name\t: AMD EPYC\n\n"

    assert cpu_id_of(cpuinfo(23, 49)) != cpu_id_of(cpuinfo(25, 17))
    assert cpu_id_of(cpuinfo(23, 49)) == cpu_id_of(cpuinfo(23, 49) + "processor\t: 1\nmodel\t\t: 17\n")


def test_every_golden_file_records_its_environment():
    """So that none is compared on a machine it was not recorded for: each file under tests/data has a record."""
    for path in sorted(DATA.glob("*.json")):
        record = json.loads(path.read_text())
        assert isinstance(record.get("environment"), dict) and set(record["environment"]) <= set(READERS), path.name
