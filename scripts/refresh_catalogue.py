#!/usr/bin/env python3
"""Regenerate tpuctl's Vertex AI catalogue data from Google's own tables, instead of retyping them.

    python scripts/refresh_catalogue.py                          # on a machine with internet: fetch, parse, write
    python scripts/refresh_catalogue.py --pages DIR --read-on YYYY-MM-DD --note "how the pages were obtained"

Google serves its documentation pages as markdown too (the page's address + ``.md.txt``). This script reads the
pages below (fetched, or from ``DIR/<key>.md.txt``), parses their tables and writes
``ground/domain/data/vertex_catalogue.json``, which the catalogue (``ground.domain.vertexdata``) reads:

- ``locations``: the "Using accelerators" table (Region | Location | Accelerators): for each accelerator label
  (``T4``, ``A100 40GB``, ``TPU v5e`` …) the regions where Vertex AI trains on it, and those where Google marks it
  with the footnote "isn't available for training" (the footnote's mark is read from the page, not assumed);
- ``configure_compute``: the TPU machine type / topology / chips / VMs rows of TPU v5e (``ct5lp-…``) and, when the
  page lists them, TPU v6e (``ct6e-…``; one table or several with these columns), the TPU v2/v3 accelerator counts
  (one board, and the multiple of a Pod), and the GPUs whose end of support the page announces.

Every page is recorded with its address, the day it was read and the SHA-256 of the text parsed. A page whose
table is not found, or reads differently than expected (no training footnote, an empty table), stops the script
with a message naming the page: nothing is written, the old data stays. The parser is tested on small excerpts
of these tables (tests/ops/catalogue/). Only facts are written, never Google's prose.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import re
import sys
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
OUT = REPO_ROOT / "ground" / "domain" / "data" / "vertex_catalogue.json"

#: The pages read, by key: Google's address of each (its markdown rendering).
PAGES: dict[str, str] = {
    "locations": "https://docs.cloud.google.com/gemini-enterprise-agent-platform/machine-learning/general/"
                 "locations.md.txt",
    "configure_compute": "https://docs.cloud.google.com/gemini-enterprise-agent-platform/machine-learning/training/"
                         "configure-compute.md.txt",
}

_MONTHS = {m: i for i, m in enumerate(("January", "February", "March", "April", "May", "June", "July", "August",
                                       "September", "October", "November", "December"), start=1)}
#: Footnote marks as the pages write them: ``<sup>\\*</sup>``, ``<sup>†</sup>`` … (or the bare character).
_MARKS = "*†‡+"
_SUP = re.compile(r"<sup>\s*\\?([*†‡+])\s*</sup>")
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_REGION = re.compile(r"^[a-z]+-[a-z]+\d+$")


class TableError(ValueError):
    """A page's table is missing or not what the parser expects (the message names the page and what is off)."""


# --------------------------------------------------------------------------------------------------- markdown


def plain(cell: str) -> str:
    """A cell's text without markdown: links keep their text, backticks and emphasis go, spaces are collapsed."""
    text = _LINK.sub(r"\1", cell)
    text = text.replace("`", "").replace("**", "")
    text = re.sub(r"(?<!\\)\*([^*]+)\*", r"\1", text)
    return " ".join(text.split())


def markdown_tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every pipe table of a markdown page: (header cells, rows of cells), the separator row dropped."""
    tables: list[tuple[list[str], list[list[str]]]] = []
    block: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.strip().startswith("|"):
            block.append(line.strip())
            continue
        if len(block) >= 2:
            rows = [[c.strip() for c in row.strip("|").split("|")] for row in block]
            body = [r for r in rows[1:] if not all(re.fullmatch(r":?-{3,}:?", c) for c in r if c)]
            tables.append((rows[0], body))
        block = []
    return tables


def find_tables(text: str, *columns: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every table whose header names all ``columns`` (case-insensitive)."""
    wanted = [c.lower() for c in columns]
    return [(h, rows) for h, rows in markdown_tables(text)
            if all(any(w in plain(cell).lower() for cell in h) for w in wanted)]


def find_table(text: str, page: str, *columns: str) -> tuple[list[str], list[list[str]]]:
    """The one table whose header names all ``columns`` (case-insensitive); else a TableError naming the page."""
    found = find_tables(text, *columns)
    if len(found) != 1:
        raise TableError(f"{page}: expected one table with the columns {', '.join(columns)}, found {len(found)}")
    return found[0]


