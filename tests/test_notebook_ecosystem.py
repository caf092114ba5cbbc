"""The ecosystem chapter runs at profile smoke (the session's smoke run) and records A11 and B1 from the survey."""

from smoke_book import chapter


def test_ecosystem_notebook_records_measured_verdicts(smoke_book):
    data = chapter(smoke_book, "ecosystem").results
    claims = {c["id"]: c for c in data["claims"]}
    assert set(claims) == {"A11", "B1"}
    assert claims["A11"]["evidence"]["kinds"] == {"llama": "RMSNorm", "mistral": "RMSNorm", "gemma": "RMSNorm"}
    b1 = claims["B1"]["evidence"]
    assert 0 < b1["rms_share_after_2019"] < 1 and b1["families_after_2019"] >= 20
    assert "GPT-NeoX-20B / Pythia" in b1["layer_norm_families"]
    for claim in data["claims"]:
        assert claim["key_number"] is not None and claim["threshold"] is not None and claim["spread"] >= 0
    assert claims["B1"]["threshold"] == 0.9 and claims["B1"]["key_number"] == b1["rms_share_after_2019"]
