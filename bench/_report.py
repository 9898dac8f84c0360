"""Write one named section of a Markdown report, leaving the other sections as they are.

Several bench scripts share docs/benchmarks.md and docs/accuracy.md; each owns the text between
``<!-- section:NAME -->`` and ``<!-- /section:NAME -->``.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def update_section(path: Path | str, name: str, markdown: str, title: str | None = None) -> Path:
    """Replace (or append) the section ``name`` of ``path`` with ``markdown``."""
    target = Path(path)
    if not target.is_absolute():
        target = ROOT / target
    start, end = f"<!-- section:{name} -->", f"<!-- /section:{name} -->"
    block = f"{start}\n{markdown.rstrip()}\n{end}"
    text = target.read_text(encoding="utf-8") if target.exists() else f"# {title or target.stem}\n"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    return target
