"""Fit the throughput theory's efficiency constants (theory/throughput.EfficiencyFit) on measured tokens/s.

``throughput_rows`` turns the measured rows of data/measurements.csv into fit rows (the Job and Placement,
the features of the efficiency formula, the implied efficiency); ``fit_efficiency`` fits the constants on
any subset of them (all rows: the shipped FITTED; all but one source: a leave-one-source-out fit);
``predict`` answers tokens/s with given constants. The efficiency formula and the meaning of each constant
are in autoconf/estimators/theory/throughput.py. bench/throughput_accuracy.py reports the errors and prints
the FITTED block (``--fit``).

Interconnect: a row whose campaign names its node-to-node link ("1600 Gbps node-node interconnect", the
llm-foundry A100 sections; InternEvo; fms-fsdp) is estimated with that bandwidth (Gbps / 8 per node); a source
whose cluster is known but not restated uses ASSUMED_LINKS; other rows the estimator's default
(throughput.INTER_NODE_BANDWIDTH_GBPS).

Stacks without a Job framework profile (NeMo / Megatron-Core, InternEvo, fms-fsdp, the FlashAttention trainer):
the row's Job is built as an HF Trainer job (the framework changes memory behaviour only) and its throughput
profile is kept in column ``stack`` (theory/stacks.py); Megatron's distributed optimizer is ZeRO-1 (optimizer
state sharded over the data-parallel ranks). The row's TP / PP degrees and virtual pipeline size ("VP n" in
``kernels``) go to the Placement. FP8 rows are left out: FP8 peaks and kernels are not modelled.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd
from pydantic import ValidationError

from autoconf.catalog import get_architecture, get_gpu
from autoconf.errors import AutoconfError
from autoconf.estimators.theory import throughput as tp
from autoconf.estimators.theory.stacks import STACKS, Stack, stack_for
from autoconf.evaluation.data import row_to_inputs
from autoconf.schema import Job, Placement

X0_GRID = [0.0] + [float(v) for v in np.geomspace(50, 50_000, 61)]  # tokens per micro-batch
K_GRID = [0.0] + [float(v) for v in np.geomspace(0.05, 2000, 51)]  # memory-bound coefficient
A_GRID = [0.0] + [float(v) for v in np.geomspace(0.02, 5, 25)]  # attention extra cost
PHI_GRID = [float(v) for v in np.linspace(0.0, 1.0, 11)]  # fused-kernel stacks' shares of K·R/w (φ) and of X0 (φ_X)
METHODS = ("full", "lora", "qlora")
# Which base efficiency E a method takes. LoRA runs the base model's GEMMs (forward and input gradients) at full
# fine-tuning's efficiency; what it adds is counted, not fitted: the adapters' FLOPs (flops_parts) and element-wise
# bytes (throughput.LORA_BYTES_PER_WIDTH). A LoRA E of its own was learnt, with fms-acceleration held out, from NeMo's
# LoRA rows alone (the only other LoRA rows) through the fused-stack factor S. QLoRA keeps its own E: its
# dequantisation kernels are not counted.
BASE_METHOD = {"full": "full", "lora": "full", "qlora": "qlora"}
EXTRAS = ("fused", "moe", "kernels", "compiled", "fp8")  # multiplicative factors F, M, S, C, P (0/1 features)
_LINK = re.compile(r"(\d+(?:\.\d+)?)\s*Gbps node-node", re.IGNORECASE)
_VP = re.compile(r"\bVP[ =](\d+)")
# fms-acceleration's accelerated-moe plugin names its expert-parallel degree in the framework config
# ("moe-scattermoe-granite-ep4": ScatterMoE with ep_degree 4, experts sharded over 4 ranks, tokens sent by all-to-all)
_SCATTERMOE_EP = re.compile(r"scattermoe-[a-z]+-ep(\d+)")
_ZERO_GROUP = re.compile(r"\bzero1=(\d+)")  # InternEvo's ZeRO group size (zero1=-1: all data-parallel ranks)
# fms-fsdp states MFU and HFU per GPU next to each table cell ("MFU (A100 80G)=0.51, HFU (A100 80G)=0.59")
_MFU_HFU = re.compile(r"MFU \((A100|H100) 80G\)=([\d.]+), HFU \(\1 80G\)=([\d.]+)")
# Node-to-node links of clusters a source names but whose rows do not restate the link (GB/s per node).
# dgxc-benchmarking runs on NVIDIA DGX Cloud H100 nodes: DGX H100 has 8 ConnectX-7 400 Gb/s InfiniBand ports for
# the compute fabric (NVIDIA DGX H100 user guide, "Network ports"): 8 x 400 / 8 = 400 GB/s per node.
# nemo-megatron-bridge-perf's NeMo 24.07 tables are measured on DGX-H100 systems (the same fabric).
ASSUMED_LINKS = {"dgxc-benchmarking": 400.0, "nemo-megatron-bridge-perf": 400.0}
# Campaigns that do not name their network but run on a GPU whose clusters are built one way: llm-foundry's H100
# tables (MosaicML platform, January 2024) state no interconnect; H100 training clusters follow NVIDIA's HGX / DGX
# H100 reference design of one 400 Gb/s InfiniBand or RoCE NIC per GPU (NVIDIA DGX SuperPOD H100 reference
# architecture), 400 GB/s per node. An assumption, stated in docs/accuracy.md.
ASSUMED_CAMPAIGN_LINKS = {"llm-foundry/llmfoundry_mpt_train_benchmarks.csv:H100": 400.0}
# Data strategies outside the Job schema -> the Job strategy with the same sharding.
STRATEGIES = {"megatron": "zero1", "megatron-fsdp": "fsdp"}  # Megatron-FSDP: parameters, grads, states sharded
# FP8 recipes (Job.fp8): TE delayed / current scaling, MXFP8 block scaling (Blackwell), llm-foundry amp_fp8.
# NVFP4 (4-bit) and cells whose precision the source leaves open are not modelled.
PRECISION_FP8 = ("fp8", "amp_fp8", "mxfp8", "fp8-cs", "fp8-mx", "fp8-cs (fp8-mx)")
PRECISION_NOT_MODELLED = ("nvfp4", "not stated (fp8 per the page text for most rows)")
# A SQuAD v1.1 training sample in tokens: the dataset card of rajpurkar/squad gives 79,346,108 bytes for 87,599
# training examples, 906 bytes each with id, title and answer; its context and question (~850 bytes) at ~4 bytes per
# BPE token of English text, plus NeMo's prompt template: ~220 tokens. Packed to 4,096 tokens the attention FLOPs
# are 220 / 4,096 of the unpacked ones; twice or half the length moves a DGX Cloud 8B prediction by < 1 %.
SQUAD_SAMPLE_TOKENS = 220.0
# NeMo releases whose performance tables were run from the NeMo 1.0 launcher (NeMo-Framework-Launcher), not NeMo 2.0's
# recipes (nemo-megatron-bridge-perf SOURCE.md: the 24.07 tables)
NEMO1_VERSIONS = ("NeMo 24.07",)



@dataclass(frozen=True)
class Shape:
    """Which terms a fit has: a base efficiency per (GPU architecture, method) or per method only, and K."""

    by_generation: bool = False
    memory_term: bool = True
    attention_term: bool = True

    @property
    def label(self) -> str:
        base = "E per GPU architecture × method" if self.by_generation else "E per method (LoRA = full)"
        return (base + (", K·R/w" if self.memory_term else "") + (", α·attention share" if self.attention_term else "")
                + ", X0, F, M")


SHIPPED = Shape(attention_term=False)  # attention is priced by its kernel (throughput.ATTENTION_EFFICIENCY)
VARIANTS = (Shape(True, False, False), Shape(True, True, False), Shape(False, True, False), Shape(False, True, True))


def inter_node_gbps(campaign: str, source: str = "") -> float:
    """GB/s per node of a campaign that states its node-to-node link, else the source's known cluster, else the
    estimator's default."""
    found = _LINK.search(campaign or "")
    if found:
        return float(found.group(1)) / 8
    for prefix, gbps in ASSUMED_CAMPAIGN_LINKS.items():
        if (campaign or "").startswith(prefix):
            return gbps
    return ASSUMED_LINKS.get(source, tp.INTER_NODE_BANDWIDTH_GBPS)


