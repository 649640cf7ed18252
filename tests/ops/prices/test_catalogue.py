"""`tpuctl prices refresh|show` through the real CloudCatalogClient against the stand-in catalogue: services found by
display name, pages followed, only the SKUs tpuctl can use cached (dated, atomically); SKU matching by structured
fields and description words, a SKU matching twice or not at all reported, never averaged."""

from __future__ import annotations

import json
import os

import pytest

from ground import domain
from ground.errors import DomainError
from tpuctl.services import prices

from billingfakes import COMPUTE, SERVICES, TPU, VERTEX, default_skus, fake_prices, sku
from clifixtures import error_line, invoke


def test_refresh_finds_services_by_name_follows_pages_and_keeps_only_what_tpuctl_prices(catalog):
    # Other ids than the public examples: an id that is not listed is looked up by its service's display name.
    ids = {VERTEX: "AAAA-0000-0001", COMPUTE: "AAAA-0000-0002", TPU: "AAAA-0000-0003"}
    skus = {ids.get(k, k): v for k, v in default_skus().items()}
    fake = catalog(skus=skus, services={ids.get(k, k): name for k, name in SERVICES.items()}, page=5)
    result = invoke(["prices", "refresh"])
    assert result.exit_code == 0, result.stderr
    assert "48 SKUs" in result.stdout and "Cloud Billing Catalog (127.0.0.1:" in result.stdout, result.stdout
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


def test_a_renamed_service_is_found_by_its_id(catalog):
    """Google renames products (Vertex AI's pages now sit under another name): the service id stays."""
    names = dict(SERVICES)
    names[VERTEX] = "Gemini Enterprise Agent Platform"
    catalog(services=names)
    result = invoke(["prices", "refresh"])
    assert result.exit_code == 0, result.output
    assert any(s["service"] == "vertex" for s in json.loads(prices.cache_path().read_text())["skus"])


def test_a_service_gone_by_id_and_name_is_one_line_and_no_cache_is_written(catalog):
    names = {sid: name for sid, name in SERVICES.items() if sid != TPU}
    names["FFFF-0000-1111"] = "Cloud TPUs"
    catalog(services=names)
    result = invoke(["prices", "refresh"])
    line = error_line(result, 1, alone=True)
    assert TPU in line and "'Cloud TPU'" in line and "4 services" in line and "report" in line, line
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


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "huge"])
def test_a_cache_that_is_a_fifo_a_device_or_huge_is_never_waited_on_or_read_whole(kind, monkeypatch):
    """Issue 43's hostile trial: a FIFO as the cache hung every estimate; a link to /dev/zero read until the machine
    killed it (24 GiB)."""
    import os
    import threading

    path = prices.cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        monkeypatch.setattr(prices, "MAX_CACHE_BYTES", 1000)
        path.write_text(json.dumps(fake_prices().catalogue.to_json()) + " " * 2000)
    got = []
    reader = threading.Thread(target=lambda: got.append(prices.read_cache()), daemon=True)
    reader.start()
    reader.join(30)
    if reader.is_alive() and kind == "fifo":      # the old reader blocks in open(): let it go before failing
        with open(path, "w"):
            pass
    assert got == [None], f"read_cache() did not return for a {kind} cache"


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
    t4, t4_new = "Vertex AI Training on NVIDIA Tesla T4 GPU", "Vertex AI Training on Nvidia T4 GPU (new)"
    twice = [_rec(t4, usd=0.40), _rec(t4_new, usd=0.50)]
    with pytest.raises(DomainError) as err:
        domain.match_sku(twice, want, "us-central1", False)
    msg = str(err.value)     # how many matched what where, and each of them with its price: not averaged
    assert msg.startswith("2 on-demand SKUs") and "NVIDIA_TESLA_T4" in msg and "us-central1" in msg, msg
    assert "not averaged" in msg and f"'{t4}' $0.4" in msg and f"'{t4_new}' $0.5" in msg, msg
    with pytest.raises(DomainError, match=r"^no Spot SKU\b.*\bNVIDIA_TESLA_T4\b.*\bus-central1\b"):
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
    [total] = [line for line in shown.stderr.splitlines() if line.startswith("  total: unknown")]
    assert "2 on-demand SKUs" in total and "NVIDIA_TESLA_T4 in us-central1" in total and "not averaged" in total
    refused = invoke([*args, "--budget", "100"])
    assert refused.stdout == ""
    line = error_line(refused, 2)
    assert "--budget $100.00" in line and "2 on-demand SKUs" in line and "NVIDIA_TESLA_T4" in line, line