def column(header: list[str], name: str) -> int:
    for i, cell in enumerate(header):
        if name.lower() in plain(cell).lower():
            return i
    raise TableError(f"no column {name!r} in {header}")


# --------------------------------------------------------------------------------------------------- the tables


def footnote_marks(text: str) -> dict[str, str]:
    """``{mark: footnote text}`` of the lines that start with a footnote mark (``<sup>†</sup> The specified …``)."""
    notes: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"^\s*(?:<sup>\s*\\?([*†‡+])\s*</sup>|\\?([*†‡+]))\s+(\S.*)$", line)
        if m:
            notes[m.group(1) or m.group(2)] = plain(m.group(3))
    return notes


def accelerator_entries(cell: str) -> list[tuple[str, frozenset[str]]]:
    """``"L4 <sup>†</sup> , P100, TPU v2 <sup>\\*</sup>"`` -> ``[("L4", {"†"}), ("P100", set()), ("TPU v2", {"*"})]``."""
    entries = []
    for item in cell.split(","):
        marks = set(_SUP.findall(item))
        bare = _SUP.sub(" ", item)
        marks |= {ch for ch in bare if ch in _MARKS}
        label = plain("".join(ch for ch in bare if ch not in _MARKS).replace("\\", ""))
        if label:
            entries.append((label, frozenset(marks)))
    return entries


def parse_locations(text: str, page: str = "locations") -> dict[str, dict[str, list[str]]]:
    """The accelerators table: ``{label: {"training": [regions], "not_for_training": [regions]}}``.

    The mark that means "not available for training" is the one whose footnote says so; a page without such a
    footnote is a TableError (a renamed footnote must not turn every refusal into an offer)."""
    header, rows = find_table(text, page, "Region", "Accelerators")
    region_at, accel_at = column(header, "Region"), column(header, "Accelerators")
    training_marks = {mark for mark, note in footnote_marks(text).items()
                      if re.search(r"(?:isn't|is not|not) available for training", note, re.IGNORECASE)}
    if not training_marks:
        raise TableError(f"{page}: no footnote says which accelerators are not available for training")
    table: dict[str, dict[str, set[str]]] = {}
    for row in rows:
        region = plain(row[region_at])
        if not _REGION.match(region):
            raise TableError(f"{page}: {region!r} is not a region name")
        for label, marks in accelerator_entries(row[accel_at]):
            kind = "not_for_training" if marks & training_marks else "training"
            table.setdefault(label, {"training": set(), "not_for_training": set()})[kind].add(region)
    if not table:
        raise TableError(f"{page}: the accelerators table has no rows")
    return {label: {k: sorted(v) for k, v in kinds.items()} for label, kinds in sorted(table.items())}


#: The TPU machine families of Vertex AI's TPU tables, by machine type prefix (the GKE machine types of Cloud TPU's
#: v5e and v6e pages: ct5lp-hightpu-Nt, ct6e-standard-Nt).
TPU_MACHINE_FAMILIES = {"ct5lp-": "v5e", "ct6e-": "v6e"}


def parse_tpu_topologies(text: str, page: str = "configure_compute") -> dict[str, list[dict[str, object]]]:
    """The TPU machine tables of custom training (one table or one per generation): machine type, topology, chips and
    VMs of each row, by generation (``{"v5e": [...], "v6e": [...]}``); rows of other machine types are left out. No
    v5e row at all is a TableError (the page no longer reads as expected); no v6e row is an empty list."""
    columns = ("Machine Type", "Topology", "Number of VMs")
    out: dict[str, list[dict[str, object]]] = {generation: [] for generation in TPU_MACHINE_FAMILIES.values()}
    for header, rows in find_tables(text, *columns):
        at = {name: column(header, name) for name in ("Machine Type", "Topology", "Number of TPU chips",
                                                      "Number of VMs")}
        for row in rows:
            machine = plain(row[at["Machine Type"]])
            generation = next((g for prefix, g in TPU_MACHINE_FAMILIES.items() if machine.startswith(prefix)), None)
            if generation is None:
                continue
            topology = plain(row[at["Topology"]])
            if not re.fullmatch(r"\d+x\d+", topology):
                raise TableError(f"{page}: topology {topology!r} of {machine} is not AxB")
            out[generation].append({"machine_type": machine, "topology": topology,
                                    "chips": int(plain(row[at["Number of TPU chips"]])),
                                    "vms": int(plain(row[at["Number of VMs"]]))})
    if not out["v5e"]:
        raise TableError(f"{page}: no TPU machine table with ct5lp rows (columns {', '.join(columns)})")
    return out


