"""DeepSpeed ZeRO model-state memory per GPU and per CPU, for every offload option.

Our own implementation of the closed forms that DeepSpeed 0.19's ``estimate_zero2/3_model_states_mem_needs``
print (shared/theory_notes.md, "DeepSpeed ZeRO model-state estimators"; reproduced there by running DeepSpeed
on CPU). Ψ = total parameters, G = nodes·gpus_per_node, g = gpus_per_node, n = nodes, B = buffer factor:

ZeRO-2 (ZeRO-1 shares the estimate: DeepSpeed has no separate stage-1 estimator)
    offload optimizer: GPU 2Ψ,             CPU Ψ·max(4G, 16)·B
    no offload:        GPU 2Ψ + 18Ψ/G,     CPU 4Ψ·g·B
ZeRO-3 (LL = 4·Ψ_LL bytes: the gathered fp16 largest layer and its gradient)
    offload params + optimizer: GPU LL,          CPU 18Ψ/n·B  (zero_init=1) | Ψ·max(4g, 18/n)·B (0)
    offload optimizer:          GPU LL + 2Ψ/G,   CPU 16Ψ/n·B  (zero_init=1) | Ψ·max(4g, 16/n)·B (0)
    no offload:                 GPU LL + 18Ψ/G,  CPU 4Ψ_LL·g·B (zero_init=1) | 4Ψ·g·B (0)

The 18 B/param are 2 (fp16 grads) + 4 (fp32 grads) + 4 (fp32 master) + 8 (Adam m, v). B multiplies only
the CPU figures. DeepSpeed prints "GB" but divides by 2**30, so its numbers are GiB. These are model states
only: activations, buckets and fragmentation are not included (DeepSpeed issues #4527, #4093).
"""

from __future__ import annotations

from dataclasses import dataclass

from autoconf.defaults import GPUS_PER_NODE
from autoconf.errors import InvalidInputError

GIB = 2**30
DEFAULT_BUFFER_FACTOR = 1.5  # DeepSpeed's additional_buffer_factor default (CPU figures only)


@dataclass(frozen=True)
class ZeroRow:
    """One line of the table: memory for one combination of offload options."""

    stage: int
    offload_optimizer: bool
    offload_params: bool
    zero_init: bool | None  # ZeRO-3 only: parameters partitioned at construction (zero.Init)
    per_gpu_bytes: float
    per_cpu_bytes: float

    @property
    def per_gpu_gib(self) -> float:
        return self.per_gpu_bytes / GIB

    @property
    def per_cpu_gib(self) -> float:
        return self.per_cpu_bytes / GIB

    @property
    def options(self) -> str:
        opt = "cpu" if self.offload_optimizer else "none"
        if self.stage < 3:
            return f"offload_optimizer={opt}"
        par = "cpu" if self.offload_params else "none"
        return f"offload_param={par}, offload_optimizer={opt}, zero_init={int(bool(self.zero_init))}"


def _check(total_params: float, nodes: int, gpus_per_node: int, buffer_factor: float) -> None:
    if total_params <= 0:
        raise InvalidInputError("params", f"must be > 0; got {total_params}")
    if nodes < 1:
        raise InvalidInputError("nodes", f"must be >= 1; got {nodes}")
    if gpus_per_node < 1:
        raise InvalidInputError("gpus_per_node", f"must be >= 1; got {gpus_per_node}")
    if buffer_factor < 1:
        raise InvalidInputError("buffer_factor", f"must be >= 1; got {buffer_factor}")


