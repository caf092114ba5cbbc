"""The real-models chapter (`notebooks/realmodels.py`): SmolLM2-135M (pre-LN RMSNorm, 30 layers) and
all-MiniLM-L6-v2 (post-LN LayerNorm), neither trained here. Each section of the chapter calls the module named
after it; this package holds no logic itself.

The chapter's sections, in reading order, and the modules that compute them:

- opening (the model read, the claims box): `profiles` (settings per profile), `load` (SmolLM2 from its GGUF file,
  checksum checked; the held-out corpus chunks; `open_smollm2`);
- "The residual stream of a real RMSNorm LLM, layer by layer": `stream`;
- "Are the massive activations a constant? Sun et al.'s ablation": `massive` (also the stream's part of B5);
- "Centring added to a model trained without it": `centring_added`;
- "What the swap measures, exactly": `centring_map` (the exact LayerNorm-to-centred-RMSNorm map);
- "Centring removed from a model trained with it": `centring_removed` (MiniLM without centring);
  Q4's verdict and B16's evidence weigh the centring sections together: `centring_verdict`;
- "The norms' share of a real LLM's forward time": `forward_time` (Q5; the whole-model part of A8 and B6), on
  `timing` (interleaved rounds, norm hooks).

Building blocks several sections share: `variants` (norm variants installed in turn, the loss per chunk), and
`figures` (one function per figure of the chapter).
"""
