"""Copy the reference study's tables from results/reference into the README and docs/, between markers.

    python tools/readme_headline.py          # rewrite the blocks of README.md and docs/*.md
    python tools/readme_headline.py --check  # exit 1 if any differs from results/reference

The headline numbers are never typed by hand: each block between
``<!-- results/FILE -->`` and ``<!-- end -->`` is the file's content (for a -published.md file,
only its sentences: the lines that start with "- "). ``<!-- results/FILE only "- A" "- B" -->``
keeps only the sentences that start with one of the quoted beginnings, in the file's order.
tests/repository/test_readme.py runs the check.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"(<!-- (results/[\w./+-]+)(?: only (.+?))? -->\n)(.*?)(<!-- end -->)", re.S)


def block_text(path: Path, only: str | None = None) -> str:
    text = path.read_text(encoding="utf-8").strip()
    if path.name.endswith("-published.md"):
        text = "\n".join(line for line in text.splitlines() if line.startswith("- "))
    if only:
        beginnings = tuple(shlex.split(only))
        text = "\n".join(line for line in text.splitlines() if line.startswith(beginnings))
    return text + "\n"


def render(readme: str, root: Path = ROOT) -> str:
    return BLOCK.sub(lambda m: m.group(1) + block_text(root / m.group(2), m.group(3)) + m.group(5), readme)


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
