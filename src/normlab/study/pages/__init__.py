"""The pages built from the results files, one module each, generic: none knows a claim or a chapter's evidence.

- `ledger_page`: the claims ledger, one row per claim with its key number in its unit and what it measures;
- `opening`: the opening page's findings, the headline sentences the chapters wrote, in reading order;
- `reproducibility`: what each chapter ran on, and the comparison with builds from other machines;
- `summary_figure`: verdict counts per chapter.

Each reads the records as data (`meaning`, `unit`, `headline`, written by the chapter that decided the claim);
`normlab.study.ledger` checks the results and writes the pages.
"""