def test_show_prints_the_breakdown_with_source_and_date(default_catalog):
    assert invoke(["prices", "refresh"]).exit_code == 0
    vertex = invoke(["prices", "show", "-a", "gpu-t4", "--region", "europe-west4"])
    assert vertex.exit_code == 0, vertex.stderr
    lines = vertex.stdout.splitlines()
    # what is priced (accelerator, host, one Vertex AI replica, region, on-demand), then each part: quantity × unit
    # price = hourly, with its SKU; then the total
    head = lines[0]
    assert head.startswith("gpu-t4 on n1-standard-8 ") and "Vertex AI" in head and "replica" in head, head
    assert "europe-west4" in head and "on-demand" in head, head
    for line, part, product, hourly in [(lines[1], "8 vCPU", "8 × $0.044/vCPU-hour", "$0.3520/h"),
                                        (lines[2], "30 GiB RAM", "30 × $0.0055/GiB-hour", "$0.1650/h"),
                                        (lines[3], "1 × NVIDIA_TESLA_T4", "1 × $0.44/GPU-hour", "$0.4400/h")]:
        assert line.startswith(f"  {part}: ") and product in line and hourly in line and "[" in line, line
    assert lines[4] == "  total: $0.9570/h"
    assert lines[5].startswith("source: Cloud Billing Catalog (127.0.0.1:") and "fetched 20" in lines[5]
    slice_ = invoke(["prices", "show", "-a", "v5litepod-4", "--spot"])
    assert slice_.exit_code == 0, slice_.stderr
    assert "  total: $1.2000/h" in slice_.stdout.splitlines()    # 4 chips × $0.30 Preemptible TpuV5e
    assert "[" + "000E-6F81-0026 Preemptible TpuV5e running in Americas]" in slice_.stdout


def test_a_vertex_tpu_v6e_sku_is_kept_by_refresh_and_prices_every_chip_of_the_replica(catalog):
    # A Vertex AI training SKU for TPU v6e, worded as the stand-in's v5e one (no real one was read: prices.py's
    # docstring); its price is invented. tpu-v6e-8 is one VM of 8 chips, tpu-v6e-16 one replica of 4 VMs, 16 chips.
    skus = default_skus()
    skus[VERTEX].append(sku(VERTEX, 998, "Vertex AI Training on TPU v6e running in Americas", "OnDemand",
                            "us-central1", 2.5))
    catalog(skus=skus)
    assert invoke(["prices", "refresh"]).exit_code == 0
    assert "Vertex AI Training on TPU v6e running in Americas" in {s.description for s in prices.read_cache().skus}
    for name, chips in (("tpu-v6e-8", 8), ("tpu-v6e-16", 16)):
        shown = invoke(["prices", "show", "-a", name])                 # a Vertex-style name: the Vertex AI price
        assert shown.exit_code == 0, shown.stderr
        head, part, total = shown.stdout.splitlines()[:3]
        assert head.startswith(f"{name} on ct6e-standard-") and "Vertex AI training replica" in head, head
        assert part.startswith(f"  {chips} chips of TPU v6e: {chips} × $2.5/chip-hour"), part
        assert total == f"  total: ${chips * 2.5:.4f}/h"


