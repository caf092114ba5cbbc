"""Section "The norms' share of a real LLM's forward time", and Q5.

SmolLM2 is timed as loaded, on each normlab backend, with LayerNorms and without norms (`measure_time`); the norms'
median share of prefill and of decoding (from the hooks on CPU, from the no-norm ablation on GPU) is weighed against
the threshold the chapter states (`q5_verdict`, `q5_finding`). `speed_evidence` is the whole-model part of A8 and B6
(judged in the speed chapter).
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass

import pandas as pd
import torch

from normlab.analysis.realmodels.load import SmolLM2Run, corpus_chunks
from normlab.analysis.realmodels.timing import ablation_share, hooked_norm_share, summarise_times, time_variants
from normlab.analysis.realmodels.variants import variant_modules
from normlab.norms.huggingface import find_norms
from normlab.runtime.environment import this_build
from normlab.runtime.interleaved import median_and_sd
from normlab.runtime.progress import terminal_progress
from normlab.study.findings import Finding
from normlab.study.key_numbers import SHARE, KeyNumber
from normlab.study.present import table

Q5_KEY = KeyNumber("norms' share of SmolLM2-135M's prefill time", SHARE)

GPU_COMMAND = "python -m normlab.analysis --profile gpu realmodels"
BASELINE = "transformers (as loaded)"
LAYER_NORM = "LayerNorm (F.layer_norm)"
NO_NORMS = "no norms (identity)"


@dataclass
class TimingResult:
    samples: dict  # time_variants output: per variant, prefill_s and decode_s per round
    variants: list[str]  # in the order they were defined (the table's and the figure's order)
    hooks: dict  # hooked_norm_share output; empty lists where the hooks were not run
    prompt_tokens: int
    rounds: int
    decode_steps: int
    threads: int
    cores: int
    device: str
    # 1-minute load average before and after the timing rounds: this process's own threads count in it, so a
    # value above `threads` means other work shared the cores, which skews CPU shares (a build in which the prefill
    # took four times as long put 17% of it in the norms; the same code on a quiet machine, 2%).
    load_average: tuple[float, float] = (0.0, 0.0)

    @property
    def busy(self) -> bool:
        return self.device == "cpu" and max(self.load_average) > self.threads + BUSY_LOAD_MARGIN

    @property
    def timing(self) -> pd.DataFrame:
        """`summarise_times` against the model as loaded, one row per variant and phase."""
        return pd.DataFrame(summarise_times(self.samples, BASELINE))

    @property
    def ablation(self) -> dict[str, list[float]]:
        """Per phase and round: the share of the model's time that removing every norm saves."""
        return {
            phase: ablation_share(self.samples, BASELINE, NO_NORMS, f"{phase}_s") for phase in ("prefill", "decode")
        }

    @property
    def layer_vs(self) -> dict:
        """LayerNorm instead of the model's RMSNorm, per phase: against the model as loaded and against F.rms_norm."""
        return {
            phase: {
                "vs transformers": paired_change(self.samples, LAYER_NORM, BASELINE, phase),
                "vs normlab torch": paired_change(self.samples, LAYER_NORM, "normlab torch", phase),
            }
            for phase in ("prefill", "decode")
        }

    @property
    def wide(self) -> pd.DataFrame:
        """The timing summary with one row per variant, in definition order."""
        wide = self.timing.pivot(index="variant", columns="phase", values=["median_ms", "sd_ms", "ratio_to_baseline"])
        return wide.reindex(self.variants)

    @property
    def share_method(self) -> str:
        # On CPU the hooks carry the number: the ablation subtracts two noisy totals, and on a shared machine
        # their per-round spread is larger than the norms' share itself; on GPU only the ablation is available.
        return "hooks" if self.hooks["prefill"] else "ablation"

    @property
    def primary_share(self) -> dict[str, list[float]]:
        return self.hooks if self.share_method == "hooks" else self.ablation


BUSY_LOAD_MARGIN = 1.0  # load beyond this process's threads at which a CPU timing is called fragile