def zero2_rows(
    total_params: float, nodes: int = 1, gpus_per_node: int = GPUS_PER_NODE, buffer_factor: float = DEFAULT_BUFFER_FACTOR
) -> list[ZeroRow]:
    """ZeRO-1/2 model states: optimizer offloaded to CPU, then no offload."""
    _check(total_params, nodes, gpus_per_node, buffer_factor)
    psi, total_gpus = float(total_params), nodes * gpus_per_node
    offload_cpu = psi * max(4 * total_gpus, 16) * buffer_factor
    # no offload: each local process loads an fp32 copy (4Ψ) on the host before partitioning
    load_cpu = 4 * psi * gpus_per_node * buffer_factor
    return [
        ZeroRow(2, True, False, None, 2 * psi, offload_cpu),
        ZeroRow(2, False, False, None, 2 * psi + 18 * psi / total_gpus, load_cpu),
    ]


def zero3_rows(
    total_params: float,
    largest_layer_params: float,
    nodes: int = 1,
    gpus_per_node: int = GPUS_PER_NODE,
    buffer_factor: float = DEFAULT_BUFFER_FACTOR,
) -> list[ZeroRow]:
    """ZeRO-3 model states for the three offload options, each with zero_init 1 and 0."""
    _check(total_params, nodes, gpus_per_node, buffer_factor)
    if not 0 < largest_layer_params <= total_params:
        raise InvalidInputError(
            "largest_layer_params", f"must be > 0 and <= the total parameters; got {largest_layer_params}"
        )
    psi, psi_ll = float(total_params), float(largest_layer_params)
    g, n, total_gpus, b = gpus_per_node, nodes, nodes * gpus_per_node, buffer_factor
    ll = 4 * psi_ll  # fp16 params + fp16 grads of the gathered largest layer
    rows = []
    for off_p, off_o, gpu, cpu_init, per_node_b in (
        (True, True, ll, 18 * psi / n * b, 18),
        (False, True, ll + 2 * psi / total_gpus, 16 * psi / n * b, 16),
        (False, False, ll + 18 * psi / total_gpus, 4 * psi_ll * g * b, None),
    ):
        cpu_no_init = psi * max(4 * g, per_node_b / n) * b if per_node_b else 4 * psi * g * b
        rows.append(ZeroRow(3, off_o, off_p, True, gpu, cpu_init))
        rows.append(ZeroRow(3, off_o, off_p, False, gpu, cpu_no_init))
    return rows


def zero_table(
    stage: int,
    total_params: float,
    largest_layer_params: float | None = None,
    nodes: int = 1,
    gpus_per_node: int = GPUS_PER_NODE,
    buffer_factor: float = DEFAULT_BUFFER_FACTOR,
) -> list[ZeroRow]:
    """Rows for ZeRO stage 1 or 2 (one shared estimate) or 3 (needs the largest layer)."""
    if stage in (1, 2):
        return zero2_rows(total_params, nodes, gpus_per_node, buffer_factor)
    if stage == 3:
        if largest_layer_params is None:
            raise InvalidInputError("largest_layer_params", "must be given for ZeRO-3; got None")
        return zero3_rows(total_params, largest_layer_params, nodes, gpus_per_node, buffer_factor)
    raise InvalidInputError("stage", f"must be 1, 2 or 3; got {stage}")


def format_table(
    rows: list[ZeroRow],
    total_params: float,
    nodes: int,
    gpus_per_node: int,
    largest_layer_params: float | None = None,
) -> str:
    """Text table in the layout of DeepSpeed's estimator (its "GB" are GiB, so we say GiB)."""
    model = f"SW: Model with {int(total_params / 1e6)}M total params"
    if rows and rows[0].stage == 3 and largest_layer_params is not None:
        model += f", {int(largest_layer_params / 1e6)}M largest layer params"
    lines = [
        "Estimated memory needed for params, optim states and gradients for a:",
        f"HW: Setup with {nodes} node{'s' if nodes > 1 else ''}, "
        f"{gpus_per_node} GPU{'s' if gpus_per_node > 1 else ''} per node.",
        model + ".",
        f"{'per CPU':>13} | {'per GPU':>10} | Options",
    ]
    for row in rows:
        lines.append(f"{row.per_cpu_gib:10.2f}GiB | {row.per_gpu_gib:7.2f}GiB | {row.options}")
    return "\n".join(lines)