@pytest.mark.parametrize("args, keys", [
    (["-a", "gpu-z9"], ("GPU type", "'z9'")),
    (["-a", "v5litepod-3", "--target", "tpu-vm"], ("TPU VM accelerator type", "'v5litepod-3'")),
    (["-a", "gpu-t4", "--region", "mars-central1"], ("region 'mars-central1'",)),
    # TPU v6e is a Vertex AI slice, but the stand-in (like every catalogue read here) sells no Vertex AI v6e SKU: the
    # price is refused naming the SKU that is missing, not borrowed from the Compute Engine TPU VM price.
    (["-a", "tpu-v6e-8", "--target", "vertex"], ("no on-demand SKU", "TPU v6e", "us-central1",
                                                  "Cloud Billing catalogue")),
    # H100 hosts have a shape (a3-highgpu-1g: 26 vCPU, 234 GiB) but the stand-in sells no Vertex A3 SKU.
    (["-a", "gpu-h100"], ("no on-demand SKU", "A3 vCPU", "us-central1", "Cloud Billing catalogue")),
    # A2 Ultra's host SKU wording is unverified: A2 High's "A2 Instance Core" is not taken for it.
    (["-a", "gpu-a100-80gb"], ("no on-demand SKU", "A2 Ultra vCPU", "us-central1")),
])
def test_show_refuses_in_one_line(args, keys, default_catalog):
    line = error_line(invoke(["prices", "show", *args]), 2)
    assert all(key in line for key in keys), (keys, line)


def test_a_catalogue_that_pages_in_a_circle_is_one_line_and_nothing_is_cached(catalog):
    """Issue 43's hostile trial: an endpoint repeating its nextPageToken hung `prices refresh`."""
    catalog(stuck_token="again")
    result = invoke(["prices", "refresh"])
    line = error_line(result, 1, alone=True)
    assert "repeated a page token" in line and "/skus" in line, line
    assert not prices.cache_path().exists()


@pytest.mark.parametrize("usd", [-0.44, -5.0, 1e12])
def test_a_bad_sku_price_from_the_catalogue_is_one_line_naming_the_sku_and_nothing_is_cached(catalog, usd):
    """Issue 43's hostile trial: a negative SKU price made `--budget` unable to stop a run (the spend went down)."""
    skus = default_skus()
    bad = sku(VERTEX, 999, "Vertex AI Training on NVIDIA Tesla T4 GPU running in Americas", "OnDemand",
              "us-central1", usd)
    skus[VERTEX] = [s for s in skus[VERTEX] if s["description"] != bad["description"]] + [bad]
    catalog(skus=skus)
    line = error_line(invoke(["prices", "refresh"]), 1, alone=True)
    assert bad["skuId"] in line and "bad price" in line, line
    assert not prices.cache_path().exists()


@pytest.mark.parametrize("usd", [float("nan"), float("inf"), -0.5, 1e12])
def test_a_cached_price_outside_the_bounds_makes_the_cache_unusable(default_catalog, outputs_file, usd):
    """A price read back from disk has the bound it was fetched with: the estimate never uses it (a NaN made every
    budget comparison false, a negative one made the spend go down)."""
    assert invoke(["prices", "refresh"]).exit_code == 0
    path = prices.cache_path()
    doc = json.loads(path.read_text())
    [t4] = [s for s in doc["skus"] if s["description"] == "Vertex AI Training on NVIDIA Tesla T4 GPU running in Americas"]
    t4["usd"] = usd
    path.write_text(json.dumps(doc))
    assert prices.read_cache() is None
    shown = invoke(["train", "--target", "vertex", "--dry-run", "--outputs", outputs_file, "-a", "gpu-t4"])
    assert shown.exit_code == 0, shown.stderr
    assert "$-" not in shown.stderr and "nan" not in shown.stderr.lower(), shown.stderr


