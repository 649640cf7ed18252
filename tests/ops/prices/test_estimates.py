"""What issue 30 must show: offline, a TPU VM dry run prices the slice from the shipped snapshot (source and date)
and --budget bounds its spend (issue 31: said, not refused, when the maximum is above it); with the stand-in catalogue, Vertex AI GPU and TPU estimates for two regions and Spot
match figures computed by hand; an unreachable catalogue never holds a dry run up for more than a few seconds.
Also the --max-run-time bounds (issues 26 and 27)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from tpuctl.services import prices
from tpuctl.services.runs import cost as cloudrun

from billingfakes import fake_prices
from clifixtures import error_line, invoke

SNAPSHOT = ("SkyPilot catalogue snapshot (skypilot-org/skypilot-catalog catalogs/v7/gcp/vms.csv at commit "
            "017e2502fb63, read 2026-11-24)")


def _errors(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def _line(text: str, start: str, *keys: str) -> str:
    """The one line of ``text`` that starts with ``start`` (a label of the estimate: ``  total:``, ``note:``) and
    holds every key (to pick one of several notes)."""
    lines = [line for line in text.splitlines() if line.startswith(start) and all(k in line for k in keys)]
    assert len(lines) == 1, text
    return lines[0]


def test_offline_tpu_vm_dry_run_prices_the_slice_from_the_snapshot_and_budget_bounds_the_spend(outputs_file):
    base = ["train", "--target", "tpu-vm", "-a", "v5litepod-8", "--zone", "us-central1-a", "--outputs", outputs_file, "--dry-run"]
    shown = invoke(base)
    assert shown.exit_code == 0, shown.stderr
    head = _line(shown.stderr, "cost estimate")     # what is priced where, from which source (name and date)
    assert "TPU VM" in head and "on-demand" in head and "us-central1" in head and SNAPSHOT in head, head
    assert "list prices" in head, head
    # Hand-computed: 8 chips × $1.20 per chip-hour (tpu-v5litepod-1 us-central1 Price 1.2; -8: 9.6), 24 h.
    assert _line(shown.stderr, "  slice v5litepod-8: ").endswith("$9.6000/h = 8 × $1.2/chip-hour")
    total = _line(shown.stderr, "  total: ")
    assert "$9.6000/h" in total and "--max-run-time 1d" in total and total.endswith("$230.40"), total
    assert shown.stdout.startswith("{")                              # the request still printed
    # A TPU VM run's spend is counted while it goes (tpuvm.spend): a maximum above --budget is said, not refused:
    # $230 at $9.60/h is 23h57m30s of slice time (23h58m).
    bounded = invoke([*base, "--budget", "230"])
    assert bounded.exit_code == 0 and bounded.stdout.startswith("{"), bounded.stderr
    note = _line(bounded.stderr, "note: ", "--budget $230.00")
    assert "23h58m" in note and "$9.6000/h" in note, note
    # Spot, a shorter run, the same through `train --target tpu-vm`: 8 × $0.21298 × 10 h = $17.04.
    spot = invoke([*base, "--spot", "--max-run-time", "36000s", "--budget", "17.05"])
    assert spot.exit_code == 0, spot.stderr
    total = _line(spot.stderr, "  total: ")
    assert "$1.7038/h" in total and "--max-run-time 10h" in total and total.endswith("$17.04"), total
    assert not [line for line in spot.stderr.splitlines() if "--budget" in line]   # within the budget: nothing to say
    train = invoke(["train", "--target", "tpu-vm", "-a", "v5litepod-8", "--zone", "us-central1-a", "--outputs",
                    outputs_file, "--dry-run", "--budget", "200"])
    assert train.exit_code == 0, train.stderr
    assert "20h50m" in _line(train.stderr, "note: ", "--budget $200.00")
    # --max-run-time bounds a TPU VM run's training time in all: 8 × $1.20 × 2 h = $19.20.
    bounded = invoke(["train", "--target", "tpu-vm", "-a", "v5litepod-8", "--zone", "us-central1-a", "--outputs",
                      outputs_file, "--dry-run", "--max-run-time", "2h"])
    assert bounded.exit_code == 0, bounded.stderr
    total = _line(bounded.stderr, "  total: ")
    assert "$9.6000/h" in total and "--max-run-time 2h" in total and total.endswith("$19.20"), total
    kept = invoke([*base, "--keep", "--budget", "1000"])
    line = error_line(kept, 2)
    assert "--budget" in line and "--keep" in line and "`tpuctl tpu delete`" in line, line


def test_offline_snapshot_gap_is_unknown_with_the_refresh_command(outputs_file):
    base = ["train", "--target", "tpu-vm", "-a", "v6e-8", "--zone", "southamerica-east1-c", "--outputs", outputs_file, "--dry-run"]
    shown = invoke(base)
    assert shown.exit_code == 0, shown.stderr
    # unknown, what has no price where, the regions the snapshot has (the first of them), the command that fixes it
    total = _line(shown.stderr, "  total: unknown")
    assert "on-demand TPU v6e" in total and "southamerica-east1" in total and "snapshot" in total, total
    assert "asia-northeast1" in total and "`tpuctl prices refresh`" in total, total
    refused = invoke([*base, "--budget", "50"])
    line = error_line(refused, 2)
    assert "--budget $50.00" in line and "on-demand TPU v6e" in line, line


# Hand-computed from billingfakes.TEST_PRICES (per hour): one replica of
#   gpu-t4    = n1-standard-8 (8 vCPU, 30 GiB) + 1 T4:  8 × cpu + 30 × ram + t4
#   tpu-v5e-4 = ct5lp-hightpu-4t: 4 chips × tpu-v5e
#   tpu-v2-8  = cloud-tpu + TPU_V2 × 8 cores: one 4-chip device × tpu-v2
#   gpu-l4    = g2-standard-8 (8 vCPU, 32 GiB: vms.csv row) + 1 L4:    8 × g2-cpu + 32 × g2-ram + l4
#   gpu-a100  = a2-highgpu-1g (12 vCPU, 85 GiB: vms.csv row) + 1 A100: 12 × a2-cpu + 85 × a2-ram + a100
HAND = {
    ("gpu-l4", "us-central1", False): 8 * 0.03 + 32 * 0.004 + 0.60,               # 0.968
    ("gpu-l4", "europe-west4", False): 8 * 0.033 + 32 * 0.0044 + 0.66,            # 1.0648
    ("gpu-l4", "us-central1", True): 8 * 0.01 + 32 * 0.0012 + 0.20,               # 0.3184
    ("gpu-l4", "europe-west4", True): 8 * 0.011 + 32 * 0.00132 + 0.22,            # 0.35024
    ("gpu-a100", "us-central1", False): 12 * 0.035 + 85 * 0.0045 + 2.90,          # 3.7025
    ("gpu-a100", "europe-west4", False): 12 * 0.0385 + 85 * 0.00495 + 3.19,       # 4.07275
    ("gpu-a100", "us-central1", True): 12 * 0.011 + 85 * 0.0014 + 1.00,           # 1.251
    ("gpu-a100", "europe-west4", True): 12 * 0.0121 + 85 * 0.00154 + 1.10,        # 1.3761
    ("gpu-t4", "us-central1", False): 8 * 0.04 + 30 * 0.005 + 0.40,              # 0.870
    ("gpu-t4", "europe-west4", False): 8 * 0.044 + 30 * 0.0055 + 0.44,           # 0.957
    ("gpu-t4", "us-central1", True): 8 * 0.012 + 30 * 0.0015 + 0.14,            # 0.281
    ("gpu-t4", "europe-west4", True): 8 * 0.0132 + 30 * 0.00165 + 0.154,         # 0.3091
    ("tpu-v5e-4", "us-central1", False): 4 * 1.40,
    ("tpu-v5e-4", "europe-west4", False): 4 * 1.54,
    ("tpu-v5e-4", "us-central1", True): 4 * 0.50,
    ("tpu-v5e-4", "europe-west4", True): 4 * 0.55,
    ("tpu-v2-8", "us-central1", False): 4.00,
    ("tpu-v2-8", "europe-west4", True): 1.32,
}


@pytest.mark.parametrize("accelerator, region, spot", list(HAND))
def test_vertex_estimates_match_hand_computed_figures(accelerator, region, spot):
    from ground import domain
    from tpuctl.services.runs.vertex import machine_spec

    pool = {"machine_spec": machine_spec(domain.parse_accelerator(accelerator)), "replica_count": 2}
    est = cloudrun.estimate_pools([pool], region, spot=spot, max_run_time=timedelta(hours=3), prices=fake_prices())
    assert not est.missing and not est.bound_only
    assert est.hourly == pytest.approx(2 * HAND[accelerator, region, spot])
    assert est.maximum == pytest.approx(2 * HAND[accelerator, region, spot] * 3)


@pytest.mark.parametrize("accelerator, region, spot, hourly, maximum", [
    ("gpu-t4", "europe-west4", False, "$0.9570/h", "$1.91"),
    ("gpu-t4", "us-central1", True, "$0.2810/h", "$0.56"),
    ("tpu-v5e-4", "us-central1", True, "$2.0000/h", "$4.00"),
    # a replica of several TPU VMs is priced for all its chips (16 v5e chips; a v2 Pod of 32 cores = 4 × 8 cores)
    ("tpu-v5e-16", "us-central1", False, "$22.4000/h", "$44.80"),
    ("tpu-v2-32", "us-central1", False, "$16.0000/h", "$32.00"),
    ("gpu-l4", "europe-west4", True, "$0.3502/h", "$0.70"),
    ("gpu-a100", "europe-west4", True, "$1.3761/h", "$2.75"),
])
def test_vertex_dry_run_refreshes_from_the_catalogue_and_names_it(default_catalog, outputs_file, accelerator, region,
                                                                  spot, hourly, maximum, monkeypatch):
    # what is tested is the refresh and its figures; the wait's bound has its own test (below): on a loaded machine
    # the fake catalogue's answer took longer than the 4 s an estimate waits, and the estimate said "not cached"
    monkeypatch.setattr(prices, "REFRESH_WAIT_SECONDS", 120.0)
    args = ["train", "--target", "vertex", "--dry-run", "--outputs", outputs_file, "-a", accelerator,
            "--region", region, "--max-run-time", "2h", *(["--spot"] if spot else [])]
    result = invoke(args)
    assert result.exit_code == 0, result.stderr
    assert "; Cloud Billing Catalog (127.0.0.1:" in result.stderr
    total = _line(result.stderr, "  total: ")
    assert hourly in total and "2h" in total and total.endswith(maximum), total
    assert prices.cache_path().is_file()                 # the refresh was cached for the next estimate


def test_an_unreachable_catalogue_never_holds_a_dry_run_up(monkeypatch, outputs_file):
    from netfixtures import free_port, silent_endpoint

    monkeypatch.setattr(prices, "REFRESH_WAIT_SECONDS", 1.0)
    base = ["train", "--target", "tpu-vm", "-a", "v5litepod-8", "--zone", "us-central1-a", "--outputs", outputs_file, "--dry-run"]
    # Refused at once: a note, the snapshot's figure.
    monkeypatch.setenv("TPUCTL_CLOUDBILLING_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    refused = invoke(base)
    assert refused.exit_code == 0, refused.stderr
    assert "cannot reach" in _line(refused.stderr, "  note: ", "catalogue", "cloudbilling endpoint")
    assert "total: $9.6000/h" in refused.stderr
    # Silent (packets dropped): the estimate waits REFRESH_WAIT_SECONDS, not the client's minutes of retries.
    with silent_endpoint() as url:
        monkeypatch.setenv("TPUCTL_CLOUDBILLING_ENDPOINT", url)
        started = time.monotonic()
        silent = invoke(base)
        elapsed = time.monotonic() - started
    assert silent.exit_code == 0, silent.stderr
    assert _line(silent.stderr, "  note: ", "catalogue").endswith("1 s")
    assert "total: $9.6000/h" in silent.stderr and elapsed < 1.0 + 15   # not the client's minutes of retries


def test_the_default_wait_is_a_few_seconds():
    assert 0 < prices.REFRESH_WAIT_SECONDS <= 5


def test_a_fresh_cache_is_used_without_asking_and_a_stale_one_after_a_failed_refresh_says_its_age(
        monkeypatch, catalog):
    fake = catalog()
    old = fake_prices().catalogue            # fetched 2026-11-24 12:00 UTC
    prices.write_cache(old)
    fresh = prices.load_prices(now=old.fetched + timedelta(days=6))
    assert fresh.catalogue == old and fresh.notes == [] and fake.requests == []
    monkeypatch.setenv("TPUCTL_CLOUDBILLING_ENDPOINT", "http://127.0.0.1:9")   # nothing listens on port 9
    stale = prices.load_prices(now=old.fetched + timedelta(days=30))
    assert stale.catalogue == old
    failed, age = stale.notes
    assert "catalogue" in failed and "cannot reach" in failed, failed
    assert "30 days" in age and "`tpuctl prices refresh`" in age, age
    assert prices.read_cache() == old          # a failed refresh leaves the cache as it was


@pytest.mark.parametrize("text", ["99999999999999999999d", "9" * 400, "8d", "604801"])
def test_max_run_time_past_the_bound_is_one_line_exit_2(outputs_file, text):
    result = invoke(["train", "--target", "vertex", "--dry-run", "--outputs", outputs_file, "--max-run-time", text])
    assert result.stdout == ""
    line = error_line(result, 2)
    assert "--max-run-time" in line and "out of range" in line and "10m to 7d" in line, line


def test_a_spot_estimate_from_the_snapshot_says_its_price_is_volatile_and_on_demand_does_not(outputs_file):
    # The snapshot's Spot prices are of unknown date and another version of the catalogue differs by up to +63%
    # (issue 42): a Spot estimate from it is marked, with the command that reads today's prices.
    base = ["train", "--target", "tpu-vm", "-a", "v5litepod-8", "--zone", "us-central1-a", "--outputs", outputs_file,
            "--dry-run"]
    spot = invoke([*base, "--spot"])
    assert spot.exit_code == 0, spot.stderr
    line = _line(spot.stderr, "  slice v5litepod-8: ")
    assert "volatile" in line and "unknown date" in line and "`tpuctl prices refresh`" in line, line
    on_demand = invoke(base)
    assert on_demand.exit_code == 0 and "volatile" not in on_demand.stderr, on_demand.stderr
