"""Every figure the docs state comes from one source: a committed report's record, or the dated lab notebook.

README.md and docs/*.md (docs/measurements.md is the notebook itself) state a measured figure in one of
two ways:

- between ``<!-- figures: REPORT WHAT -->`` markers, rendered from ``docs/reports/REPORT``'s record by
  ``loadtest.report.doc_figures``: the block must be what the record renders now;
- anywhere else, only in a paragraph, list item or table (with the paragraph just before it) that names its
  source: a committed report (``reports/REPORT/``), whose Markdown must hold each figure, or
  ``measurements.md#SECTION``, whose section must hold each figure and the date the paragraph gives.

A figure is a ratio (``1.50x``, ``2x``), a rate (``503.7 req/s``, ``568.8/s``), a share with a decimal
(``88.5%``) or a verdict (``met``, ``missed``). Fenced code blocks show a command's captured output and are
not claims.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from loadtest.report import doc_figures

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "docs" / "measurements.md"
RATE_UNITS = r"(?:req|requests|img|images|sentences|seq|sequences|texts|infer|inputs|items)?/s"
FIGURE = re.compile(
    r"(?<![\w.])(?:\d[\d,]*(?:\.\d+)?x(?![\w-])"
    rf"|\d[\d,]*(?:\.\d+)?\s?{RATE_UNITS}(?!\w)"
    r"|\d+\.\d+%)"
)
VERDICT = re.compile(r"\b(?:met|missed)\b", re.IGNORECASE)
GENERIC_VERDICT = re.compile(r"\bmet or missed\b", re.IGNORECASE)
REPORT_SOURCE = re.compile(r"(?<![\w/.-])(?:docs/)?reports/(?P<report>[\w-]+)/")
REQUIREMENT = re.compile(r"(?:at least|at most|>=|<=)\s*$")  # "at least 2x" states a target, not a figure
NOTEBOOK_SOURCE = re.compile(r"measurements\.md(?:#(?P<anchor>[\w-]+))?")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


@dataclass(frozen=True)
class Unit:
    """A paragraph, list item or table of a document, with the line it starts on and, for a table or a list
    item, the paragraph that leads into it, which may name the source for all of them."""

    document: Path
    line: int
    text: str
    caption: str = ""


def units(document: Path) -> list[Unit]:
    """``document`` cut into units, leaving out fenced code and quoted blocks (replaced by blank lines)."""
    text = doc_figures.BLOCK.sub(
        lambda m: "\n" * m.group(0).count("\n"), document.read_text(encoding="utf-8")
    )
    text = re.sub(r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S | re.M)
    blocks: list[tuple[int, str, list[str]]] = []  # (first line, kind, lines)
    for number, line in enumerate(text.splitlines(), 1):
        kind = (
            "table" if line.startswith("|") else "item" if re.match(r"\s{0,3}(?:[-*]|\d+\.)\s", line) else ""
        )
        if not line.strip():
            blocks.append((number, "gap", []))
        elif blocks and blocks[-1][1] != "gap" and (kind == "" or kind == blocks[-1][1] == "table"):
            blocks[-1][2].append(line)  # a continuation line, or the next row of a table
        else:
            blocks.append((number, kind or "prose", [line]))
    found, lead, in_list = [], "", False
    for number, kind, lines in blocks:
        if kind == "gap":
            continue
        body = "\n".join(lines)
        found.append(Unit(document, number, body, caption=lead if kind in ("table", "item") else ""))
        if kind == "prose":
            lead, in_list = body, False
        elif kind == "item":
            in_list = True
        elif in_list:
            lead, in_list = "", False
    return found


def section(text: str, anchor: str) -> str | None:
    """The section of a Markdown ``text`` whose heading has GitHub's ``anchor``, down to the next heading
    of its level or above."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        heading = re.match(r"(#+)\s+(.*)", line)
        if heading and _slug(heading.group(2)) == anchor:
            level = len(heading.group(1))
            end = next(
                (
                    i
                    for i in range(index + 1, len(lines))
                    if re.match(r"#+\s", lines[i]) and len(lines[i]) - len(lines[i].lstrip("#")) <= level
                ),
                len(lines),
            )
            return "\n".join(lines[index:end])
    return None


def _slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _held(figure: str, source: str) -> bool:
    """Whether ``source`` states ``figure``: a ratio or share as written, a rate by its number alone (a
    report's table gives the unit in its header)."""
    written = re.sub(r"[\s,]", "", figure)
    rate = re.match(r"[\d.]+(?=\D*/s$)", written)
    wanted = re.escape(rate.group(0)) + r"(?![\d])" if rate else re.escape(written)
    return re.search(rf"(?<![\d.]){wanted}", source) is not None


def problems(unit: Unit) -> list[str]:
    """What ``unit`` states that its named source does not hold."""
    claims = [
        m.group(0) for m in FIGURE.finditer(unit.text) if not REQUIREMENT.search(unit.text[: m.start()])
    ]
    verdicts = [m.group(0).lower() for m in VERDICT.finditer(GENERIC_VERDICT.sub("", unit.text))]
    if not claims and not verdicts:
        return []
    name = unit.document.relative_to(ROOT) if unit.document.is_relative_to(ROOT) else unit.document
    where = f"{name}:{unit.line}"
    cited = unit.text + "\n" + unit.caption
    sources: list[str] = []
    for report in {m["report"] for m in REPORT_SOURCE.finditer(cited)}:
        folder = ROOT / "docs" / "reports" / report
        if not folder.is_dir():
            return [f"{where}: names a report that is not committed: docs/reports/{report}/"]
        sources.extend(p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.md")))
    notebook = NOTEBOOK.read_text(encoding="utf-8")
    for found in NOTEBOOK_SOURCE.finditer(cited):
        text = section(notebook, found["anchor"]) if found["anchor"] else notebook
        if text is None:
            return [f"{where}: docs/measurements.md has no section #{found['anchor']}"]
        dates = set(DATE.findall(cited))
        if not dates or not dates <= set(DATE.findall(text)):
            return [f"{where}: quotes docs/measurements.md without the date its section gives"]
        sources.append(text)
    if not sources:
        return [f"{where}: states {', '.join(claims + verdicts)} without naming its source"]
    held = re.sub(r"(?<=\d),(?=\d{3})", "", "\n".join(sources))
    missing = [c for c in claims if not _held(c, held)]
    missing += [v for v in verdicts if not re.search(rf"\b{v}\b", "\n".join(sources), re.IGNORECASE)]
    return [f"{where}: its source does not hold {', '.join(missing)}"] if missing else []


DOCUMENTS = [p for p in doc_figures.documents() if p != NOTEBOOK]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_figure_outside_a_quoted_block_is_held_by_the_source_it_names(document: Path) -> None:
    found = [problem for unit in units(document) for problem in problems(unit)]
    assert not found, "\n".join(found)


def test_every_quoted_block_is_what_its_record_renders() -> None:
    blocks = [block for document in doc_figures.documents() for block in doc_figures.quoted_blocks(document)]
    assert {"targets", "claims", "tune-winners"} <= {block.what for block in blocks}
    stale = [block.where() for block in blocks if block.stale]
    assert not stale, "run `.venv/bin/python -m loadtest.report.doc_figures`:\n" + "\n".join(stale)


def test_a_figure_edited_by_hand_in_a_quoted_block_makes_it_stale() -> None:
    block = doc_figures.quoted_blocks(ROOT / "README.md")[0]
    edited = re.sub(r"\d(?=\.\d)", lambda m: str((int(m.group(0)) + 1) % 10), block.body, count=1)
    assert edited != block.body
    assert not block.stale and replace(block, body=edited).stale


def test_a_figure_its_named_source_does_not_hold_is_refused(tmp_path: Path) -> None:
    notebook = NOTEBOOK.read_text(encoding="utf-8")
    date = DATE.search(notebook)
    assert date is not None
    held = next(m.group(0) for m in FIGURE.finditer(notebook, date.end()))
    doc = tmp_path / "doc.md"
    for text, refused in (
        ("Measured: 9.99x.", True),  # no source named
        ("Triton missed its target (docs/measurements.md): 9.99x.", True),  # no date
        (f"On {date.group(0)} (docs/measurements.md): {held}.", False),
        (f"On {date.group(0)} (docs/measurements.md): {held} and 987.6 req/s.", True),
        (f"On {date.group(0)} (docs/measurements.md#no-such-section): {held}.", True),
        ("The report says met or missed for each target.", False),
        ("The text target was met (docs/reports/quick-example/report.md): 2.95x.", False),
        ("The text target was met (docs/reports/quick-example/report.md): 2.59x.", True),
    ):
        doc.write_text(text + "\n")
        assert bool([problem for unit in units(doc) for problem in problems(unit)]) is refused, text
