"""The training step with RoPE as written against the faster form, side by side in one process (bit-identical
outputs: tests/test_model.py), for the study's CPU models: median ratio of step times, faster form over written.

Alternating rounds of a few steps each, the order swapped every round, on two runs that train the same model from the
same seed, so the machine's drift falls on both alike. One thread, as each of the study's workers trains.

    PYTHONPATH=src python scripts/rope_step_ab.py
"""

from __future__ import annotations

import argparse
import contextlib
import statistics

import torch
import torch.nn.functional as F

from normlab.gpt import model as gpt_model
from normlab.gpt.corpus import load_corpus
from normlab.gpt.train import TrainConfig, _optimisation_step, _set_up
from normlab.runtime.interleaved import time_interleaved

MODELS = {
    "quality (A9's model: width 64, 4 blocks)": dict(width=64, depth=4, heads=4),
    "depth (width 32, 12 blocks)": dict(width=32, depth=12, heads=4),
    "landscape small at width 32 (4 blocks)": dict(width=32, depth=4, heads=4),
}


def attention_rotating_each(self, x):
    """The attention before the faster form: q and k rotated one by one, each as written."""
    B, T, C = x.shape
    q, k, v = self.qkv(x).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
    if self.q_norm is not None:
        q, k = self.q_norm(q), self.k_norm(k)
    cos, sin = self.rope.cos[:T], self.rope.sin[:T]
    q, k = gpt_model.rope_as_written(q, cos, sin), gpt_model.rope_as_written(k, cos, sin)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return self.proj(y.transpose(1, 2).reshape(B, T, C))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--steps", type=int, default=5, help="steps per round and form")
    args = parser.parse_args()
    torch.set_num_threads(1)
    corpus = load_corpus()
    faster = gpt_model.CausalSelfAttention.forward
    forms = {"written": attention_rotating_each, "faster": faster}
    for name, size in MODELS.items():
        config = gpt_model.GPTConfig(vocab_size=256, context=64, norm="rms", **size)
        train = TrainConfig(steps=10 * args.rounds * args.steps, batch_size=16, warmup_steps=10, progress=False)
        runs = {}
        for form, forward in forms.items():
            gpt_model.CausalSelfAttention.forward = forward
            runs[form] = _set_up(config, train, corpus)
        steps = {
            form: (lambda form=form: [_optimisation_step(runs[form]) for _ in range(args.steps)]) for form in forms
        }

        def installed(form):
            gpt_model.CausalSelfAttention.forward = forms[form]
            return contextlib.nullcontext()

        times = time_interleaved(steps, rounds=args.rounds, warmup=0, around=installed)
        ratios = [f / w for f, w in zip(times.per_round("faster"), times.per_round("written"))]
        gpt_model.CausalSelfAttention.forward = faster
        quartiles = statistics.quantiles(ratios, n=4)
        print(
            f"{name}: step time, faster / written, median {statistics.median(ratios):.3f} "
            f"(quartiles {quartiles[0]:.3f}-{quartiles[2]:.3f}, {args.rounds} rounds of {args.steps} steps)"
        )


if __name__ == "__main__":
    main()
