"""The fms-acceleration peft QLoRA rows of mistral-7b by campaign, traced as the stacks of their dates ran them.

    python bench/qlora_bnb_versions.py

bitsandbytes up to 0.43.1 kept every 4-bit linear's input for backward (``MatMul4Bit.forward``: ``ctx.tensors =
(A, B)``); 0.43.2 (released 2024-07-23) keeps ``(None, B)`` (bitsandbytes #1270, "fix QLoRA mem bug: delete useless
buffered activation", 2024-07-16). The 2024-05-24 … 2024-07-15 campaigns ran the former (07-15 pins 0.43.1; the
earlier ones pin nothing and predate 0.43.2), 2024-07-29 on pin 0.43.2 or later. transformers 4.x checkpoints with
torch's reentrant checkpoint (``use_reentrant=True`` unless told; peft's ``prepare_model_for_kbit_training`` passes no
such kwarg), whose forward runs without grad, so the kept inputs live only in a layer's recomputation.

One GPU (the step rows, peft's kbit upcast) is traced three ways: as the estimator does (transformers 5.x's
non-reentrant checkpoint), with 4.x's reentrant one, and with it and bitsandbytes ≤ 0.43.1's kept input
(qlora.keep_matmul_input); FSDP ranks (2 GPUs) as the estimator does (4.x checkpointing already) and with the kept
input. Allocated peaks in GiB, and each campaign's measured figure with the error of the matching trace. The
estimator now routes the rows of the campaigns before 2024-07-23 to the last column itself (Job.bitsandbytes_version
from the rows' ``framework_version``; docs/traced_vs_theory.md, findings 22.2 and 22.4).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoconf.catalog import get_architecture  # noqa: E402
from autoconf.estimators.theory.memory import micro_batch  # noqa: E402
from autoconf.estimators.traced.cache import get_fit  # noqa: E402
from autoconf.estimators.traced.estimator import _regime  # noqa: E402
from autoconf.estimators.traced.job_spec import trace_spec  # noqa: E402
from autoconf.estimators.traced.rank_cache import trace_ranks  # noqa: E402
from autoconf.estimators.traced.ranks import fsdp1_settings  # noqa: E402
from autoconf.evaluation.data import load_measurements, row_to_inputs  # noqa: E402
from autoconf.schema import Job  # noqa: E402

GIB = 2**30
MODEL = "mistral-7b-v0.1"
KEEPS_INPUT = "2024-07-23"  # campaigns before bitsandbytes 0.43.2's release ran a release that keeps the input


def _step(job: Job, batch: int, extra: dict[str, bool]) -> float:
    """The one-GPU traced step's allocated peak (the estimator's fit), with ``extra`` spec keys."""
    spec = {**trace_spec(job, get_architecture(MODEL)), **extra}
    return get_fit(spec, _regime(job, batch), False).peak(batch, job.tokens_per_sample)[0]


def _rank(job: Job, batch: int, extra: dict[str, bool]) -> float:
    """Rank 0 of 2 as the estimator traces it (FSDP1), with ``extra`` spec keys."""
    spec = {**trace_spec(job, get_architecture(MODEL)), "world": 2, "strategy": "fsdp",
            "shape": [batch, job.tokens_per_sample], "expandable_segments": False, **fsdp1_settings(job), **extra}
    return float(trace_ranks(spec)["allocated_peak"])


def main() -> int:
    rows = load_measurements()
    rows = rows[(rows.source == "fms-acceleration") & (rows.framework == "peft") & (rows.model_name == MODEL)
                & (rows.status == "ok") & (rows.scored == 1)]
    print("| GPUs | batch/GPU | campaign | measured | traced (as answered) | 4.x reentrant | + bnb ≤ 0.43.1 | error |")
    print("|---|---|---|---|---|---|---|---|")
    for _, row in rows.sort_values(["number_gpus", "per_device_batch_size", "campaign"]).iterrows():
        job, placement = row_to_inputs(row)
        batch = micro_batch(job, placement)
        old = row.campaign.split("@")[1].split(":")[0] < KEEPS_INPUT
        if row.number_gpus == 1:
            plain, reentrant = _step(job, batch, {}), _step(job, batch, {"reentrant": True})
            kept = _step(job, batch, {"reentrant": True, "bnb_keeps_input": True})
        else:
            plain = reentrant = _rank(job, batch, {})
            kept = _rank(job, batch, {"bnb_keeps_input": True})
        measured = float(row.torch_allocated_bytes)
        matching = kept if old else reentrant
        print(f"| {row.number_gpus} | {row.per_device_batch_size} | {row.campaign.split('@')[1]} | "
              f"{measured / GIB:.2f} | {plain / GIB:.2f} | {reentrant / GIB:.2f} | {kept / GIB:.2f} | "
              f"{100 * (matching - measured) / measured:+.1f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
