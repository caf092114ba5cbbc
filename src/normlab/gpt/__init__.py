"""The GPT testbed: a small nanoGPT-style model with a pluggable norm, its training loop, corpus and command line.

Training needs torch alone (a GPU machine with nothing else trains with it). The `gpt` extra (pandas, tqdm) adds the runs' tables as DataFrames and progress bars; a table asked for without pandas
names the extra.
"""