def parse_tpu_pod_counts(text: str, page: str = "configure_compute") -> dict[str, dict[str, int]]:
    """TPU v2/v3 on ``cloud-tpu``: the accelerator count of one board and the multiple a Pod's count is made of."""
    out: dict[str, dict[str, int]] = {}
    for m in re.finditer(r"acceleratorType`\s+to\s+`(TPU_V\d)`.*?acceleratorCount`\s+to\s+`(\d+)`\s+for single TPU"
                         r"\s+or\s+`(\d+)", text, re.DOTALL):
        out[m.group(1)] = {"single": int(m.group(2)), "pod_multiple": int(m.group(3))}
    if not out:
        raise TableError(f"{page}: no TPU v2/v3 accelerator counts found")
    return out


def parse_end_of_support(text: str, page: str = "configure_compute") -> dict[str, str]:
    """``{"P100": "2026-09-15"}`` from "NVIDIA P100 GPUs reach end of support on September 15, 2026"."""
    out = {}
    for m in re.finditer(r"NVIDIA\s+(\w+)\s+GPUs\s+(?:reach|reached|will reach)\s+end of support\s+on\s+"
                         r"([A-Z][a-z]+)\s+(\d{1,2}),\s+(\d{4})", text):
        month = _MONTHS.get(m.group(2))
        if month is None:
            raise TableError(f"{page}: {m.group(2)!r} is not a month")
        out[m.group(1)] = datetime.date(int(m.group(4)), month, int(m.group(3))).isoformat()
    return out


def page_updated(text: str) -> str | None:
    """The page's own "Last updated YYYY-MM-DD" when its text carries one."""
    m = re.search(r"Last updated (\d{4}-\d{2}-\d{2})", text)
    return m.group(1) if m else None


# --------------------------------------------------------------------------------------------------- the data


def build(texts: dict[str, str], read_on: str, note: str | None = None) -> dict[str, object]:
    """The data file's content from the pages' texts (``{key: markdown}``)."""
    missing = sorted(set(PAGES) - set(texts))
    if missing:
        raise TableError(f"pages missing: {', '.join(missing)}")
    datetime.date.fromisoformat(read_on)
    pages = {}
    for key, text in sorted(texts.items()):
        entry: dict[str, object] = {"url": PAGES[key], "read_on": read_on,
                                    "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}
        if page_updated(text):
            entry["page_updated"] = page_updated(text)
        if note:
            entry["note"] = note
        pages[key] = entry
    compute = texts["configure_compute"]
    topologies = parse_tpu_topologies(compute)
    return {
        "generated_by": "scripts/refresh_catalogue.py",
        "pages": pages,
        "training_regions": parse_locations(texts["locations"]),
        "gpu_end_of_support": parse_end_of_support(compute),
        "tpu_pod_counts": parse_tpu_pod_counts(compute),
        "v5e_topologies": topologies["v5e"],
        "v6e_topologies": topologies["v6e"],
    }


def fetch(url: str, timeout: float = 60.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode("utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=Path, help="read DIR/<key>.md.txt instead of fetching the pages")
    parser.add_argument("--read-on", default=datetime.date.today().isoformat(),
                        help="the day the pages were read (YYYY-MM-DD; default today)")
    parser.add_argument("--note", help="how the pages were obtained, when not fetched here")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    try:
        if args.pages:
            texts = {key: (args.pages / f"{key}.md.txt").read_text(encoding="utf-8") for key in PAGES}
        else:
            texts = {key: fetch(url) for key, url in PAGES.items()}
        data = build(texts, args.read_on, args.note)
    except (OSError, TableError, ValueError) as exc:
        print(f"refresh_catalogue: {exc}", file=sys.stderr)
        return 1
    args.out.write_text(json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({len(data['training_regions'])} accelerators, {len(data['v5e_topologies'])} v5e rows, "
          f"{len(data['v6e_topologies'])} v6e rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
