"""The quality chapter (`notebooks/quality.py`): paired LayerNorm/RMSNorm GPTs, their step time, and the residual
stream of the trained models (claims A9, B7, B5, B16; evidence for B6).

Each section of the chapter calls the module named after it:

- the introduction's table of the training corpus: `introduction`;
- "Loss parity (A9) and coinciding curves (B7, first half)": `loss_parity`;
- "Does the difference change with the model's size?": `scale_ladder`;
- "Interrupting and resuming": `resuming`;
- "Time per step (B7, second half; evidence for B6)": `step_time`;
- "The residual stream (B5)": `residual_stream`;
- "The extra dimension (B16)": `extra_dimension`;
- "A trained model nobody here made: all-MiniLM-L6-v2": `minilm`.

Their building blocks: `profiles` (the sizes per profile, checked), `training` (the paired trainings) and `figures`
(one function per figure).

The chapter states each margin and threshold in its prose and passes it in; every function that judges a claim
returns a `Finding` whose verdict follows from the numbers measured in the run. The `*_paragraph` functions write
the sentence the page shows beside a verdict, from the same numbers.
"""
