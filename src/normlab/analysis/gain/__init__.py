"""The gain chapter (notebooks/gain.py, claims B15 and V5): scale invariance, effective learning rate and weight decay.

Each section of the chapter, and the module that computes it:

- "Forward: is the gain scale invariant, and what is?" -> `forward` (part 1 of B15)
- "Effective update under the rescale symmetry: Adam against SGD" -> `effective_update` (part 2)
- "Scale-invariant weights: the classical results on an exact toy" -> `exact_toy` (part 3)
- "Where the invariance is exact: W_q and W_k under QK-norm" -> `qk_norm` (does not vote)
- "Weight decay on the gains of the small GPT" -> `weight_decay` (part 4)
- "Verdict for B15" -> `verdict`
- "Weight decay on input norms' gains against output norms'" -> `decay_placement` (claim V5: its runs, its verdict)

The chapter's own building blocks:

- `profiles`: its sizes per profile, checked;
- `runs`: its trainings (the two models the forward section scales, and the decay sweep);
- `figures`: one function per figure of the chapter.

The measurements the sections are built on:

- `toy_chain`: the exact float64 chain of scale-invariant weights, its optimizers, schedules and equilibria;
- `rescaling`: a GPT's gains scaled at one norm location, and the (gain·a, next linear/a) symmetry;
- `qk_projections`: W_q and W_k under QK-norm, scaled, differentiated and trained with plain SGD;
- `measures`: the angle between two weights, and a power-law exponent.

Each section module takes the thresholds the chapter states in its prose as arguments, and `verdict` builds B15
from their results. Import the section modules themselves: the package re-exports nothing.
"""
