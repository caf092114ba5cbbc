"""The ecosystem chapter (notebooks/ecosystem.py): who actually uses RMSNorm? One module per section.

- `classify`: the measurement behind every section: each architecture's norm classes, read from the installed
  `transformers` source and classified by behaviour, not by name;
- "The norm of each family, by release date": `family_norms` (the surveyed list, counted by year) and
  `figures` (the chapter's figure);
- "Verdicts": `verdicts` (A11 and B1).
"""