def measure_time(run: SmolLM2Run, settings: dict) -> TimingResult:
    """Time SmolLM2 as loaded, on each normlab backend, with LayerNorms, and without norms; then the hooks."""
    model = run.model
    prompt = corpus_chunks(run.tokenizer, run.val_text, 1, settings["prompt"]).to(run.device)
    norm_names = list(find_norms(model))
    load_before = os.getloadavg()[0]
    variants = {BASELINE: {}}
    variants.update({f"normlab {b}": variant_modules(model, b) for b in settings["backends"]})
    variants[LAYER_NORM] = variant_modules(model, "torch", convert="layer_norm")
    variants[NO_NORMS] = {n: torch.nn.Identity() for n in norm_names}
    samples = time_variants(
        model,
        prompt,
        variants,
        repeats=settings["repeats"],
        decode_steps=settings["decode_steps"],
        progress=lambda it: terminal_progress(it, desc="timing rounds"),
    )
    hooks = (
        hooked_norm_share(model, prompt, repeats=settings["hook_repeats"], decode_steps=settings["decode_steps"])
        if run.device.type == "cpu" and settings["hook_repeats"] >= 2
        else {"prefill": [], "decode": []}
    )
    return TimingResult(
        samples,
        list(variants),
        hooks,
        prompt_tokens=int(prompt.shape[1]),
        rounds=settings["repeats"],
        decode_steps=settings["decode_steps"],
        threads=torch.get_num_threads(),
        cores=os.cpu_count(),
        device=settings["device"],
        load_average=(load_before, os.getloadavg()[0]),
    )


def paired_change(samples: dict, name_a: str, name_b: str, phase: str) -> tuple[float, float]:
    """Median over rounds of t(a)/t(b) − 1, paired by round, with its sd."""
    return median_and_sd([a / b - 1 for a, b in zip(samples[name_a][f"{phase}_s"], samples[name_b][f"{phase}_s"])])


def change_text(change: tuple[float, float]) -> str:
    return f"{change[0]:+.1%} (sd {change[1]:.1%})"


def timing_table(result: TimingResult, blocks: int):
    wide = result.wide
    return table(
        pd.DataFrame(
            {
                "variant": wide.index,
                "prefill median (ms)": wide[("median_ms", "prefill")].values,
                "prefill sd (ms)": wide[("sd_ms", "prefill")].values,
                "prefill ratio": wide[("ratio_to_baseline", "prefill")].values,
                "decode median (ms/token)": wide[("median_ms", "decode")].values,
                "decode sd (ms)": wide[("sd_ms", "decode")].values,
                "decode ratio": wide[("ratio_to_baseline", "decode")].values,
            }
        ),
        caption=f"SmolLM2 forward ({blocks} blocks), prefill of {result.prompt_tokens} tokens and decoding one token "
        f"after it, {result.rounds} interleaved rounds on {result.threads} threads; ratio = median over rounds of "
        "the time relative to the model as loaded.",
    )


def q5_verdict(prefill: float, decode: float, threshold: float) -> str:
    """Q5 read as "a real LLM's norms take a large enough share of its forward time for a norm choice to
    change it by `threshold` (the 7% low end of 7%–64%)": holds when the median share (`prefill`, `decode`) reaches
    the threshold in both prefill and decoding, with caveats in one of them, does not hold in neither."""
    reached = (prefill >= threshold) + (decode >= threshold)
    return {2: "holds", 1: "holds with caveats", 0: "does not hold"}[reached]


