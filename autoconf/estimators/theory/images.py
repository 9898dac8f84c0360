"""Images of a vision-language model: tokens per image, the vision tower's activations, trainable parts.

Image tokens that enter the language model per image, per family (square images of side ``r`` pixels):

* LLaVA-1.5 (``llava``): the processor resizes to the tower's ``image_size`` S and the model drops the CLS
  token (vision_feature_select_strategy "default"): (S / patch)² = (336 / 14)² = 576 tokens.
* LLaVA-NeXT (``llava_next``): "anyres" picks the grid pinpoint that keeps most pixels and wastes least
  (transformers ``select_best_resolution``), tiles it into S×S crops, unpads the grid features back to the
  image's aspect ratio, adds one ``image_newline`` token per feature row, and prepends the base image's
  (S / patch)² tokens (``LlavaNextProcessor._get_number_of_features``). Pinpoints: the llava-v1.6
  default [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]], scaled to S.
* Qwen2-VL / Qwen2.5-VL: ``smart_resize`` rounds each side to a multiple of patch·merge (28) within
  [min_pixels, max_pixels] = [56², 28²·1280]; the tower sees (r' / 14)² patches and the merger emits
  (r' / 14)² / merge² tokens. These models have no fixed size: the default resolution is 448 px.
* Llama 3.2 Vision (``mllama``): the image is cut into up to max_num_tiles 448-px tiles, each (448/14)² + 1
  = 1025 tokens; the model runs (and cross-attends to) all max_num_tiles tiles, padded ones masked, so the
  memory counts tiles × 1025 = 4100 per image. They do NOT enter the text sequence.
* Gemma 3 (SigLIP): (896 / 14)² = 4096 patches, average-pooled to mm_tokens_per_image = 256 tokens.

Provenance: these rules are written from the transformers processor and model code as its author knew it;
they were not re-checked against a stored copy of that code in this release (docs/theory_families.md marks
them "derived, not re-verified"), and no VLM memory has been measured here yet.

Vision-tower activations per image (T_v tower tokens, width h_v, heads a_v, MLP width I_v, L_v layers):
with a trainable tower, each ViT layer saves what a LayerNorm + GeLU decoder layer saves (the traced
gpt_bigcode coefficient of activations.py, extended to the tower: 8h_v + 8h_v + 4a_v + 8 + 4I_v per token;
8I_v for Qwen2.5-VL's gated MLP). A frozen tower whose inputs need no gradient saves nothing for backward:
only its output features stay (2·h_v per token), plus, with a trainable projector, the projector's inputs
(2·h_v·merge² for its first linear, 4·h_text for the activation and the second linear) per image token.
"""

from __future__ import annotations

import math

from autoconf.catalog.architecture import Architecture
from autoconf.catalog.shapes import Vision
from autoconf.errors import InvalidInputError
from autoconf.estimators.theory.rows import AnyJob, Num, not_, per_value, where
from autoconf.schema import Job

NEXT_PINPOINTS = ((336, 672), (672, 336), (672, 672), (1008, 336), (336, 1008))  # llava-v1.6 image_grid_pinpoints
QWEN_MIN_PIXELS, QWEN_MAX_PIXELS = 56 * 56, 28 * 28 * 1280  # Qwen2VLImageProcessor defaults
QWEN_DEFAULT_RESOLUTION = 448


def images_error(arch: Architecture, images: int) -> InvalidInputError:
    """Images need a vision tower: the refusal of images_per_sample > 0 on a text-only model."""
    return InvalidInputError(
        "images_per_sample", f"must be 0 for the text-only model '{arch.name}'; images need a vision-language "
        f"model (llava, llava_next, qwen2_vl, qwen2_5_vl, mllama, gemma3); got {images}")


def check_images(job: Job, arch: Architecture) -> None:
    if job.images_per_sample and arch.vision is None:
        raise images_error(arch, job.images_per_sample)


def resolution(job: Job, vision: Vision) -> int:
    return job.image_resolution or vision.image_size or QWEN_DEFAULT_RESOLUTION


