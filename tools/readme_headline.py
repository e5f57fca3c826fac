"""Copy the reference study's tables from results/reference into the README and docs/, between markers.

    python tools/readme_headline.py          # rewrite the blocks of README.md and docs/*.md
    python tools/readme_headline.py --check  # exit 1 if any differs from results/reference

The headline numbers are never typed by hand: each block between
``<!-- results/FILE -->`` and ``<!-- end -->`` is the file's content (for a -published.md file,
only its sentences: the lines that start with "- ", each with the indented "  - " lines under it).
``<!-- results/FILE only "- A" "- B" -->`` keeps only the sentences that start with one of the
quoted beginnings, in the file's order, each with its indented lines (a declared claim's verdict
and its test at each length); ``heads "- A"`` the same without the indented lines.
tests/repository/test_readme.py runs the check.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"(<!-- (results/[\w./+-]+)(?: (only|heads) (.+?))? -->\n)(.*?)(<!-- end -->)", re.S)


def block_text(path: Path, only: str | None = None, heads: bool = False) -> str:
    text = path.read_text(encoding="utf-8").strip()
    if path.name.endswith("-published.md"):
        text = "\n".join(_kept(text.splitlines(), ("- ",)))
    if only:
        text = "\n".join(_kept(text.splitlines(), tuple(shlex.split(only)), heads))
    return text + "\n"


def _kept(lines: list[str], beginnings: tuple[str, ...], heads: bool = False) -> list[str]:
    """The lines that start with one of ``beginnings``, each with the indented "  - " lines under it
    (``heads``: without them)."""
    kept, keeping = [], False
    for line in lines:
        if line.startswith("  - "):
            if keeping and not heads:
                kept.append(line)
            continue
        keeping = line.startswith(beginnings)
        if keeping:
            kept.append(line)
    return kept


def render(readme: str, root: Path = ROOT) -> str:
    def filled(match) -> str:
        text = block_text(root / match.group(2), match.group(4), heads=match.group(3) == "heads")
        return match.group(1) + text + match.group(6)

    return BLOCK.sub(filled, readme)


def main() -> int:
    stale = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        rendered = render(text)
        if rendered != text:
            stale.append(path.relative_to(ROOT))
            if "--check" not in sys.argv:
                path.write_text(rendered, encoding="utf-8")
    if stale and "--check" in sys.argv:
        print(
            f"{', '.join(map(str, stale))} differ from results/; run: python tools/readme_headline.py", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