def _inputs(row: pd.Series) -> tuple[Job, Placement, str]:
    """(Job, Placement, stack name) of a data row; stacks without a Job profile are built as HF Trainer jobs."""
    stack = str(row.get("framework") or "")
    precision = str(row.get("compute_precision") or "")
    if precision in PRECISION_NOT_MODELLED:
        raise ValueError(f"compute precision {precision} not modelled")
    data = row.to_dict()
    scatter = _SCATTERMOE_EP.search(str(data.get("kernels") or ""))
    if str(data.get("expert_parallel") or "") not in ("", "nan", "1", "1.0") or (scatter and int(scatter.group(1)) > 1):
        raise ValueError("expert parallelism not modelled")
    if packed_span(row) is None and stack in ("nemo", "megatron") and str(data.get("packing")) in ("1", "1.0", "True"):
        # NeMo packed SFT attends within each packed sample (THD layout, cu_seqlens: NeMo docs "Sequence Packing");
        # a dataset whose sample lengths we do not know leaves the attention FLOPs unknown
        raise ValueError("packed sequences with per-sample attention not modelled")
    if stack in STACKS:
        data["framework"] = "hf-trainer"
        data["gradient_accumulation_steps"] = _megatron_accumulation(data)
        if stack in ("nemo", "megatron") and _missing(data.get("gradient_checkpointing")):
            data["gradient_checkpointing"] = 0  # Megatron-LM --recompute-granularity defaults to None: no recompute
    data["strategy"] = STRATEGIES.get(str(data.get("strategy") or ""), data.get("strategy"))
    if precision in PRECISION_FP8:  # FP8 GEMMs inside BF16 training (llm-foundry amp_fp8: autocast BF16 + TE FP8)
        data["dtype"] = str(data.get("dtype") or "bf16").replace("fp8", "bf16")
        data["amp"] = str(data.get("amp") or "").replace("fp8", "bf16") or data.get("amp")
    if stack == "llm-foundry" and "attn_impl triton" in str(data.get("kernels") or ""):
        stack = "llm-foundry-triton"  # the Job stays llm-foundry's (its fused loss); the profile names the kernel
    job, place = row_to_inputs(data)
    if precision in PRECISION_FP8:
        job = job.model_copy(update={"fp8": True})
    if "torch.compile" in str(data.get("kernels") or "") and not job.torch_compile:
        job = job.model_copy(update={"torch_compile": True})
    layout = {c: int(data[c]) for c, key in (("tensor_parallel", "tp"), ("pipeline_parallel", "pp"))
              if not pd.isna(data.get(c)) and str(data.get(c)) != ""}
    vp = _VP.search(str(data.get("kernels") or ""))
    if layout or vp:
        place = Placement(**{**place.model_dump(), "tp": layout.get("tensor_parallel", 1),
                             "pp": layout.get("pipeline_parallel", 1), "virtual_pp": int(vp.group(1)) if vp else 1})
    return job, place, stack if stack in STACKS else "hf"


