"""scripts/refresh_catalogue.py parses Google's tables (tested on small excerpts of them, committed beside this file
with their address and the day they were read), and the data it generated, ground/domain/data/vertex_catalogue.json,
is what the catalogue reads: dated, sourced, no older than ``domain.MAX_DATA_AGE``."""

from __future__ import annotations

import dataclasses
import datetime
import importlib.util
import json
from pathlib import Path

import pytest

from ground import domain
from ground.envs import REPO_ROOT

EXCERPTS = Path(__file__).resolve().parent / "excerpts"
DATA = REPO_ROOT / "ground" / "domain" / "data" / "vertex_catalogue.json"


@pytest.fixture(scope="module")
def refresh():
    spec = importlib.util.spec_from_file_location("refresh_catalogue", REPO_ROOT / "scripts" / "refresh_catalogue.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _excerpt(name: str) -> str:
    return (EXCERPTS / f"{name}.md").read_text(encoding="utf-8")


def test_the_locations_table_splits_training_from_not_for_training_by_the_pages_own_footnote(refresh):
    table = refresh.parse_locations(_excerpt("locations"))
    assert table["TPU v5e"] == {"training": ["us-central1"], "not_for_training": ["europe-west4", "us-south1"]}
    assert table["L4"] == {"training": ["europe-west4", "us-central1"], "not_for_training": ["asia-east1"]}
    assert table["T4"]["not_for_training"] == ["southamerica-west1"]      # "T4 <sup>†</sup> ,TPU v6e": no space
    # "*" is the serving footnote: the accelerator still trains there
    assert table["TPU v2"] == {"training": ["asia-east1", "us-central1"], "not_for_training": []}
    assert set(table) >= {"A100 40GB", "H100 Mega", "RTX PRO 6000", "TPU v2 Pod", "B200", "H200"}


def test_the_html_rendering_of_the_same_table_parses_the_same(refresh):
    # the page's HTML text writes the marks as bare characters ("L4 † , P100"); a pipe table of it reads alike
    text = "\n".join([
        "| Region | Location | Accelerators |", "|---|---|---|",
        "| asia-east1 | Changhua County, Taiwan, Asia Pacific | L4 † , P100, T4, TPU v2 * , H100 Mega *‡ |",
        "", "* The specified accelerator isn't available for serving batch or online inferences .",
        "† The specified accelerator isn't available for training ."])
    table = refresh.parse_locations(text)
    assert table["L4"] == {"training": [], "not_for_training": ["asia-east1"]}
    assert table["H100 Mega"] == {"training": ["asia-east1"], "not_for_training": []}


@pytest.mark.parametrize("change, fragment", [
    (lambda t: t.replace("isn't available for training", "is retired"), "not available for training"),
    (lambda t: t.replace("| Accelerators |", "| Hardware |"), "expected one table"),
    (lambda t: t.replace("`us-south1`", "`Dallas`"), "is not a region name"),
])
def test_a_table_that_reads_differently_stops_the_parser_naming_the_page(refresh, change, fragment):
    with pytest.raises(refresh.TableError, match=fragment):
        refresh.parse_locations(change(_excerpt("locations")), "locations")


def _rows(rows):
    return [(r["machine_type"], r["topology"], r["chips"], r["vms"]) for r in rows]


def test_the_compute_page_gives_v5e_topologies_pod_counts_and_end_of_support(refresh):
    text = _excerpt("configure_compute")
    rows = refresh.parse_tpu_topologies(text)
    assert _rows(rows["v5e"]) == [
        ("ct5lp-hightpu-8t", "2x4", 8, 1), ("ct5lp-hightpu-4t", "2x4", 8, 2), ("ct5lp-hightpu-4t", "4x4", 16, 4),
        ("ct5lp-hightpu-4t", "16x16", 256, 64)]
    assert rows["v6e"] == []                   # the excerpt (read 2026-11-26) has no TPU v6e row
    assert refresh.parse_tpu_pod_counts(text) == {"TPU_V2": {"single": 8, "pod_multiple": 32},
                                                  "TPU_V3": {"single": 8, "pod_multiple": 32}}
    assert refresh.parse_end_of_support(text) == {"P100": "2026-09-15"}


# A TPU v6e table laid out as Google's TPU v5e one: constructed for the parser (no such table of Vertex AI's was
# read here), in its own table as the page would add one, and as rows of the same table.
V6E_TABLE = """
| *Machine Type*     | *Topology* | *Number of TPU chips* | *Number of VMs* | *Recommended use case* |
| ------------------ | ---------- | --------------------- | --------------- | ---------------------- |
| `ct6e-standard-8t` | 2x4        | 8                     | 1               | Small to medium scale training |
| `ct6e-standard-4t` | 4x4        | 16                    | 4               | Large-scale training           |
"""


@pytest.mark.parametrize("place", ["own table", "same table"])
def test_tpu_v6e_rows_of_the_compute_page_are_kept_in_their_own_list(refresh, place):
    text = _excerpt("configure_compute")
    if place == "own table":
        text += "\n" + V6E_TABLE
    else:
        text = text.replace("| `ct5lp-hightpu-8t` |", V6E_TABLE.strip().splitlines()[-1] + "\n| `ct5lp-hightpu-8t` |")
    rows = refresh.parse_tpu_topologies(text)
    assert len(rows["v5e"]) == 4
    assert _rows(rows["v6e"]) == ([("ct6e-standard-8t", "2x4", 8, 1), ("ct6e-standard-4t", "4x4", 16, 4)]
                                  if place == "own table" else [("ct6e-standard-4t", "4x4", 16, 4)])
    # and the catalogue takes Google's rows over the ones it derived from the Cloud TPU v6e page
    tables = dataclasses.replace(domain.vertex_tables(),
                                 v6e_topologies=tuple(domain.TpuTopology(**r) for r in rows["v6e"]))
    offer = domain.vertex_offer(tables)
    assert (offer["v6e-16"].machine_type, offer["v6e-16"].topology, offer["v6e-16"].vms) == ("ct6e-standard-4t", "4x4", 4)
    assert "v6e-32" not in offer                                   # Google's table is the offer, not tpuctl's
    assert domain.vertex_offer(domain.vertex_tables())["v6e-32"].topology == "4x8"     # the derived rows, unread


def test_a_compute_page_without_v5e_rows_stops_the_parser(refresh):
    with pytest.raises(refresh.TableError, match="no TPU machine table with ct5lp rows"):
        refresh.parse_tpu_topologies(_excerpt("configure_compute").replace("ct5lp-", "ct9x-"))


def test_build_writes_every_page_with_its_address_day_and_hash(refresh, tmp_path):
    pages = tmp_path / "pages"
    pages.mkdir()
    (pages / "locations.md.txt").write_text(_excerpt("locations"))
    (pages / "configure_compute.md.txt").write_text(_excerpt("configure_compute"))
    out = tmp_path / "out.json"
    assert refresh.main(["--pages", str(pages), "--read-on", "2026-11-26", "--note", "excerpts", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data["pages"]) == {"locations", "configure_compute"}
    assert len(data["v5e_topologies"]) == 4 and data["v6e_topologies"] == []
    assert all(p["url"].endswith(".md.txt") and p["read_on"] == "2026-11-26" and len(p["sha256"]) == 64
               for p in data["pages"].values())
    # a page that is missing writes nothing and exits non-zero
    (pages / "configure_compute.md.txt").unlink()
    out.unlink()
    assert refresh.main(["--pages", str(pages), "--out", str(out)]) == 1 and not out.exists()


def test_the_shipped_data_is_dated_sourced_and_not_older_than_the_bound():
    data = json.loads(DATA.read_text())
    assert data["generated_by"] == domain.REFRESH_SCRIPT
    tables = domain.vertex_tables()
    assert set(tables.sources) == {"locations", "configure_compute"}
    age = datetime.date.today() - tables.read_on
    assert age <= domain.MAX_DATA_AGE, (f"Google's tables were read on {tables.read_on} ({age.days} days ago): run "
                                        f"{domain.REFRESH_SCRIPT} on a machine with internet and commit its output")


def test_the_catalogue_reads_the_data_not_a_typed_table():
    tables = domain.vertex_tables()
    v5e = tables.offer("TPU v5e")
    accel = domain.parse_accelerator("tpu-v5e-4")
    assert accel.regions == v5e.training and "europe-west4" in v5e.not_for_training
    assert domain.GPU_TYPES["nvidia-tesla-p100"].end_of_support == tables.end_of_support["P100"]
    # every TPU v5e slice Vertex AI offers is a row of Google's table, VMs included; every v6e one a row of Google's
    # v6e table when a refresh read one, else of the rows derived from the Cloud TPU v6e page (unverified)
    rows = {"v5e": {(r.machine_type, r.topology, r.chips, r.vms) for r in tables.v5e_topologies},
            "v6e": {(r.machine_type, r.topology, r.chips, r.vms)
                    for r in tables.v6e_topologies or domain.V6E_VERTEX_DERIVED}}
    for s in domain.TPU_SLICES.values():
        if s.vertex is not None and s.generation in rows:
            assert (s.vertex.machine_type, s.vertex.topology, s.chips, s.vertex.vms) in rows[s.generation], s.name
            assert s.vms == s.vertex.vms, s.name          # the TPU VM route counts the same VMs
    assert {s.name for s in domain.TPU_SLICES.values() if s.vertex is not None and s.generation == "v6e"} == {
        f"v6e-{n}" for n in (1, 4, 8, 16, 32, 64, 128, 256)}
    # every label the catalogue asks for is in Google's table (a renamed label would silently warn)
    labels = {g.label for g in domain.GPU_TYPES.values()}
    labels |= {s.vertex.label for s in domain.TPU_SLICES.values() if s.vertex is not None}
    assert labels - set(tables.regions) == set()
