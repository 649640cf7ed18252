"""`tpuctl prices refresh|show` through the real CloudCatalogClient against the stand-in catalogue: services found by
display name, pages followed, only the SKUs tpuctl can use cached (dated, atomically); SKU matching by structured
fields and description words, a SKU matching twice or not at all reported, never averaged."""

from __future__ import annotations

import json

import pytest

from ground import domain
from ground.errors import DomainError
from tpuctl.services import prices

from billingfakes import COMPUTE, SERVICES, TPU, VERTEX, default_skus, fake_prices, sku
from clifixtures import invoke


def test_refresh_finds_services_by_name_follows_pages_and_keeps_only_what_tpuctl_prices(catalog):
    # Other ids than the public examples: tpuctl must look them up by display name, not trust copied ids.
    ids = {VERTEX: "AAAA-0000-0001", COMPUTE: "AAAA-0000-0002", TPU: "AAAA-0000-0003"}
    skus = {ids.get(k, k): v for k, v in default_skus().items()}
    fake = catalog(skus=skus, services={ids.get(k, k): name for k, name in SERVICES.items()}, page=5)
    result = invoke(["prices", "refresh"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("cached 48 SKUs from Cloud Billing Catalog (127.0.0.1:")
    assert fake.requests.count("/v1/services/AAAA-0000-0001/skus") == 9   # 44 Vertex SKUs, 5 per page
    assert "/v1/services/95FF-2EF5-5EA1/skus" not in fake.requests          # Cloud Storage: never read
    cached = json.loads(prices.cache_path().read_text())
    assert cached["services"] == {"vertex": "AAAA-0000-0001", "compute": "AAAA-0000-0002", "tpu": "AAAA-0000-0003"}
    descriptions = {s["description"] for s in cached["skus"]}
    assert "TpuV5e running in Americas" in descriptions
    assert "Vertex AI Training on Spot Preemptible G2 Instance Core running in EMEA" in descriptions
    # Not kept: Compute Engine N1/G2 cores (Vertex AI bills its own), a 1-year commitment, storage.
    assert not any(("Core" in s["description"] and s["service"] != "vertex") or "Commitment" in s["description"]
                   or "Storage" in s["description"] for s in cached["skus"])
    assert [p.name for p in prices.cache_path().parent.iterdir()] == ["catalog.json"]   # no temporary file left
    assert prices.read_cache().fetched.year >= 2026


def test_a_renamed_service_is_one_line_and_no_cache_is_written(catalog):
    names = dict(SERVICES)
    names[TPU] = "Cloud TPUs"
    catalog(services=names)
    result = invoke(["prices", "refresh"])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == ["error: the Cloud Billing catalogue has no service named 'Cloud TPU' "
                                          "(it lists 4 services); Google may have renamed it: please report it"]
    assert not prices.cache_path().exists()


def test_an_unreachable_catalogue_is_one_line_naming_the_variable(monkeypatch):
    from netfixtures import free_port

    monkeypatch.setenv("TPUCTL_CLOUDBILLING_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    result = invoke(["prices", "refresh"])
    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    assert "cannot reach cloudbilling endpoint" in line and "TPUCTL_CLOUDBILLING_ENDPOINT" in line


def test_the_cache_write_is_atomic_and_an_unreadable_cache_counts_as_none(tmp_path):
    catalogue = fake_prices().catalogue
    path = prices.write_cache(catalogue)
    assert prices.read_cache() == catalogue
    path.write_text('{"version": 1, "skus": [')       # a torn file (another writer, a full disk)
    assert prices.read_cache() is None
    path.write_text(json.dumps({**catalogue.to_json(), "version": 99}))
    assert prices.read_cache() is None


def _rec(description, usage="OnDemand", service="vertex", region="us-central1", usd=1.0, unit="h", group=""):
    return domain.SkuRecord("X", description, service, "Compute", group, usage, (region,), usd, unit)


@pytest.mark.parametrize("description", [
    "Vertex AI Training on NVIDIA Tesla T4 GPU running in Americas",
    "Training on Nvidia Tesla T4 GPU running in Iowa",
    "Vertex AI: Training/Pipelines on NVIDIA-Tesla-T4 GPU",
])
def test_wording_differences_still_match(description):
    want = domain.vertex_gpu_want("NVIDIA_TESLA_T4")
    assert domain.match_sku([_rec(description)], want, "us-central1", False).description == description


@pytest.mark.parametrize("description, version", [
    ("TpuV5e running in Americas", "v5e"), ("TPU v5 lite running in Iowa", "v5e"),
    ("TPU v6e running in Americas", "v6e"), ("Tpu-v4 Pod running in Americas", "v4"),
])
def test_tpu_vm_descriptions_from_either_catalogue_service(description, version):
    want = domain.tpu_vm_want(version)
    assert want.matches(_rec(description, service="compute"), "us-central1", False)
    assert want.matches(_rec(description, service="tpu"), "us-central1", False)
    assert not want.matches(_rec(description, service="vertex"), "us-central1", False)
    assert not want.matches(_rec(description, service="compute"), "europe-west4", False)   # service regions


def test_structured_fields_decide_spot_usage_and_unit():
    want = domain.vertex_gpu_want("NVIDIA_TESLA_T4")
    text = "Vertex AI Training on NVIDIA Tesla T4 GPU"
    spot = _rec(text, usage="Preemptible")
    assert want.matches(spot, "us-central1", True) and not want.matches(spot, "us-central1", False)
    # Preemptible Cloud TPUs: usage type OnDemand, "Preemptible" in the description (fetch_gcp.py).
    assert _rec("Preemptible TpuV5e", service="compute").spot
    assert not want.matches(_rec(text, usage="Commit1Yr"), "us-central1", False)          # commitments
    assert not domain.tpu_vm_want("v5e").matches(_rec("TpuV5e", service="compute", group="TPU", usage="Commit3Yr"),
                                                  "us-central1", False)
    with pytest.raises(DomainError, match=r"priced per 'GiBy.h', expected 'h'"):
        domain.match_sku([_rec(text, unit="GiBy.h")], want, "us-central1", False)
    # A T4 want never takes an A100 or a TPU SKU; an A100 want never the 80GB one.
    assert not want.matches(_rec("Vertex AI Training on NVIDIA Tesla A100 GPU"), "us-central1", False)
    a100 = domain.vertex_gpu_want("NVIDIA_TESLA_A100")
    assert not a100.matches(_rec("Vertex AI Training on NVIDIA A100 80GB GPU"), "us-central1", False)
    assert domain.vertex_gpu_want("NVIDIA_A100_80GB").matches(_rec("Vertex AI Training on NVIDIA A100 80GB GPU"),
                                                              "us-central1", False)


def test_a_sku_matching_twice_or_not_at_all_is_reported_not_averaged():
    want = domain.vertex_gpu_want("NVIDIA_TESLA_T4")
    twice = [_rec("Vertex AI Training on NVIDIA Tesla T4 GPU", usd=0.40),
             _rec("Vertex AI Training on Nvidia T4 GPU (new)", usd=0.50)]
    with pytest.raises(DomainError, match=r"^2 on-demand SKUs match NVIDIA_TESLA_T4 in us-central1 \(not averaged: "
                                          r"X 'Vertex AI Training on NVIDIA Tesla T4 GPU' \$0\.4; X .* \$0\.5\)"):
        domain.match_sku(twice, want, "us-central1", False)
    with pytest.raises(DomainError, match=r"^no Spot SKU for NVIDIA_TESLA_T4 in us-central1 in the Cloud Billing"):
        domain.match_sku(twice, want, "us-central1", True)


def test_a_duplicated_sku_in_the_catalogue_leaves_the_estimate_unknown_and_budget_refuses(catalog, outputs_file):
    skus = default_skus()
    skus[VERTEX].append(sku(VERTEX, 999, "Vertex AI Training on Nvidia Tesla T4 GPU running in Iowa", "OnDemand",
                            "us-central1", 0.45))
    catalog(skus=skus)
    assert invoke(["prices", "refresh"]).exit_code == 0
    args = ["train", "--target", "vertex", "--dry-run", "--outputs", outputs_file, "-a", "gpu-t4"]
    shown = invoke(args)
    assert shown.exit_code == 0, shown.stderr
    assert "total: unknown: 2 on-demand SKUs match NVIDIA_TESLA_T4 in us-central1 (not averaged" in shown.stderr
    refused = invoke([*args, "--budget", "100"])
    assert refused.exit_code == 2 and refused.stdout == ""
    assert "error: cannot check --budget $100.00: 2 on-demand SKUs match NVIDIA_TESLA_T4" in refused.stderr


def test_show_prints_the_breakdown_with_source_and_date(default_catalog):
    assert invoke(["prices", "refresh"]).exit_code == 0
    vertex = invoke(["prices", "show", "-a", "gpu-t4", "--region", "europe-west4"])
    assert vertex.exit_code == 0, vertex.stderr
    lines = vertex.stdout.splitlines()
    assert lines[0] == "gpu-t4 on n1-standard-8 (one Vertex AI training replica), europe-west4, on-demand:"
    assert lines[1].startswith("  8 vCPU: 8 × $0.044/vCPU-hour = $0.3520/h   [")
    assert lines[2].startswith("  30 GiB RAM: 30 × $0.0055/GiB-hour = $0.1650/h   [")
    assert lines[3].startswith("  1 × NVIDIA_TESLA_T4: 1 × $0.44/GPU-hour = $0.4400/h   [")
    assert lines[4] == "  total: $0.9570/h"
    assert lines[5].startswith("source: Cloud Billing Catalog (127.0.0.1:") and "fetched 20" in lines[5]
    slice_ = invoke(["prices", "show", "-a", "v5litepod-4", "--spot"])
    assert slice_.exit_code == 0, slice_.stderr
    assert "  total: $1.2000/h" in slice_.stdout.splitlines()    # 4 chips × $0.30 Preemptible TpuV5e
    assert "[" + "000E-6F81-0026 Preemptible TpuV5e running in Americas]" in slice_.stdout


@pytest.mark.parametrize("args, message", [
    (["-a", "gpu-z9"], "unknown GPU type 'z9'"),
    (["-a", "v5litepod-3", "--target", "tpu-vm"], "unknown TPU VM accelerator type 'v5litepod-3'"),
    (["-a", "gpu-t4", "--region", "mars-central1"], "is not a Google Cloud region"),
    # H100 hosts have a shape (a3-highgpu-1g: 26 vCPU, 234 GiB) but the stand-in sells no Vertex A3 SKU.
    (["-a", "gpu-h100"], "no on-demand SKU for A3 vCPU in us-central1 in the Cloud Billing catalogue"),
    # A2 Ultra's host SKU wording is unverified: A2 High's "A2 Instance Core" is not taken for it.
    (["-a", "gpu-a100-80gb"], "no on-demand SKU for A2 Ultra vCPU in us-central1"),
])
def test_show_refuses_in_one_line(args, message, default_catalog):
    result = invoke(["prices", "show", *args])
    assert result.exit_code == 2
    [line] = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert message in line
