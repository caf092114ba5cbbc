"""Helpers for tests that read a notebook's results JSON."""


def evidence_numbers(value):
    """Every number inside a claim's evidence, including the non-finite ones the results file spells as strings."""
    if isinstance(value, dict):
        for item in value.values():
            yield from evidence_numbers(item)
    elif isinstance(value, list):
        for item in value:
            yield from evidence_numbers(item)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield value
    elif isinstance(value, str) and value.lower() in ("nan", "inf", "-inf"):
        yield float(value)
