"""Vertex AI's own tables, as ``scripts/refresh_catalogue.py`` generated them: read, never retyped.

``data/vertex_catalogue.json`` holds what the script parsed from Google's pages (each page with its address, the
day it was read and the SHA-256 of the text parsed):

- ``training_regions``: Google's "Using accelerators" table of the Vertex AI locations page
  (docs.cloud.google.com/gemini-enterprise-agent-platform/machine-learning/general/locations), per accelerator label
  (``T4``, ``A100 40GB``, ``TPU v5e`` …) the regions where custom training runs on it and those Google marks
  "isn't available for training";
- ``gpu_end_of_support``: the GPUs whose end of support the custom-training compute page announces (P100:
  2026-09-15), ``tpu_pod_counts`` (TPU v2/v3: 8 for one board, a multiple of 32 for a Pod) and ``v5e_topologies``
  (machine type, topology, chips and VMs of every TPU v5e row), from the same page's markdown
  (docs.cloud.google.com/gemini-enterprise-agent-platform/machine-learning/training/configure-compute);
  ``v6e_topologies``: the page's TPU v6e rows (``ct6e-…`` machine types) when a refresh found any. The data read on
  2026-11-26 has none (that parse kept ``ct5lp-…`` rows only), so the catalogue derives Vertex AI's v6e machine
  specs from the Cloud TPU v6e page instead (``tpu.V6E_VERTEX_DERIVED``) until a refresh reads Google's own rows.

How the catalogue uses it (``accelerators.check_accelerator_region``): a region the table marks "not available
for training" is refused, naming the regions that work; a region the table does not list for the accelerator is a
warning naming the data's date (Google's table may be newer than this copy), not a refusal.
"""

from __future__ import annotations

import datetime
import functools
import json
from dataclasses import dataclass
from importlib import resources as _resources

#: The generated file, relative to this package.
DATA_FILE = "data/vertex_catalogue.json"
#: The command that regenerates it (on a machine with internet).
REFRESH_SCRIPT = "scripts/refresh_catalogue.py"
#: tpuctl's bound on the data's age: tests/ops/catalogue fails when the pages were read longer ago than this.
MAX_DATA_AGE = datetime.timedelta(days=180)


@dataclass(frozen=True)
class RegionOffer:
    """Where Vertex AI trains on one accelerator label, per Google's locations table."""
    label: str
    training: frozenset[str]
    not_for_training: frozenset[str]


@dataclass(frozen=True)
class TpuTopology:
    """One row of a Vertex AI TPU machine table: machine type, ``tpuTopology``, chips and VMs of the replica."""
    machine_type: str
    topology: str
    chips: int
    vms: int


@dataclass(frozen=True)
class VertexTables:
    read_on: datetime.date               # the oldest day any of the pages was read
    sources: dict[str, str]              # page key -> address
    regions: dict[str, RegionOffer]
    end_of_support: dict[str, datetime.date]
    tpu_pod_counts: dict[str, tuple[int, int]]   # TPU_V2 -> (one board, a Pod's multiple)
    v5e_topologies: tuple[TpuTopology, ...]
    v6e_topologies: tuple[TpuTopology, ...] = ()    # empty: no refresh has read Google's v6e rows

    def offer(self, label: str) -> RegionOffer | None:
        return self.regions.get(label)

    @property
    def dated(self) -> str:
        """How a message names the data: ``Google's table as read on 2026-11-26``."""
        return f"Google's table as read on {self.read_on.isoformat()}"


@functools.cache
def vertex_tables() -> VertexTables:
    raw = json.loads(_resources.files("ground.domain").joinpath(DATA_FILE).read_text(encoding="utf-8"))
    pages = raw["pages"]
    return VertexTables(
        read_on=min(datetime.date.fromisoformat(p["read_on"]) for p in pages.values()),
        sources={key: p["url"] for key, p in pages.items()},
        regions={label: RegionOffer(label, frozenset(v["training"]), frozenset(v["not_for_training"]))
                 for label, v in raw["training_regions"].items()},
        end_of_support={label: datetime.date.fromisoformat(d) for label, d in raw["gpu_end_of_support"].items()},
        tpu_pod_counts={k: (v["single"], v["pod_multiple"]) for k, v in raw["tpu_pod_counts"].items()},
        v5e_topologies=tuple(TpuTopology(**row) for row in raw["v5e_topologies"]),
        v6e_topologies=tuple(TpuTopology(**row) for row in raw.get("v6e_topologies") or ()),
    )