def q5_finding(result: TimingResult, threshold: float, provenance: dict) -> Finding:
    """Q5 from the norms' median share of prefill and of decoding (hooks on CPU, else the ablation) against
    `threshold`, by the rule of `q5_verdict`."""
    primary, share, layer_vs = result.primary_share, result.ablation, result.layer_vs
    prefill, decode = statistics.median(primary["prefill"]), statistics.median(primary["decode"])
    reached = (prefill >= threshold) + (decode >= threshold)
    summary = (
        # the first sentence (the ledger's): a share of time on this machine, so it says whose; both shares against
        # the threshold; LayerNorm's own change after it
        f"A share of time on {this_build(result.device)} ({result.cores} cores), so it turns on the machine: "
        f"SmolLM2-135M's norms take {prefill:.1%} of a {result.prompt_tokens}-token prefill and {decode:.1%} of a "
        "decoding step, "
        f"{ {0: 'both below', 1: 'one of them at least', 2: 'both at least'}[reached] } {threshold:.0%}, the papers' "
        f"smallest whole-model saving. LayerNorm instead of RMSNorm (F.layer_norm vs F.rms_norm) changes prefill by "
        f"{change_text(layer_vs['prefill']['vs normlab torch'])} and decoding by "
        f"{change_text(layer_vs['decode']['vs normlab torch'])} (median and sd over interleaved rounds)."
    )
    if result.busy:
        summary += (
            f" Fragile: other work shared the cores while timing (load {max(result.load_average):.1f} on "
            f"{result.cores} cores), which skews the norms' share."
        )
    evidence = {
        "norm_time_share_prefill": prefill,
        "norm_time_share_decode": decode,
        "share_method": result.share_method,
        "ablation_share_prefill_by_round": share["prefill"],
        "ablation_share_decode_by_round": share["decode"],
        "hooked_share_prefill": result.hooks["prefill"],
        "hooked_share_decode": result.hooks["decode"],
        "share_threshold": threshold,
        "layernorm_change": layer_vs,
        "timing": result.timing.to_dict(orient="records"),
        "prompt_tokens": result.prompt_tokens,
        "decode_steps": result.decode_steps,
        "rounds": result.rounds,
        "threads": result.threads,
        "load_average_before_after": list(result.load_average),
        "busy_machine": result.busy,
        "gpu_command": GPU_COMMAND,
        "provenance": provenance,
    }
    return Finding(
        q5_verdict(prefill, decode, threshold),
        summary,
        evidence,
        key_number=prefill,
        threshold=threshold,
        spread=statistics.stdev(primary["prefill"]) if len(primary["prefill"]) > 1 else 0.0,
        **Q5_KEY.fields(),
        reads=("share_threshold",),
    )


def q5_scale(q5: Finding) -> str:
    """The prompt length, rounds and threads, on this build's machine: "on this build's CPU with a 32-token prompt (3
    rounds, 2 threads)". A share of time depends on the machine, so the sentence says whose it is."""
    e = q5.evidence
    prompt = f" with a {e['prompt_tokens']}-token prompt" if e.get("prompt_tokens") else ""
    parts = [
        f"{e['rounds']} rounds" if e.get("rounds") else None,
        f"{e['threads']} threads" if e.get("threads") else None,
    ]
    detail = ", ".join(p for p in parts if p)
    return f"on {this_build(e.get('device'))}{prompt}" + (f" ({detail})" if detail else "")


def q5_headline(q5: Finding) -> str | None:
    """The opening page's sentence on Q5 (at most 35 words); None without a key number or threshold."""
    k, t = q5.key_number, q5.threshold
    if k is None or t is None:
        return None
    return (
        f"The norms take {Q5_KEY.format(k)} of SmolLM2-135M's prefill {q5.scale or q5_scale(q5)}, "
        f"{'below' if k < t else 'above'} {Q5_KEY.limit(t)}, the papers' smallest whole-model saving"
        + {
            "holds": ", in decoding too.",
            "holds with caveats": ", but not in decoding as well.",
            "does not hold": ": too small to show end to end.",
        }.get(q5.verdict, ".")
    )


