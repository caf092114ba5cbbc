"""The geometry chapter (notebooks/geometry.py): invariances, the dimension of the output set, and what ε does.

One module per section of the chapter, each returning its measured data and the `Finding`s of its claims:

- "The formulas against PyTorch": `formulas` (A1, B2, A3);
- "Shift and scale invariance": `invariance` (A4, B4; B3's invariance part as evidence);
- "The dimension of the output set": `dimension` (B16's geometric part, as evidence);
- "Parameters and memory": `parameters` (A6);
- "Where ε goes (A2 vs B2, Q1)": `eps_placement` (Q1, A2);
- "Mean-dominated inputs and ε (B11)": `mean_dominated` (B11);
- "Verdicts": the chapter's table, drawn by `normlab.study.present`.

Beside them: `articles` (the articles' formulas as written, and the draws behind every spread), `settings` (the
sizes per profile) and `figures` (one function per figure).
"""
