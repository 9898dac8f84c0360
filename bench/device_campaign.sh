#!/usr/bin/env bash
# The GPU lease's one call (docs/probe.md): the machine's facts, then the in-process campaign; every file
# under $OUT, each row appended as its point ends, so a time-out keeps what was measured.
#   run: bash bench/device_campaign.sh   (carry .whl: pydantic, bitsandbytes, liger-kernel unpacked in .whl/site)
set -u
OUT=${OUT:-/tmp/campaign-out}; mkdir -p "$OUT"
export PYTHONPATH="$PWD/.whl/site:$PWD" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
BUDGET=${BUDGET:-450}  # seconds of points; the call's limit must leave ~60 s for imports and the last point
{
  date -u; nvidia-smi; python3 --version
  python3 -c "import torch, transformers, peft, accelerate; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__, 'peft', peft.__version__, 'accelerate', accelerate.__version__)"
  python3 -c "import bitsandbytes; print('bitsandbytes', bitsandbytes.__version__)"
  python3 -c "import liger_kernel.transformers as l; print('liger_kernel ok')"
  python3 -c "import flash_attn; print('flash_attn', flash_attn.__version__)"
  python3 -c "import pynvml; print('pynvml ok')"
} > "$OUT/env.txt" 2>&1
python3 -m autoconf.interfaces.cli measure --grid "${GRID:-examples/grid_h100_campaign.yaml}" \
  --out "$OUT/probe_rows.csv" --in-process --budget-s "$BUDGET" 2>&1 | tee "$OUT/log.txt"
