"""Convert IBM fms-acceleration benchmark tables into ``data/measurements.csv`` (one row per run).

Input: ``shared/data/external/fms-acceleration/fms_acceleration_benchmarks_all_versions.csv`` (every
git version of ``scripts/benchmarks/refs*/*.csv`` concatenated; see its SOURCE.md) and SOURCE.md for
the full commit hashes. Every value written is either copied from the row, converted (MiB -> bytes,
per-device -> whole-job tokens/s), derived from other measured values of the same row (tokens per
sample, gradient accumulation), or a documented benchmark setting; what was filled says so in
``notes``. Provenance of every setting: data/README.md.

    python data/convert_fms.py [--source DIR] [--output data/measurements.csv]
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np
import pandas as pd

from autoconf.catalog import canonical_name, get_gpu
from autoconf.errors import UnknownModelError

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = ROOT.parent / "shared" / "data" / "external" / "fms-acceleration"
DEFAULT_OUTPUT = ROOT / "data" / "measurements.csv"
COMBINED = "fms_acceleration_benchmarks_all_versions.csv"
MIB = 2**20

# The CSVs name the GPU only through their file name. A100: the variant (SXM4 vs PCIe) is not stated
# in the tables; benchmark.py's get_peak_mem_usage_by_device_id docstring gives "NVIDIA A100-SXM4-80GB"
# as the device name the bench reports (foundation-model-stack/fms-acceleration @0055a36), the only hint
# found, so SXM4 is used and gpu_variant_stated=0 marks it as inferred. Both variants have 80 GiB.
GPU_BY_LABEL = {
    "A100-80GB (variant not stated)": ("NVIDIA-A100-SXM4-80GB", 0),
    "L40 (file named l40_40gb)": ("NVIDIA-L40", 1),
}
# GPTQ checkpoints are 4-bit quantisations of these base models (same architecture; the model cards
# name the base). Nous-Hermes-Llama2-70B is a fine-tune of Llama-2-70B (same shapes).
GPTQ_BASE = {
    "TheBloke/Mistral-7B-v0.1-GPTQ": "mistralai/Mistral-7B-v0.1",
    "TheBloke/Mixtral-8x7B-Instruct-v0.1-GPTQ": "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "TheBloke/Llama-2-70B-GPTQ": "meta-llama/Llama-2-70b-hf",
    "TheBloke/Nous-Hermes-Llama2-70B-GPTQ": "meta-llama/Llama-2-70b-hf",
    "TechxGenus/Meta-Llama-3-8B-GPTQ": "meta-llama/Meta-Llama-3-8B",
}
METHOD = {"full": "full", "lora": "lora", "qlora-bnb4bit": "qlora", "gptq-lora": "qlora"}
DTYPE = {"bfloat16": "bf16", "float16": "fp16"}
# Campaigns run with packing=False (scenarios-orca.yaml, scenarios-moe.yaml, and the
# accelerated-moe-megablocks scenario of scenarios.yaml); all others use benchmark.py's defaults
# --packing_matrix [True] --max_seq_len_matrix [4096].
UNPACKED_CAMPAIGNS = ("refs_orca/", "refs/a100_80gb_moe", "refs/a100_80gb_mb")
BENCH_MAX_SEQ_LEN = 4096
OOM_FRACTION = 0.90  # no result + nvidia-smi peak >= 90 % of the board = out of memory (inferred)
POW2_TOLERANCE = 0.02  # HF rounds samples/s to 3 decimals: derived tokens/sample is within ~0.5 %
GA_TOLERANCE = 0.15  # samples/steps ratio scatter (multipack batches vary)


# The software each campaign ran: fms-acceleration pins it in scripts/benchmarks/refs*/requirements*.txt beside the
# reference tables. Per campaign (reference file, short commit): the requirements file of that table as it stood at
# that commit (``requirements_<suffix>.txt`` for ``a100_80gb_<suffix>.csv``, else the folder's ``requirements.txt``
# where the table's own file did not exist yet: the liger table of b898968, the MoE tables before 6fbf774, the orca
# pf table of 4224c66) and its pins, read with ``git show <commit>:scripts/benchmarks/<file>`` in the repository
# (HEAD 876e2ed). Campaigns before b92c99d (2024-07-12) have no requirements file: no version is written, except
# bitsandbytes' upper bound (UNPINNED_BITSANDBYTES).
REQUIREMENTS = {
    ("refs/a100_80gb", "b92c99d"):
        ("refs/requirements.txt", "transformers 4.39.3, torch 2.2.2, peft 0.11.1, accelerate 0.32.1, trl 0.9.6, bitsandbytes 0.43.1"),
    ("refs/a100_80gb", "b6c1455"):
        ("refs/requirements.txt", "transformers 4.43.3, torch 2.4.0, peft 0.12.0, accelerate 0.33.0, trl 0.9.6, bitsandbytes 0.43.2"),
    ("refs/a100_80gb", "4e81c64"):
        ("refs/requirements.txt", "transformers 4.44.2, torch 2.4.1, peft 0.12.0, accelerate 0.33.0, trl 0.10.1, bitsandbytes 0.43.3"),
    ("refs/a100_80gb", "6e7b7b8"):
        ("refs/requirements.txt", "transformers 4.45.2, torch 2.4.1, peft 0.13.2, accelerate 0.34.2, trl 0.11.3, bitsandbytes 0.43.3"),
    ("refs/a100_80gb", "61078ab"):
        ("refs/requirements.txt", "transformers 4.45.2, torch 2.4.1, peft 0.13.2, accelerate 1.0.1, trl 0.11.4, bitsandbytes 0.43.3"),
    ("refs/a100_80gb", "24bdadb"):
        ("refs/requirements.txt", "transformers 4.48.1, torch 2.4.1, peft 0.13.2, accelerate 1.0.1, trl 0.13.0, bitsandbytes 0.43.3"),
    ("refs/a100_80gb_granite", "426a4a5"):
        ("refs/requirements_granite.txt",
         "transformers 4.45.0, torch 2.4.1, peft 0.12.0, accelerate git 4305033, trl git 9af4734, bitsandbytes 0.43.3"),
    ("refs/a100_80gb_granite", "5a24f02"):
        ("refs/requirements_granite.txt",
         "transformers 4.45.2, torch 2.4.1, peft 0.12.0, accelerate 0.34.2, trl git 9b80f3d, bitsandbytes 0.43.3"),
    ("refs/a100_80gb_liger", "b898968"):
        ("refs/requirements.txt", "transformers 4.44.2, torch 2.4.1, peft 0.12.0, accelerate 0.33.0, trl 0.10.1, bitsandbytes 0.43.3"),
    ("refs/a100_80gb_liger", "12ebdb9"):
        ("refs/requirements_liger.txt",
         "transformers 4.45.2, torch 2.4.1, peft 0.13.2, accelerate 1.0.1, trl 0.11.4, bitsandbytes 0.43.3"),
    ("refs/a100_80gb_liger", "a02a0a0"):
        ("refs/requirements_liger.txt",
         "transformers 4.45.2, torch 2.4.1, peft 0.13.2, accelerate 1.0.1, trl 0.11.4, bitsandbytes 0.43.3"),
    ("refs/a100_80gb_mb", "0c6631a"):
        ("refs/requirements_mb.txt",
         "transformers 4.44.2, torch 2.3.1, peft 0.12.0, accelerate 0.33.0, trl 0.9.6, bitsandbytes 0.43.3"),
    ("refs/a100_80gb_moe", "4e9bfa0"):
        ("refs/requirements.txt", "transformers 4.45.2, torch 2.4.1, peft 0.13.2, accelerate 0.34.2, trl 0.11.3, bitsandbytes 0.43.3"),
    ("refs/a100_80gb_moe", "6d1e646"):
        ("refs/requirements.txt", "transformers 4.45.2, torch 2.4.1, peft 0.13.2, accelerate 0.34.2, trl 0.11.3, bitsandbytes 0.43.3"),
    ("refs/a100_80gb_moe", "ef9a58f"):
        ("refs/requirements.txt", "transformers 4.45.2, torch 2.4.1, peft 0.13.2, accelerate 0.34.2, trl 0.11.3, bitsandbytes 0.43.3"),
    ("refs/a100_80gb_moe", "6fbf774"):
        ("refs/requirements_moe.txt",
         "transformers 4.45.2, torch 2.4.1, peft 0.13.2, accelerate 1.0.1, trl 0.11.4, bitsandbytes 0.43.3"),
    ("refs/a100_80gb_moe", "225b6a0"):
        ("refs/requirements_moe.txt",
         "transformers 4.45.2, torch 2.4.1, peft 0.13.2, accelerate 1.0.1, trl 0.11.4, bitsandbytes 0.43.3"),
    ("refs/a100_80gb_moe", "b890141"):
        ("refs/requirements_moe.txt",
         "transformers 4.45.2, torch 2.4.1, peft 0.13.2, accelerate 1.0.1, trl 0.11.4, bitsandbytes 0.43.3"),
    ("refs/a100_80gb_moe", "bb3c88e"):
        ("refs/requirements_moe.txt",
         "transformers 4.49.0, torch 2.4.1, peft 0.13.2, accelerate 1.0.1, trl 0.14.0, bitsandbytes 0.43.3"),
    ("refs/a100_80gb_update_cross_entropy_and_deps", "bfdef09"):
        ("refs/requirements_update_cross_entropy_and_deps.txt",
         "transformers 4.48.1, torch 2.4.1, peft 0.13.2, accelerate 1.0.1, trl 0.13.0, bitsandbytes 0.43.3"),
    ("refs_orca/a100_80gb_mp", "4224c66"):
        ("refs_orca/requirements.txt",
         "transformers 4.44.0, torch 2.4.0, peft 0.12.0, accelerate 0.33.0, trl 0.9.6, bitsandbytes 0.43.3"),
    ("refs_orca/a100_80gb_pf", "4224c66"):
        ("refs_orca/requirements.txt",
         "transformers 4.44.0, torch 2.4.0, peft 0.12.0, accelerate 0.33.0, trl 0.9.6, bitsandbytes 0.43.3"),
    ("refs_orca/a100_80gb_pf", "6028250"):
        ("refs_orca/requirements_pf.txt",
         "transformers 4.44.2, torch 2.4.0, peft 0.12.0, accelerate 0.33.0, trl 0.10.1, bitsandbytes 0.43.3"),
    ("refs_orca/a100_80gb_pf", "2efe092"):
        ("refs_orca/requirements_pf.txt",
         "transformers 4.44.2, torch 2.4.0, peft 0.12.0, accelerate 0.33.0, trl 0.10.1, bitsandbytes 0.43.3"),
}


# bitsandbytes of a campaign that pins nothing, from its commit date alone: 0.43.2 was released on 2024-07-23 (tag
# 0.43.2 in bitsandbytes-foundation/bitsandbytes; its fix #1270 merged 2024-07-16), so a table committed before
# then ran 0.43.1 or earlier. Every unpinned campaign (2024-05-10 … 2024-06-07) qualifies; the exact release is
# not stated, only the bound.
BITSANDBYTES_0432 = "2024-07-23"
UNPINNED_BITSANDBYTES = "bitsandbytes <=0.43.1 (committed {date}, before bitsandbytes 0.43.2 was released on 2024-07-23)"


def software(campaign: pd.Series, short: pd.Series, date: pd.Series) -> pd.Series:
    """``framework_version``: the campaign's pinned versions and the file that pins them; where nothing is pinned,
    bitsandbytes' bound by the commit date ('' after 0.43.2's release)."""
    def one(name: str, commit: str, day: str) -> str:
        found = REQUIREMENTS.get((name, commit))
        if found:
            return f"{found[1]} (scripts/benchmarks/{found[0]}@{commit})"
        return UNPINNED_BITSANDBYTES.format(date=day) if day < BITSANDBYTES_0432 else ""
    return pd.Series([one(n, c, d) for n, c, d in zip(campaign, short, date, strict=True)], index=campaign.index,
                     dtype=object)


def read_commits(source_md: Path) -> dict[str, str]:
    """Short -> full commit hashes from the table in SOURCE.md."""
    pairs = re.findall(r"^\|\s*([0-9a-f]{7})\s*\|\s*([0-9a-f]{40})\s*\|", source_md.read_text(), re.M)
    return dict(pairs)


def campaign_of(file_name: str) -> tuple[str, str, str]:
    """``refs__a100_80gb__2024-05-13__6cb91e5.csv`` -> (``refs/a100_80gb``, date, short commit)."""
    folder, stem, date, short = file_name.removesuffix(".csv").split("__")
    return f"{folder}/{stem}", date, short


def model_names(hf_ids: pd.Series) -> pd.Series:
    """HF id -> catalogue name ('' when the model is not catalogued)."""
    def one(hf_id: object) -> str:
        if not isinstance(hf_id, str):
            return ""
        try:
            return canonical_name(GPTQ_BASE.get(hf_id, hf_id))
        except UnknownModelError:
            return ""
    return hf_ids.map(one)


def nearest_pow2(values: pd.Series) -> pd.Series:
    """Round to a power of two when within POW2_TOLERANCE, else to the nearest integer."""
    pow2 = np.exp2(np.round(np.log2(values.where(values > 0))))
    close = (values - pow2).abs() <= POW2_TOLERANCE * pow2
    return pd.Series(np.where(close, pow2, np.round(values)), index=values.index)


def derive_accumulation(df: pd.DataFrame, notes: pd.Series) -> pd.Series:
    """Gradient accumulation: the column, else samples per step / (per-device batch x GPUs)."""
    ratio = df.train_samples_per_second / df.train_steps_per_second
    ratio = ratio / (df.per_device_train_batch_size * df.num_gpus)
    rounded = ratio.round()
    ok = (rounded >= 1) & ((ratio - rounded).abs() <= GA_TOLERANCE * rounded)
    ga = df.gradient_accumulation_steps.copy()
    use = ga.isna() & ok
    ga[use] = rounded[use]
    notes[use] += "gradient_accumulation_steps derived from samples/steps per second;"
    # Unpacked campaigns set it per scenario; the others take defaults.yaml's gradient_accumulation_steps: 1.
    default = ga.isna() & ~df.campaign.str.startswith(UNPACKED_CAMPAIGNS)
    ga[default] = 1
    notes[default] += "gradient_accumulation_steps=1 from the bench defaults.yaml;"
    return ga


def derive_tokens(df: pd.DataFrame, notes: pd.Series) -> tuple[pd.Series, pd.Series]:
    """Tokens per sample and the variable-length flag.

    HF's train_tokens_per_second counts one device's tokens while train_samples_per_second counts the
    whole job's samples, so tokens/sample = tokens/s x GPUs / samples/s (= 4096 for packed runs).
    """
    unpacked = df.campaign.str.startswith(UNPACKED_CAMPAIGNS)
    padding_free = df.framework_config.fillna("").str.contains("padding-free|multipack")
    variable = unpacked | padding_free
    raw = df.train_tokens_per_second * df.num_gpus / df.train_samples_per_second
    tokens = nearest_pow2(raw).where(~variable, raw.round())
    key = [df.source_file, df.model_name_or_path.fillna(""), df.framework_config.fillna("")]
    fill = tokens.groupby(key).transform("median").round()
    missing = tokens.isna() & fill.notna()
    tokens[missing] = fill[missing]
    notes[missing] += "tokens_per_sample from completed runs of the same campaign/model/config;"
    default = tokens.isna() & ~variable
    tokens[default] = BENCH_MAX_SEQ_LEN
    notes[default] += "tokens_per_sample = bench default max_seq_len 4096 (packing);"
    notes[variable] += "variable-length samples: tokens_per_sample is the measured mean;"
    return tokens, variable.astype(int)


def memory_columns(df: pd.DataFrame, capacity_mib: pd.Series) -> pd.DataFrame:
    """Torch and nvidia-smi peaks in bytes (0 written by the bench for a missing probe = empty)."""
    torch_peak = df.mem_peak_torch_mem_alloc_in_bytes.where(df.mem_peak_torch_mem_alloc_in_bytes > 0)
    torch_static = df.mem_torch_mem_alloc_in_bytes.where(df.mem_torch_mem_alloc_in_bytes > 0)
    nvidia = df.mem_nvidia_mem_reserved.where(df.mem_nvidia_mem_reserved > 0) * MIB
    completed = df.train_tokens_per_second.notna()
    oom = ~completed & (df.mem_nvidia_mem_reserved >= OOM_FRACTION * capacity_mib)
    return pd.DataFrame({
        "status": np.select([completed, oom], ["ok", "oom"], "failed"),
        "peak_memory_bytes": torch_peak.fillna(nvidia),
        "memory_metric": np.where(torch_peak.notna(), "torch_allocated",
                                  np.where(nvidia.notna(), "nvidia_smi", "")),
        "torch_allocated_bytes": torch_peak,
        "torch_allocated_static_bytes": torch_static,
        "nvidia_smi_bytes": nvidia,
    }, index=df.index)


def loss_kernel(configs: pd.Series) -> pd.Series:
    """Which loss kernel a framework_config enables (sample-configurations/*.yaml).

    Only Liger's fused linear cross-entropy avoids the b·s·V logits (``fused_loss`` = 1); FOAK's
    fast_loss swaps torch.nn.CrossEntropyLoss for a Triton kernel applied to the materialised logits
    (fused-ops-and-kernels models/llama.py "llama-cross-ent" rule), so ``fused_loss`` stays 0 there.
    """
    liger = configs.str.contains("liger")  # fused_linear_loss: true, fast_loss: false
    foak = configs.str.contains("foak")  # fast_loss: true
    return pd.Series(np.select([liger, foak], ["liger-flce", "foak-fast-loss"], ""), index=configs.index)


def double_quant(configs: pd.Series) -> pd.Series:
    """1 where the 4-bit model was loaded by the accelerated-peft bitsandbytes plugin, else empty (not stated).

    ``accelerated-peft-bnb*`` and ``baseline-peft-bnb`` (whose sample configuration also loads through the plugin,
    with ``no_peft_model: True``; sample-configurations/CONTENTS.yaml) get their model from
    ``BNBAccelerationPlugin.model_loader``, which builds ``BitsAndBytesConfig(..., bnb_4bit_use_double_quant=True)``
    (plugins/accelerated-peft/src/fms_acceleration_peft/framework_plugin_bnb.py). GPTQ checkpoints
    (``accelerated-peft-autogptq*``) have no such setting.
    """
    bnb = configs.str.contains("peft-bnb")
    return pd.Series(np.where(bnb, 1, np.nan), index=configs.index)


def stack(configs: pd.Series) -> pd.Series:
    """The training stack whose behaviour a row measures (frameworks.PROFILES).

    ``baseline-peft-bnb`` runs load no fms-acceleration plugin: fms-hf-tuning hands the 4-bit model to TRL's
    SFTTrainer, which prepares it with peft's ``prepare_model_for_kbit_training`` (fp32 embeddings, norms and
    head; bitsandbytes' MatMul4Bit keeping its input) — the ``peft`` profile. The accelerated-peft plugins
    replace that preparation with their own (fms-acceleration framework_plugin_bnb.py), the fms-hf-tuning profile.
    """
    return pd.Series(np.where(configs == "baseline-peft-bnb", "peft", "fms-hf-tuning"), index=configs.index)


def duplicates(out: pd.DataFrame) -> pd.Series:
    """source_ref of the first identical row (same settings and same measured numbers) in an earlier file."""
    cols = ["model_hf_id", "kernels", "method", "number_gpus", "per_device_batch_size",
            "gradient_accumulation_steps", "torch_allocated_bytes", "nvidia_smi_bytes",
            "tokens_per_second_per_device", "train_runtime_s", "train_samples_per_second"]
    key = out[cols].astype(str).agg("|".join, axis=1)
    measured = out[["torch_allocated_bytes", "nvidia_smi_bytes", "tokens_per_second_per_device"]].notna().any(axis=1)
    by_date = out.campaign.str.split("@").str[1].sort_values(kind="stable").index  # earliest file first
    first = out.source_ref.loc[by_date].groupby(key.loc[by_date]).transform("first").reindex(out.index)
    return first.where(measured & (first != out.source_ref), "")


def convert(source_dir: Path = DEFAULT_SOURCE) -> pd.DataFrame:
    """The measurement table (design §7 columns plus provenance and derivation notes)."""
    df = pd.read_csv(source_dir / COMBINED)
    commits = read_commits(source_dir / "SOURCE.md")
    parts = df.source_file.map(campaign_of)
    df["campaign"] = parts.str[0]
    row = df.groupby("source_file").cumcount()
    notes = pd.Series("", index=df.index, dtype=object)
    gpu = df.gpu.map(lambda label: GPU_BY_LABEL[label][0])
    capacity_mib = gpu.map(lambda name: get_gpu(name).memory_bytes / MIB)
    ga = derive_accumulation(df, notes)
    tokens, variable = derive_tokens(df, notes)
    configs = df.framework_config.fillna("")
    ngpu = df.num_gpus
    out = pd.DataFrame({
        "source": "fms-acceleration",
        "source_ref": "raw/" + df.source_file + "@" + parts.str[2].map(commits) + "#row=" + row.astype(str),
        "campaign": df.campaign + "@" + parts.str[1] + ":" + parts.str[2],
        "in_repo_head": df.in_repo_head,
        "framework": stack(configs),
        "gpu_model": gpu,
        "gpu_variant_stated": df.gpu.map(lambda label: GPU_BY_LABEL[label][1]),
        "number_gpus": ngpu,
        "number_nodes": 1,
        "model_name": model_names(df.model_name_or_path),
        "model_hf_id": df.model_name_or_path.fillna(""),
        "method": df.method.map(METHOD),
        "tokens_per_sample": tokens,
        "variable_length": variable,
        "batch_size": df.per_device_train_batch_size * ngpu * ga,
        "per_device_batch_size": df.per_device_train_batch_size,
        "gradient_accumulation_steps": ga,
        "dtype": df.torch_dtype.map(DTYPE).fillna(""),
        "amp": np.select([df.fp16.eq(True), df.bf16.eq(True)], ["fp16", "bf16"], ""),
        "strategy": np.select([ngpu > 1, ngpu == 1], ["fsdp", "ddp"], ""),
        "gradient_checkpointing": 1,  # defaults.yaml: gradient_checkpointing: True
        "attention": "flash",  # defaults.yaml: use_flash_attn: True
        "fused_loss": configs.str.contains("liger").astype(int),
        "loss_kernel": loss_kernel(configs),
        "packing": (~df.campaign.str.startswith(UNPACKED_CAMPAIGNS)
                    | configs.str.contains("padding-free|multipack")).astype(int),
        "kernels": configs,
        "lora_r": df.r,
        "lora_alpha": df.lora_alpha,
        "lora_target_modules": df.target_modules.where(df.method != "full").fillna("").str.replace(" ", ","),
        "double_quant": double_quant(configs),
    })
    out = out.join(memory_columns(df, capacity_mib))
    out["tokens_per_second"] = df.train_tokens_per_second * ngpu
    out["tokens_per_second_per_device"] = df.train_tokens_per_second
    out["train_samples_per_second"] = df.train_samples_per_second
    out["train_runtime_s"] = df.train_runtime
    out["duplicate_of"] = duplicates(out)
    out["framework_version"] = software(df.campaign, parts.str[2], parts.str[1])
    out["notes"] = notes.str.rstrip(";")
    return _typed(out)


def _typed(out: pd.DataFrame) -> pd.DataFrame:
    ints = ["number_gpus", "tokens_per_sample", "batch_size", "per_device_batch_size",
            "gradient_accumulation_steps", "lora_r", "peak_memory_bytes", "torch_allocated_bytes",
            "torch_allocated_static_bytes", "nvidia_smi_bytes", "double_quant"]
    for col in ints:
        out[col] = out[col].round().astype("Int64")
    out["lora_alpha"] = out["lora_alpha"].astype("Float64")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="fms-acceleration folder")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="CSV to write")
    args = parser.parse_args(argv)
    table = convert(args.source)
    table.to_csv(args.output, index=False)
    counts = table.status.value_counts().to_dict()
    print(f"wrote {len(table)} rows to {args.output}: {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
