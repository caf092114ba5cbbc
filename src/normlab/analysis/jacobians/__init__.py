"""The Jacobians chapter (`notebooks/jacobians.py`): the closed-form Jacobians and gradients of RMSNorm and
LayerNorm, checked against autograd in float64 (claims B3, B12, B13, B14).

Each section of the chapter calls the module named after it:

- "Closed forms against autograd": `against_autograd`;
- "What the matrices look like": `matrices`;
- "Null directions, ranks and LayerNorm's extra projection", with "B3: combining the invariance part and the
  Jacobian part": `null_space`;
- "Gradients shrink as 1/r": `one_over_r`;
- "How much ε changes the Jacobian": `epsilon`;
- "Which part of an update the normalisation removes" (B12): `update_parts`;
- "The gain in the backward pass" (B13): `gain_backward`;
- "What the gain learns" (B14): `gain_fit`.

Their building blocks: `closed_forms` (the closed forms themselves and autograd to check them, torch alone),
`profiles` (the sizes per profile, checked), `verdicts` (the line under a recorded verdict) and `figures` (one
function per figure). Each section's `*_table` of measurements draws from the chapter's single random generator,
in page order; the chapter states each tolerance and passes it in.
"""
