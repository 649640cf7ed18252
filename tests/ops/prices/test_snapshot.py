"""The shipped TPU VM price snapshot and the script that converts SkyPilot's public catalogue into it: per-chip
prices per region, SkyPilot's 700.0 stand-in for "no price" dropped, a region whose rows disagree reported and left
out (never averaged), and the shipped file dated, sourced and consistent with tpuctl's TPU VM catalogue."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import re

import pytest

from ground import domain
from ground.envs import REPO_ROOT

HEADER = "InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice"


@pytest.fixture(scope="module")
def convert():
    spec = importlib.util.spec_from_file_location("convert_skypilot_prices",
                                                  REPO_ROOT / "scripts" / "convert_skypilot_prices.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(*lines: str):
    return csv.DictReader(io.StringIO("\n".join((HEADER, *lines)) + "\n"))


def test_conversion_per_chip_placeholders_and_disagreements(convert):
    report = io.StringIO()
    result = convert.convert(_rows(
        ",,,tpu-v5litepod-1,1,tpu-v5litepod-1,us-central1,us-central1-a,1.2,0.21298",
        ",,,tpu-v5litepod-8,1,tpu-v5litepod-8,us-central1,us-central1-a,9.6,1.70383",   # rounded per slice
        ",,,tpu-v5p-8,1,tpu-v5p-8,us-east5,us-east5-a,16.8,6.24036",                    # 8 TensorCores = 4 chips
        ",,,tpu-v6e-1,1,tpu-v6e-1,asia-east1,asia-east1-c,700.0,700.0",                  # SkyPilot's "no price"
        ",,,tpu-v6e-1,1,tpu-v6e-1,us-central1,us-central1-b,2.7,",                       # no Spot price
        ",,,tpu-v4-8,1,tpu-v4-8,us-central2,us-central2-b,12.88,3.686",
        ",,,tpu-v4-16,1,tpu-v4-16,us-central2,us-central2-b,30.0,7.372",                 # disagrees with v4-8
        ",,,tpu-v3-8,1,tpu-v3-8,us-central1,us-central1-a,8.0,2.04",                     # not a tpuctl TPU VM
        "n1-highmem-8,8.0,52.0,,,,us-central2,us-central2-b,0.47321,0.09962",
    ), "0" * 40, "2026-11-24", report=report)
    assert result["per_chip"] == {
        "v5e": {"us-central1": {"on_demand": 1.2, "spot": 0.21298}},
        "v5p": {"us-east5": {"on_demand": 4.2, "spot": 1.56009}},
        "v6e": {"us-central1": {"on_demand": 2.7}},
        "v4": {"us-central2": {"spot": 0.9215}},
    }
    [dropped] = report.getvalue().splitlines()      # what was dropped where, and the two prices that disagree
    assert dropped.startswith("dropped TPU v4 on_demand in us-central2") and "per-chip" in dropped, dropped
    assert "tpu-v4-8 $12.88" in dropped and "tpu-v4-16 $30" in dropped, dropped
    assert result["commit"] == "0" * 40 and result["read_on"] == "2026-11-24"


def test_shipped_snapshot_is_dated_sourced_and_only_prices(convert):
    raw = json.loads((REPO_ROOT / "ground" / "domain" / domain.SNAPSHOT_FILE).read_text())
    assert raw["repository"] == "skypilot-org/skypilot-catalog" and raw["path"] == "catalogs/v7/gcp/vms.csv"
    assert re.fullmatch(r"[0-9a-f]{40}", raw["commit"]) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", raw["read_on"])
    assert "Not Vertex AI training prices" in raw["note"]
    assert set(raw["per_chip"]) == set(domain.TPU_VM_GENERATIONS)
    for version, regions in raw["per_chip"].items():
        for region, kinds in regions.items():
            assert set(kinds) <= {"on_demand", "spot"} and kinds, (version, region)
            assert all(0 < usd < convert.PLACEHOLDER / 8 for usd in kinds.values()), (version, region)
            if len(kinds) == 2:
                assert kinds["spot"] < kinds["on_demand"], (version, region)
    snapshot = domain.load_snapshot()
    label = snapshot.label      # the source an estimate names: repository, file, commit, date read
    assert label.startswith("SkyPilot") and f"{raw['repository']} {raw['path']}" in label, label
    assert f"commit {raw['commit'][:12]}" in label and raw["read_on"] in label, label
    with pytest.raises(domain.DomainError, match=r"no Spot TPU v5p price\b.*\bmars-1\b.*\bsnapshot\b"):
        snapshot.chip_hour("v5p", "mars-1", True)