def _best_grid(r: int, size: int) -> tuple[int, int]:
    """select_best_resolution for an r×r image among the scaled pinpoints: (rows, columns) of tiles."""
    best, key = (size, size), (-1.0, 0.0)
    for ph, pw in ((h * size // 336, w * size // 336) for h, w in NEXT_PINPOINTS):
        scale = min(pw / r, ph / r)
        effective = min(int(r * scale) * int(r * scale), r * r)
        candidate = (float(effective), -float(ph * pw - effective))
        if candidate > key:
            best, key = (ph, pw), candidate
    return best[0] // size, best[1] // size


def _qwen_side(r: int, factor: int) -> int:
    """smart_resize of a square side: a multiple of ``factor`` within the processor's pixel bounds."""
    side = max(factor, round(r / factor) * factor)
    if side * side > QWEN_MAX_PIXELS:
        side = math.floor(r / math.sqrt(r * r / QWEN_MAX_PIXELS) / factor) * factor
    elif side * side < QWEN_MIN_PIXELS:
        side = math.ceil(r * math.sqrt(QWEN_MIN_PIXELS / (r * r)) / factor) * factor
    return side


def tokens_at(arch: Architecture, r: int) -> tuple[int, int]:
    """(tokens the tower processes, tokens the language model sees or cross-attends to) per image of side r."""
    v = arch.vision
    if v is None:
        return 0, 0
    n = v.patches_per_image
    if v.kind in ("qwen2_vl", "qwen2_5_vl"):
        patches = (_qwen_side(r, v.patch_size * v.spatial_merge_size) // v.patch_size) ** 2
        return patches, patches // v.spatial_merge_size**2
    if v.kind == "mllama":
        return v.max_tiles * (n + 1), v.max_tiles * (n + 1)
    if v.kind == "siglip":
        return n, n // v.spatial_merge_size**2
    if arch.model_type == "llava_next":
        rows, cols = _best_grid(r, v.image_size)
        side = int(math.isqrt(n))
        m = min(rows, cols) * side  # unpadded square feature grid
        return (1 + rows * cols) * (n + 1), m * m + m + n
    return n + 1, n


def tokens_per_image(job: Job, arch: Architecture) -> tuple[int, int]:
    """(tokens the tower processes, tokens the language model sees or cross-attends to) per image."""
    return (0, 0) if arch.vision is None else tokens_at(arch, resolution(job, arch.vision))


def image_tokens(job: AnyJob, arch: Architecture, which: int) -> Num:
    """tokens_per_image's entry ``which`` (0: tower, 1: language model), once per distinct image resolution."""
    v = arch.vision
    if v is None:
        return 0
    return per_value(job.image_resolution,
                     lambda r: tokens_at(arch, r or v.image_size or QWEN_DEFAULT_RESOLUTION)[which])


def text_tokens_per_sample(job: AnyJob, arch: Architecture) -> Num:
    """Language-model sequence: the text tokens plus the image tokens (mllama cross-attends instead)."""
    if arch.vision is None or arch.vision.kind == "mllama":
        return job.tokens_per_sample
    return where(job.images_per_sample > 0, job.tokens_per_sample + job.images_per_sample * image_tokens(job, arch, 1),
                 job.tokens_per_sample)


def cross_tokens_per_sample(job: AnyJob, arch: Architecture) -> Num:
    """Image tokens each mllama cross-attention layer attends to, per sample."""
    return job.images_per_sample * image_tokens(job, arch, 1) if arch.vision and arch.vision.kind == "mllama" else 0


def _mlp_width(v: Vision) -> tuple[int, bool]:
    widths = {lin.name: lin.out_features for lin in v.linears}
    return widths.get("fc1") or widths.get("up_proj") or 4 * v.hidden_size, "gate_proj" in widths


def activation_bytes_per_image(job: AnyJob, arch: Architecture) -> Num:
    """Saved bytes of one image's vision tower and projector (module docstring), bf16."""
    v = arch.vision
    if v is None:
        return 0.0
    tower, lm = image_tokens(job, arch, 0), image_tokens(job, arch, 1)
    h = v.hidden_size
    kept = 2.0 * h * tower  # the tower's output features
    inter, gated = _mlp_width(v)
    per_layer = 16 * h + 4 * v.num_heads + 8 + (8 if gated else 4) * inter
    kept = where(not_(job.freeze_vision), kept + v.num_layers * per_layer * tower, kept)
    merge = v.spatial_merge_size**2 if v.kind.startswith("qwen") else 1
    kept = where(not_(job.freeze_projector), kept + (2 * h * merge + 4 * arch.hidden_size) * lm, kept)
    return where(job.images_per_sample > 0, kept, 0.0)


def trainable_vision_params(job: AnyJob, arch: Architecture) -> Num:
    """Vision parameters that train: the tower unless freeze_vision, the projector unless freeze_projector."""
    v = arch.vision
    if v is None:
        return 0
    return where(job.freeze_vision, 0, v.tower_params) + where(job.freeze_projector, 0,
                                                               v.projector_params + v.extra_params)