def test_a_sku_description_reaches_the_terminal_without_its_escape_sequences(catalog):
    """One sanitiser for every string that reaches a terminal (issue 43): a SKU's description is the API's text."""
    skus = default_skus()
    for raw in skus[VERTEX]:
        if raw["description"] == "Vertex AI Training on NVIDIA Tesla T4 GPU running in Americas":
            raw["description"] = "\x1b]0;evil\x07\x1b[2J" + raw["description"] + " [/x]"
    catalog(skus=skus)
    assert invoke(["prices", "refresh"]).exit_code == 0
    shown = invoke(["prices", "show", "-a", "gpu-t4"])
    assert shown.exit_code == 0, shown.stderr
    [t4] = [line for line in shown.stdout.splitlines() if "NVIDIA_TESLA_T4" in line]
    assert "Tesla T4 GPU running in Americas [/x]]" in t4 and "\x1b" not in shown.stdout and "\x07" not in t4, t4


def test_a_run_priced_at_zero_cannot_be_held_to_a_budget(catalog, outputs_file):
    """A price of 0 is a price, but a spend that never grows never reaches --budget (issue 43's hostile class: a
    price that makes --budget unable to stop a run): one line, nothing launched."""
    skus = default_skus()
    for raw in skus[VERTEX]:
        if raw["category"]["resourceGroup"] == "" and "Americas" in raw["description"] and "Spot" not in raw["description"]:
            raw["pricingInfo"][0]["pricingExpression"]["tieredRates"][0]["unitPrice"] = {
                "currencyCode": "USD", "units": "0", "nanos": 0}
    catalog(skus=skus)
    assert invoke(["prices", "refresh"]).exit_code == 0
    refused = invoke(["train", "--target", "vertex", "--dry-run", "--outputs", outputs_file, "-a", "gpu-t4",
                      "--budget", "100"])
    line = error_line(refused, 2)
    assert "--budget $100.00" in line and "costs $0.00" in line, line


@pytest.mark.parametrize("cache", [
    "[]",                                                                  # old: AttributeError traceback
    '{"version": 1}',
    '{"version": 1, "fetched": "2026-12-01T00:00:00+00:00", "endpoint": "x", "skus": {"a": 1}}',
    '{"version": 1, "fetched": "2026-12-01T00:00:00+00:00", "endpoint": "x", "skus": [{"sku_id": 1, '
    '"description": ["a"], "service": "vertex", "resource_family": "x", "resource_group": "x", "usage_type": '
    '"OnDemand", "regions": "us-central1", "usd": 1, "unit": "h"}]}',      # old: accepted, regions read letter by letter
    '{"version": 1, "fetched": "2026-12-01T00:00:00", "endpoint": "x", "skus": []}',
    '{"version": 1, "fetched": "2026-12-01T00:00:00+00:00", "endpoint": {"a": 1}, "skus": []}',   # old: accepted
    "[" * 100_000,
])
def test_a_cache_of_another_shape_is_never_used_and_said(cache):
    """Every file tpuctl reads back is validated by shape before use (issue 56, class 7): the estimate goes on
    without the cache, and says why it did not use it."""
    path = prices.cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(cache)
    result = invoke(["prices", "show", "-a", "gpu-t4"])
    assert "Traceback" not in result.output and result.exit_code == 2, result.output
    assert f"the prices cache {path} is not usable" in result.stderr, result.stderr
    assert "cached in a file that is not usable" in result.stderr.splitlines()[-1], result.stderr


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_cache_that_is_no_file_is_said_once(kind):
    """A folder or a FIFO where the cache goes: one note naming it and the remedy once (a fresh trial found "writes
    it again" twice in one line), and the estimate goes on without it."""
    path = prices.cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.mkdir() if kind == "folder" else os.mkfifo(path)
    result = invoke(["prices", "show", "-a", "gpu-t4"])
    assert "Traceback" not in result.output, result.output
    assert str(path) in result.stderr and result.stderr.count("writes it again") == 1, result.stderr
