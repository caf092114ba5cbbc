"""The GPT testbed: a small nanoGPT-style model with a pluggable norm, its training loop, corpus and command line.

It needs the `gpt` extra (pandas, tqdm) besides the norm library.
"""

try:
    import pandas  # noqa: F401
except ImportError as error:  # the trainer's history is a DataFrame
    raise ImportError(
        f'normlab.gpt needs pandas ({error}); install the testbed with `pip install "normlab[gpt]"`'
    ) from error