def _megatron_accumulation(data: dict[str, object]) -> object:
    """A row that states the global and the micro batch but no accumulation: Megatron's GBS = MBS · GA · DP with
    DP = GPUs / (TP · PP · CP) (Megatron-LM arguments: num_micro_batches = GBS / (MBS · DP))."""
    ga, mbs = data.get("gradient_accumulation_steps"), data.get("per_device_batch_size")
    if not _missing(ga) or _missing(mbs):
        return ga
    degrees = [1 if _missing(data.get(c)) else int(float(str(data.get(c))))
               for c in ("tensor_parallel", "pipeline_parallel", "context_parallel")]
    dp = int(float(str(data["number_gpus"]))) // math.prod(degrees)
    return max(1, int(float(str(data["batch_size"]))) // (int(float(str(mbs))) * max(dp, 1)))


def packed_span(row: pd.Series) -> float | None:
    """Tokens each packed sample attends over, for a NeMo packed fine-tuning row whose dataset we know; else None.

    NeMo packs fine-tuning samples into one sequence and attends within each (THD layout with cu_seqlens: NeMo docs
    "Sequence Packing"); its finetune recipes pack SQuAD in performance mode (``packed_sequence = performance_mode``,
    4,096 tokens: nemo/collections/llm/recipes, e.g. llama3_8b.py ``finetune_recipe``).
    """
    stack = str(row.get("framework") or "")
    packed = str(row.get("packing")) in ("1", "1.0", "True")
    if stack in ("nemo", "megatron") and packed and "SQuAD" in str(row.get("notes") or ""):
        return SQUAD_SAMPLE_TOKENS
    return None


def _profile(row: pd.Series, stack: str, method: str) -> Stack:
    """The row's throughput profile: stack_for(stack, method), except that NeMo's PEFT profile (TP collectives exposed)
    is sourced from NeMo 2.0's recipes, which DGX Cloud's ft_llama3 runs; NeMo 24.07's tables come from the NeMo 1.0
    launcher (NEMO1_VERSIONS), whose PEFT configs we have not read: the nemo-launcher profile (NeMo's, no PEFT one)."""
    if stack == "nemo" and str(row.get("framework_version") or "") in NEMO1_VERSIONS:
        return STACKS["nemo-launcher"]
    return stack_for(stack, method)


def _missing(value: object) -> bool:
    return value is None or str(value) in ("", "nan")


def stated_recompute(row: pd.Series) -> float:
    """The share of layers a selective-checkpointing row recomputes, from the MFU and HFU its source states: HFU
    counts the recomputed forward (2 of the 6 FLOPs per weight per token), so HFU / MFU = 1 + f / 3 (fms-fsdp
    README: "HFU ... includes the recomputation"). NaN when the row is not selective or states neither.

    The share is the configuration's, not the GPU's: fms-fsdp says "we use the exact same scripts and
    configurations for these GPUs" (README at ed74fd5, A100 and H100), yet its two-decimal MFU / HFU give different shares per GPU for
    the same cell (13B compiled: 0.39 on A100, 0.21 on H100; 70B: 1.04 and 0.71). Each GPU's pair is one reading
    of the same f, so f is the mean of the shares every stated GPU's pair gives (13B compiled: 0.30).
    """
    if "selective" not in str(row.get("kernels") or ""):
        return math.nan
    shares = [3.0 * (float(hfu) / float(mfu) - 1.0)
              for _, mfu, hfu in _MFU_HFU.findall(str(row.get("notes") or "")) if float(mfu) > 0]
    if not shares:
        return math.nan
    return min(max(sum(shares) / len(shares), 0.0), 1.0)


def _recompute(value: object) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(str(value))


def throughput_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Ok, non-duplicate rows with tokens/s, a resolvable model and a GPU with a peak, with the fit features.

    ``implied`` is NaN where the row is communication-bound under our model (it is still scored, not fitted);
    ``attrs['skipped']`` counts the rows left out, by reason and source.
    """
    dup = frame["duplicate_of"].fillna("").astype(str).str.len() > 0
    ok = frame[(frame["status"] == "ok") & frame["tokens_per_second"].notna() & ~dup]
    records, skipped = [], Counter[str]()
    for _, row in ok.iterrows():
        try:
            job, place, stack = _inputs(row)
            arch, gpu = get_architecture(job.model), get_gpu(place.gpu_model)
            tp.peak_flops(gpu, job.dtype)
        except (AutoconfError, ValueError) as exc:
            skipped[f"{row['source']}: {_field(exc)} not answerable"] += 1
            continue
        link = inter_node_gbps(str(row.get("campaign", "")), str(row["source"]))
        profile = _profile(row, stack if stack != "hf" else job.framework, job.method)
        recompute = stated_recompute(row)
        span = packed_span(row)
        found = _ZERO_GROUP.search(str(row.get("kernels") or ""))
        group = int(found.group(1)) if found and int(found.group(1)) > 1 else None
        implied = tp.implied_efficiency(job, place, float(row["tokens_per_second"]), link, profile,
                                        _recompute(recompute), group, span)
        records.append({
            "source": row["source"], "framework": stack if stack != "hf" else job.framework, "gpu": gpu.name,
            "model": job.model, "stack": profile.name,
            "method": job.method, "job": job, "placement": place, "family": gpu.architecture,
            "fused": tp.fused_kernels(job), "moe": arch.is_moe,
            # x / (x + X0 · total / active) (throughput.microbatch_overhead_tokens) as x' / (x' + X0)
            "x": tp.micro_batch_tokens(job, place) * arch.active_params / arch.total_params,
            "kernels": profile.fused_kernels, "compiled": bool(job.torch_compile), "fp8": job.fp8,
            "gpus": place.number_gpus,
            "layout": str(row.get("kernels") or ""),
            "q": tp.ridge_over_hidden(job, gpu, arch, _recompute(recompute), span),
            "a": tp.attention_share(job, arch, _recompute(recompute), span), "link": link, "recompute": recompute,
            "zero_group": group, "span": span,
            "implied": implied if implied is not None else math.nan, "measured": float(row["tokens_per_second"]),
        })
    out = pd.DataFrame.from_records(records)
    out.attrs["skipped"] = dict(skipped)
    return out


def _field(exc: Exception) -> str:
    """The input a refusal names: AutoconfError.field, or the first location of a pydantic error."""
    if isinstance(exc, ValidationError) and exc.errors():
        return str(exc.errors()[0]["loc"][0])
    if not isinstance(exc, AutoconfError) and ("compute precision" in str(exc) or "not modelled" in str(exc)):
        return str(exc).removesuffix(" not modelled")
    return str(getattr(exc, "field", "") or type(exc).__name__)


def _flag(rows: pd.DataFrame, column: str) -> pd.Series:
    """A 0/1 feature column; absent = all False (rows built by hand with fewer features)."""
    return rows[column].astype(bool) if column in rows else pd.Series(False, index=rows.index)


def _keys(rows: pd.DataFrame, shape: Shape) -> list[tuple[str, str]]:
    """Each row's base-efficiency group: (GPU architecture or "*", BASE_METHOD of its method)."""
    families = rows["family"] if shape.by_generation else ["*"] * len(rows)
    return [(f, BASE_METHOD[m]) for f, m in zip(families, rows["method"], strict=True)]


def _groups(rows: pd.DataFrame, shape: Shape) -> list[tuple[str, str]]:
    return sorted(set(_keys(rows, shape)))


def _design(rows: pd.DataFrame, groups: list[tuple[str, str]], shape: Shape) -> np.ndarray:
    keys = _keys(rows, shape)
    onehot = np.array([[1.0 if k == g else 0.0 for g in groups] for k in keys]).reshape(len(rows), len(groups))
    extra = [rows[c].astype(float).to_numpy() for c in EXTRAS if _flag(rows, c).any()]
    return np.column_stack([onehot, *extra]) if extra else onehot


def fit_efficiency(rows: pd.DataFrame, shape: Shape = SHIPPED, fitted_on: str = "") -> tp.EfficiencyFit:
    """Least squares in log space on the implied efficiency of ``rows`` (comm-bound rows skipped); X0, K by grid."""
    rows = rows[rows["implied"].notna()]
    groups = _groups(rows, shape)
    design = _design(rows, groups, shape)
    log_implied = np.log(rows["implied"].to_numpy())
    x, q, a = rows["x"].to_numpy(), rows["q"].to_numpy(), rows["a"].to_numpy()
    fused_stack = _flag(rows, "kernels").to_numpy(dtype=bool)
    pinv = np.linalg.pinv(design)
    x0s = np.array(X0_GRID)
    best: tuple[float, float, float, float, float, float, np.ndarray] | None = None
    phis = PHI_GRID if shape.memory_term and fused_stack.any() else [1.0]
    for phi_x in phis:
        share_x = np.where(fused_stack, phi_x, 1.0)  # scales X0 (throughput.EfficiencyFit φ_X)
        micro = np.log(x[:, None] / (x[:, None] + np.outer(share_x, x0s)))  # rows × X0 grid
        # least-squares residuals are linear in the target: resid(t - micro_j) = resid(t) - resid(micro_j)
        micro_resid = micro - design @ (pinv @ micro)
        micro_norm = np.sum(micro_resid**2, axis=0)
        for phi in phis:
            share = np.where(fused_stack, phi, 1.0)  # scales K·R/w (throughput.EfficiencyFit φ)
            for k in K_GRID if shape.memory_term else [0.0]:
                for alpha in A_GRID if shape.attention_term else [0.0]:
                    terms = log_implied + np.log1p(k * q * share) + np.log1p(alpha * a)
                    resid = terms - design @ (pinv @ terms)
                    sse = resid @ resid - 2 * (resid @ micro_resid) + micro_norm
                    i = int(np.argmin(sse))
                    if best is None or sse[i] < best[0]:
                        best = (float(sse[i]), float(x0s[i]), k, alpha, phi, phi_x, pinv @ (terms - micro[:, i]))
    assert best is not None
    _, x0, k, alpha, phi, phi_x, coef = best
    values = {g: float(math.exp(c)) for g, c in zip(groups, coef[:len(groups)], strict=True)}
    extras = iter(coef[len(groups):])
    factor = {c: float(math.exp(next(extras))) if _flag(rows, c).any() else 1.0 for c in EXTRAS}
    counts = Counter(_keys(rows, shape))
    by_method = {}
    for method in METHODS:  # pooled (count-weighted geometric mean); a method with no rows: all groups' mean
        items = [(values[g], counts[g]) for g in groups if g[1] == BASE_METHOD[method]]
        pooled = [(e, n) for e, n in items] or [(e, 1) for e in values.values()]
        by_method[method] = math.exp(sum(n * math.log(e) for e, n in pooled) / sum(n for _, n in pooled))
    by_group = {(family, method): values[(family, BASE_METHOD[method])] for family, _ in groups for method in METHODS
                if shape.by_generation and (family, BASE_METHOD[method]) in values}
    return tp.EfficiencyFit(by_group, by_method, x0, factor["fused"], factor["moe"], len(rows), k, alpha, fitted_on,
                            factor["kernels"], factor["compiled"], phi, factor["fp8"], phi_x)


def predict(rows: pd.DataFrame, params: tp.EfficiencyFit) -> np.ndarray:
    """Whole-job tokens/s of each row with the given constants (the row's interconnect)."""
    recompute = rows["recompute"] if "recompute" in rows else pd.Series(math.nan, index=rows.index)
    groups = rows["zero_group"] if "zero_group" in rows else pd.Series(None, index=rows.index, dtype=object)
    spans = rows["span"] if "span" in rows else pd.Series(math.nan, index=rows.index)
    return np.array([
        tp.estimate_throughput(job, place, fit=params, inter_node_gbps=link, stack=stack,
                               recompute=_recompute(again), zero_group=_group(group),
                               span=_recompute(span)).tokens_per_second
        for job, place, link, stack, again, group, span in zip(
            rows["job"], rows["placement"], rows["link"], rows["stack"], recompute, groups, spans, strict=True)
    ])


def _group(value: object) -> int | None:
    return None if value is None or pd.isna(value) else int(float(str(value)))


def held_out_predictions(rows: pd.DataFrame, by: str, shape: Shape = SHIPPED) -> np.ndarray:
    """Leave one value of column ``by`` out: refit on the other rows, predict this value's rows."""
    out = np.full(len(rows), np.nan)
    for value in rows[by].unique():
        test = (rows[by] == value).to_numpy()
        params = fit_efficiency(rows[~test], shape)
        out[test] = predict(rows[test], params)
    return out


def _phi_x(params: tp.EfficiencyFit) -> float:
    return params.fused_memory_share if params.fused_microbatch_share is None else params.fused_microbatch_share


def fitted_block(params: tp.EfficiencyFit) -> str:
    """The FITTED assignment for autoconf/estimators/theory/throughput.py."""
    groups = ", ".join(f"{k!r}: {v:.4f}" for k, v in sorted(params.by_group.items()))
    methods = ", ".join(f"{k!r}: {v:.4f}" for k, v in params.by_method.items())
    return (
        "FITTED = EfficiencyFit(\n"
        f"    by_group={{{groups}}},\n"
        f"    by_method={{{methods}}},\n"
        f"    microbatch_tokens={params.microbatch_tokens:.1f}, fused_loss_factor={params.fused_loss_factor:.4f}, "
        f"moe_factor={params.moe_factor:.4f}, rows={params.rows},\n"
        f"    memory_bound={params.memory_bound:.4f}, attention_cost={params.attention_cost:.4f},\n"
        f"    stack_factor={params.stack_factor:.4f}, compile_factor={params.compile_factor:.4f}, "
        f"fused_memory_share={params.fused_memory_share:.2f}, fp8_factor={params.fp8_factor:.4f},\n"
        f"    fused_microbatch_share={_phi_x(params):.2f},\n"
        f"    fitted_on={params.fitted_on!r},\n)"
    )
