"""A numpy copy of a trained LightGBM booster: predictions without importing AutoGluon or LightGBM.

``import autogluon.tabular`` alone costs ~1.6 s of CPU, more than the whole 3,960-point sweep may
take. Each predictor of a version is therefore also stored as flat arrays (``<name>.npz``, no pickle:
loaded with ``allow_pickle=False``) holding every tree of the LightGBM model AutoGluon trained. The
build checks that these arrays reproduce ``TabularPredictor.predict`` / ``predict_proba`` on every
training row and on the sweep space (max abs difference recorded in card.json), so the fast path is
the same model, not an approximation. Decision rule per node, as LightGBM's NumericalDecision:
a missing value (NaN, or zero when the node's missing type is "Zero") goes the node's default
direction, otherwise ``x <= threshold`` goes left.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MISSING_TYPES = {"None": 0, "Zero": 1, "NaN": 2}
ZERO_THRESHOLD = 1e-35  # LightGBM's kZeroThreshold: |x| below it counts as zero
# From this many rows on, identical rows are evaluated once: a sweep repeats each memory row once per
# GPU model (memory features do not depend on the board); below it np.unique costs more than it saves.
DEDUPE_MIN_ROWS = 256


@dataclass(frozen=True)
class Forest:
    """All trees of one booster as flat node arrays; a leaf has feature = -1."""

    features: tuple[str, ...]
    feature: np.ndarray  # int32 [nodes]
    threshold: np.ndarray  # float64 [nodes]
    left: np.ndarray  # int32 [nodes]; a leaf points to itself
    right: np.ndarray  # int32 [nodes]
    default_left: np.ndarray  # bool [nodes]
    missing: np.ndarray  # int8 [nodes] (MISSING_TYPES)
    value: np.ndarray  # float64 [nodes] (leaf output; 0 on internal nodes)
    roots: np.ndarray  # int32 [trees]
    depth: int
    link: str  # "identity" (regression) or "sigmoid" (binary probability)

    def raw(self, x: np.ndarray) -> np.ndarray:
        """Sum of leaf values over trees for every row of ``x`` (rows × features, feature order)."""
        n = x.shape[0]
        if n == 0:
            return np.zeros(0)
        x = np.asarray(x, dtype=np.float64)
        if not (self.missing != 0).any():
            return self._raw_plain(np.nan_to_num(x, nan=0.0))
        return self._raw_missing(x)

    def _raw_plain(self, x: np.ndarray) -> np.ndarray:
        """No node treats missing values specially (every split trained without NaN): NaN reads as 0.0."""
        flat = np.ascontiguousarray(x).ravel()
        base = (np.arange(x.shape[0], dtype=np.int64) * x.shape[1])[:, None]
        feature = np.where(self.feature >= 0, self.feature, 0)  # a leaf loops to itself whatever it reads
        node = np.tile(self.roots, (x.shape[0], 1))
        for _ in range(self.depth):
            go_left = flat[base + feature[node]] <= self.threshold[node]
            node = np.where(go_left, self.left[node], self.right[node])
        raw: np.ndarray = self.value[node].sum(axis=1)
        return raw

    def _raw_missing(self, x: np.ndarray) -> np.ndarray:
        """LightGBM's NumericalDecision with its missing-value rules, node by node."""
        flat = np.ascontiguousarray(x).ravel()
        base = (np.arange(x.shape[0], dtype=np.int64) * x.shape[1])[:, None]
        node = np.tile(self.roots, (x.shape[0], 1))
        for _ in range(self.depth):
            val = flat[base + np.where(self.feature[node] >= 0, self.feature[node], 0)]
            miss, nan = self.missing[node], np.isnan(val)
            val = np.where(nan & (miss != 2), 0.0, val)
            is_missing = ((miss == 1) & (np.abs(val) <= ZERO_THRESHOLD)) | ((miss == 2) & nan)
            go_left = np.where(is_missing, self.default_left[node], val <= self.threshold[node])
            node = np.where(go_left, self.left[node], self.right[node])
        raw: np.ndarray = self.value[node].sum(axis=1)
        return raw

    def bind(self, names: tuple[str, ...]) -> Forest:
        """The same trees reading a wider matrix whose columns are ``names`` (a superset of features)."""
        where = {n: k for k, n in enumerate(names)}
        remap = np.array([where[f] for f in self.features], dtype=np.int32)
        feature = np.where(self.feature >= 0, remap[np.maximum(self.feature, 0)], -1).astype(np.int32)
        return Forest(features=tuple(names), feature=feature, threshold=self.threshold, left=self.left,
                      right=self.right,
                      default_left=self.default_left, missing=self.missing, value=self.value, roots=self.roots,
                      depth=self.depth, link=self.link)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Predictions per row; rows equal on every feature the trees read are computed once."""
        x = np.asarray(x, dtype=np.float64)
        used = np.unique(self.feature[self.feature >= 0])  # ~1 µs per 1,000 nodes
        if len(x) >= DEDUPE_MIN_ROWS and len(used):  # (a forest without a split reads nothing: no keys)
            keys = np.ascontiguousarray(x[:, used]).view(np.dtype((np.void, 8 * len(used)))).ravel()
            _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
            if len(first) < len(x):
                return self._link(self.raw(x[first]))[inverse.ravel()]
        return self._link(self.raw(x))

    def _link(self, raw: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-raw)) if self.link == "sigmoid" else raw

    def save(self, path: Path) -> None:
        np.savez_compressed(
            path, features=np.array(self.features), feature=self.feature, threshold=self.threshold, left=self.left,
            right=self.right, default_left=self.default_left, missing=self.missing, value=self.value,
            roots=self.roots, depth=np.array(self.depth), link=np.array(self.link),
        )

    @classmethod
    def load(cls, path: Path) -> Forest:
        with np.load(path, allow_pickle=False) as z:
            return cls(
                features=tuple(str(f) for f in z["features"]), feature=z["feature"], threshold=z["threshold"],
                left=z["left"], right=z["right"], default_left=z["default_left"], missing=z["missing"],
                value=z["value"], roots=z["roots"], depth=int(z["depth"]), link=str(z["link"]),
            )


def _walk(node: dict[str, Any], names: list[str], out: dict[str, list[Any]], depth: int) -> tuple[int, int]:
    """Append ``node`` (and its subtree) to ``out``; return (its index, subtree depth)."""
    idx = len(out["feature"])
    for key in out:
        out[key].append(0)
    if "leaf_value" in node:
        out["feature"][idx], out["left"][idx], out["right"][idx] = -1, idx, idx
        out["value"][idx] = float(node["leaf_value"])
        return idx, depth
    if node.get("decision_type", "<=") != "<=":
        raise ValueError(f"only numerical '<=' splits are supported; got {node.get('decision_type')}")
    out["feature"][idx] = int(node["split_feature"])
    out["threshold"][idx] = float(node["threshold"])
    out["default_left"][idx] = bool(node["default_left"])
    out["missing"][idx] = MISSING_TYPES[str(node["missing_type"])]
    left, dl = _walk(node["left_child"], names, out, depth + 1)
    right, dr = _walk(node["right_child"], names, out, depth + 1)
    out["left"][idx], out["right"][idx] = left, right
    return idx, max(dl, dr)


def forest_from_dump(dump: dict[str, Any], link: str) -> Forest:
    """Forest from ``lightgbm.Booster.dump_model()``; its features are the booster's, in its order."""
    names = [str(n) for n in dump["feature_names"]]
    features = tuple(names)
    keys = ("feature", "threshold", "left", "right", "default_left", "missing", "value")
    out: dict[str, list[Any]] = {k: [] for k in keys}
    roots, depth = [], 0
    for tree in dump["tree_info"]:
        root, d = _walk(tree["tree_structure"], names, out, 0)
        roots.append(root)
        depth = max(depth, d)
    return Forest(
        features=tuple(features), feature=np.array(out["feature"], dtype=np.int32),
        threshold=np.array(out["threshold"], dtype=np.float64), left=np.array(out["left"], dtype=np.int32),
        right=np.array(out["right"], dtype=np.int32), default_left=np.array(out["default_left"], dtype=bool),
        missing=np.array(out["missing"], dtype=np.int8), value=np.array(out["value"], dtype=np.float64),
        roots=np.array(roots, dtype=np.int32), depth=depth, link=link,
    )
