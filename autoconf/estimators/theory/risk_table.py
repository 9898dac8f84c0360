"""Theory's oom_risk spread per training method. Generated: do not edit; regenerate with
``python bench/theory_risk.py --write`` (autoconf/evaluation/risk.py says how).

SIGMA[method] = 1.4826 · MAD of log(measured / predicted) peak over leave-one-source-out theory estimates of
1684 scored ok-row metrics (torch_allocated, nvidia_smi; peak batch length known) of data/measurements.csv, sources: fms-acceleration;
``*`` = all methods; a method with fewer than 100 residuals uses ``*``.
"""

# method: (sigma of log residual, residual rows it was fitted on)
SIGMA: dict[str, tuple[float, int]] = {
    "*": (0.0616, 1684),
    "full": (0.0309, 268),
    "lora": (0.0407, 258),
    "qlora": (0.0697, 1158),
}