def time_paragraph(result: TimingResult, q5: Finding) -> str:
    primary, share, layer_vs = result.primary_share, result.ablation, result.layer_vs
    method = result.share_method
    other_text = (
        f"; the ablation gives {statistics.median(share['prefill']):.1%} (sd {statistics.stdev(share['prefill']):.1%}) "
        f"and {statistics.median(share['decode']):.1%} (sd {statistics.stdev(share['decode']):.1%})"
        if method == "hooks"
        else ""
    )
    return (
        f"By {method}, the norms take {q5.evidence['norm_time_share_prefill']:.1%} of the prefill time "
        f"(sd {statistics.stdev(primary['prefill']):.1%} over repeats) and "
        f"{q5.evidence['norm_time_share_decode']:.1%} of a decoding step (sd {statistics.stdev(primary['decode']):.1%})"
        f"{other_text}. Replacing every RMSNorm by LayerNorm changes the prefill time by "
        f"{change_text(layer_vs['prefill']['vs transformers'])} against the model as loaded and "
        f"{change_text(layer_vs['prefill']['vs normlab torch'])} against F.rms_norm; a decoding step by "
        f"{change_text(layer_vs['decode']['vs transformers'])} and {change_text(layer_vs['decode']['vs normlab torch'])} "
        "(median and sd of the per-round change). Where the sd is larger than the change, this machine cannot "
        "tell the two norms apart end to end.\n\n"
        "**On a GPU** the picture shifts: the matrix products run on tensor cores at a far higher rate than the "
        "memory-bound norms, so in prefill the norms' share grows (each norm is a full read and write of the "
        "activations against a few FLOPs), while in decoding with a batch of one every kernel is launch-bound and "
        "the norms' share is roughly their share of kernel launches (61 of several hundred), unless the forward is "
        f"captured in a CUDA graph. The measurement there is the gpu profile of this chapter: `{GPU_COMMAND}` "
        "(a few minutes on one GPU: the `triton` backend joins, the hooks are skipped because kernels run "
        "asynchronously, and the ablation carries the share)."
    )


def speed_evidence(result: TimingResult, q5: Finding) -> tuple[str, dict]:
    """The whole-model part of A8 and B6 (judged in the speed chapter): its sentence and numbers, no verdict."""
    primary, share, layer_vs, wide = result.primary_share, result.ablation, result.layer_vs, result.wide
    prefill, decode = q5.evidence["norm_time_share_prefill"], q5.evidence["norm_time_share_decode"]
    evidence = {
        "model": "SmolLM2-135M-Instruct",
        "device": result.device,
        "threads": result.threads,
        "norm_time_share_prefill_pct": 100 * prefill,
        "norm_time_share_decode_pct": 100 * decode,
        "norm_time_share_sd_prefill_pct": 100 * statistics.stdev(primary["prefill"]),
        "share_method": result.share_method,
        "ablation_share_prefill_pct": 100 * statistics.median(share["prefill"]),
        "ablation_share_decode_pct": 100 * statistics.median(share["decode"]),
        "layernorm_vs_rmsnorm_prefill_pct": 100 * layer_vs["prefill"]["vs normlab torch"][0],
        "layernorm_vs_rmsnorm_decode_pct": 100 * layer_vs["decode"]["vs normlab torch"][0],
        "layernorm_vs_as_loaded_prefill_pct": 100 * layer_vs["prefill"]["vs transformers"][0],
        "layernorm_vs_as_loaded_decode_pct": 100 * layer_vs["decode"]["vs transformers"][0],
        "backend_ratio_prefill": dict(zip(wide.index, wide[("ratio_to_baseline", "prefill")].values)),
        "backend_ratio_decode": dict(zip(wide.index, wide[("ratio_to_baseline", "decode")].values)),
        "prompt_tokens": result.prompt_tokens,
        "rounds": result.rounds,
    }
    text = (
        f"Real-LLM whole-model on SmolLM2-135M (CPU): norms are {prefill:.1%} of prefill and "
        f"{decode:.1%} of decoding; LayerNorm instead of RMSNorm (F.layer_norm vs F.rms_norm) changes "
        f"prefill by {change_text(layer_vs['prefill']['vs normlab torch'])} and decoding by "
        f"{change_text(layer_vs['decode']['vs normlab torch'])} over interleaved rounds."
    )
    return text, evidence
