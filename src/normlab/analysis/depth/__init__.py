"""The depth chapter (`notebooks/depth.py`): pre-LN or post-LN, RMSNorm or LayerNorm, as depth grows (claims B17,
B18, B19).

Each section of the chapter calls the module named after it:

- "At initialisation: gradients, residual norm and token similarity": `initialisation`;
- "Training at depth": `training_at_depth`;
- "Verdicts": one module per claim, `identity_path` (B17: pre-LN keeps the trunk an identity path),
  `post_ln_decay` (B18: post-LN RMSNorm's deep-signal decay against LayerNorm's) and `interlock` (B19: the
  LLaMA-style ablation and the interaction of its parts).

Their building blocks: `profiles` (the sizes per profile, checked) and `figures` (one function per figure).
"""
