"""The speed chapter (notebooks/speed.py): how much faster is RMSNorm, and why? One module per section.

- "How it was measured": `method` (where and how the benchmark ran, every case, the cases left out);
- "The LayerNorm/RMSNorm time ratio, implementation by implementation": `ratio`;
- "Achieved bandwidth against the copy limit": `bandwidth`;
- "Forward and backward against the copy": `normlab.bench.report.backward_vs_copies`, shown by `page`;
- "On a GPU" and its subsections: `on_gpu`;
- "Passes over memory: counted, not assumed (A7, B8, B9)": `passes`;
- "Cheaper arithmetic (A5)": `arithmetic` (also what "both norms fused" means);
- "Memory bound, and what fusion leaves of the difference (A10, Q2)": `memory_bound`;
- "Small-batch inference (B10)": `small_batch`;
- "Partial RMSNorm (Q3)": `partial`;
- "What the original paper reported (A8, B6)": `paper`;
- "Verdicts": the chapter's table, drawn by `normlab.study.present`.

Beside them: `settings` (the benchmark profile per chapter profile, the thresholds' check), `runs` (this run's
benchmark and the committed GPU runs), `hardware` (one verdict from every run measured, by one rule), `page` (a
sentence where a table would be empty) and `figures` (one function per figure).
"""
