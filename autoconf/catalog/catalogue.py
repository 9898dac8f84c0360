"""The catalogue's entries: one config.json per model in configs/ (its keys verbatim plus ``_autoconf``),
then the rows of models.csv that no config file covers yet (ado names whose architecture is unknown,
the synthetic test model). Both are parsed by the one config parser (config_parse).

Names are matched case-insensitively under the entry's name, its aliases, its hub id (with and
without the organisation) and the hub id's common variants (``-hf``, ``-chat-hf``, ``-Instruct``,
``Meta-`` prefix); an explicit name or alias always wins over a variant, and a variant two entries
share is dropped rather than guessed.
"""

from __future__ import annotations

import csv
import difflib
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from autoconf.catalog.config_view import ConfigError, read_json

CUTOFF = 0.4  # the similarity autoconf.errors asks of a suggestion (difflib ratio)
SUFFIXES = ("-chat-hf", "-hf", "-instruct", "-chat")  # stripped, then each re-added (order: longest first)


@dataclass(frozen=True)
class Entry:
    """One catalogued model: its names, provenance and the config dict that defines it (None when
    the architecture is not known: the model is listed but cannot be answered)."""

    name: str
    hf_id: str
    aliases: tuple[str, ...]
    source: str
    verification: str
    notes: str
    origin: str  # the configs/ file or "models.csv row <name>"
    config: dict[str, Any] | None = field(default=None, compare=False, hash=False)


def _json_entries() -> list[Entry]:
    folder = resources.files("autoconf.catalog").joinpath("configs")
    if not folder.is_dir():
        return []
    entries = []
    for item in sorted(folder.iterdir(), key=lambda p: p.name):
        if not item.name.endswith(".json"):
            continue
        origin = f"catalogue file configs/{item.name}"
        data = read_json(item)  # type: ignore[arg-type]  # a Traversable reads like a Path here
        meta = data.get("_autoconf") if isinstance(data, dict) else None
        if not isinstance(data, dict) or not isinstance(meta, dict) or not meta.get("name"):
            raise ConfigError(origin, "a catalogue file needs an '_autoconf' object with a 'name'")
        entries.append(Entry(str(meta["name"]), str(meta.get("hf_id") or ""), tuple(meta.get("aliases") or ()),
                             str(meta.get("source") or ""), str(meta.get("verification") or ""),
                             str(meta.get("notes") or ""), origin, data))
    return entries


def _csv_config(row: dict[str, str]) -> dict[str, Any] | None:
    """A models.csv row as the config.json keys of its family (None when its cells are empty)."""
    if row["answerable"] != "1":
        return None
    num = {k: int(float(row[k])) for k in ("hidden_size", "intermediate_size", "num_layers", "num_heads",
                                           "num_kv_heads", "head_dim", "vocab_size", "max_position_embeddings",
                                           "num_experts", "experts_per_token") if row[k]}
    tie = row["tie_word_embeddings"].lower() == "true"
    if row["model_type"] == "gpt_bigcode":
        return {"model_type": "gpt_bigcode", "n_embd": num["hidden_size"], "n_inner": num["intermediate_size"],
                "n_layer": num["num_layers"], "n_head": num["num_heads"], "multi_query": num["num_kv_heads"] == 1,
                "vocab_size": num["vocab_size"], "n_positions": num["max_position_embeddings"], "tie_word_embeddings": tie}
    cfg: dict[str, Any] = {
        "model_type": row["model_type"], "hidden_size": num["hidden_size"], "intermediate_size": num["intermediate_size"],
        "num_hidden_layers": num["num_layers"], "num_attention_heads": num["num_heads"],
        "num_key_value_heads": num["num_kv_heads"], "head_dim": num.get("head_dim"), "vocab_size": num["vocab_size"],
        "max_position_embeddings": num.get("max_position_embeddings", 0), "tie_word_embeddings": tie,
        "attention_bias": row["attention_bias"] == "1", "mlp_bias": row["mlp_bias"] == "1",
    }
    if num.get("num_experts"):
        cfg.update(num_local_experts=num["num_experts"], num_experts_per_tok=num["experts_per_token"])
    return cfg


def _csv_entries(known: set[str]) -> list[Entry]:
    text = resources.files("autoconf.catalog").joinpath("models.csv").read_text(encoding="utf-8")
    rows = [row for row in csv.DictReader(text.splitlines()) if row["name"] not in known]
    return [Entry(row["name"], row["hf_id"], tuple(a for a in row["aliases"].split(";") if a), row["source"],
                  row["verification"], row["notes"], f"models.csv row {row['name']}", _csv_config(row)) for row in rows]


@lru_cache(maxsize=1)
def entries() -> dict[str, Entry]:
    """Every catalogued model by name: ado's models.csv names first (in that order), then the rest."""
    from_json = {e.name: e for e in _json_entries()}
    text = resources.files("autoconf.catalog").joinpath("models.csv").read_text(encoding="utf-8")
    legacy = [row["name"] for row in csv.DictReader(text.splitlines())]
    merged = {e.name: e for e in _csv_entries(set(from_json))}
    ordered = {n: from_json.get(n) or merged[n] for n in legacy}
    return {**ordered, **{n: from_json[n] for n in sorted(from_json) if n not in ordered}}


def variants(key: str) -> set[str]:
    """Common spellings of a hub id: without its organisation, with/without -hf, -chat-hf, -instruct
    and chat suffixes and the ``Meta-`` prefix (all lower case)."""
    key = key.strip().lower()
    repo = key.rsplit("/", 1)[-1]
    base = repo
    for suffix in SUFFIXES:
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    stems = {base, base.removeprefix("meta-"), "meta-" + base.removeprefix("meta-")}
    out = {stem + suffix for stem in stems for suffix in ("", *SUFFIXES)}
    org = key.rsplit("/", 1)[0] + "/" if "/" in key else ""
    return out | ({org + v for v in out} if org else set())


@lru_cache(maxsize=1)
def alias_index() -> dict[str, str]:
    """lower-case spelling -> catalogue name (explicit names first; unambiguous variants after)."""
    explicit: dict[str, str] = {}
    for entry in entries().values():
        for key in (entry.name, *entry.aliases, entry.hf_id):
            if key and "(" not in key:  # models.csv hf_id cells like "(internal checkpoint)" are no ids
                explicit.setdefault(key.strip().lower(), entry.name)
    claims: dict[str, set[str]] = {}
    for entry in entries().values():
        for key in (entry.hf_id, *entry.aliases):
            if key and "/" in key:
                for variant in variants(key):
                    claims.setdefault(variant, set()).add(entry.name)
    implied = {k: next(iter(v)) for k, v in claims.items() if len(v) == 1 and k not in explicit}
    return {**implied, **explicit}


def suggest(name: str, n: int = 5) -> list[str]:
    """The catalogue names closest to ``name``, each scored by its best-matching spelling (remembered: a sweep
    naming one unknown model in many rows pays for the comparison once)."""
    return list(_suggest(name.strip().lower(), n))


@lru_cache(maxsize=1024)
def _suggest(key: str, n: int) -> tuple[str, ...]:
    best = dict[str, float]()
    for spelling, target in alias_index().items():
        for form in {spelling, spelling.rsplit("/", 1)[-1]}:
            score = difflib.SequenceMatcher(None, key, form).ratio()
            best[target] = max(best.get(target, 0.0), score)
    ranked = sorted((score, target) for target, score in best.items() if score >= CUTOFF)
    return tuple(target for _, target in sorted(ranked, key=lambda pair: -pair[0])[:n])
