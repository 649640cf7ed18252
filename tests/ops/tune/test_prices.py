"""The estimate's arithmetic on catalogue prices (tests/fixtures/billingfakes.py: invented round numbers in Google's
SKU shape), what a missing price says, --budget refusing a job whose maximum is above it, and `tpuctl tune --dry-run`
with the stand-in catalogue."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ground.errors import UserError
from tpuctl.services.runs import cost, targets

from billingfakes import FakeCatalog, fake_prices
from clifixtures import error_line, invoke
from httpfakes import fake_factory

#: n1-standard-4 (4 vCPU, 15 GiB) in us-central1 on the stand-in catalogue: 4 × 0.04 + 15 × 0.005.
N1_4 = 4 * 0.04 + 15 * 0.005            # 0.235
N1_4_SPOT = 4 * 0.012 + 15 * 0.0015     # 0.0705
CPU_POOL = {"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1}


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    """No cache, no credentials, no catalogue endpoint unless a test starts one."""
    monkeypatch.setenv("TPUCTL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "none.json"))
    monkeypatch.delenv("TPUCTL_CLOUDBILLING_ENDPOINT", raising=False)
    monkeypatch.delenv("TPUCTL_CLOUDQUOTAS_ENDPOINT", raising=False)


@pytest.fixture
def catalog(monkeypatch):
    with fake_factory(FakeCatalog, monkeypatch, ["TPUCTL_CLOUDBILLING_ENDPOINT"]) as make:
        yield make


def test_pool_arithmetic_machine_times_replicas_times_run_time():
    prices = fake_prices()
    pools = [CPU_POOL, {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "3"}]
    est = cost.estimate_pools(pools, "us-central1", max_run_time=timedelta(hours=2), prices=prices)
    assert [p.hourly for p in est.pools] == [pytest.approx(N1_4), pytest.approx(3 * N1_4)]
    assert est.hourly == pytest.approx(4 * N1_4)
    assert est.maximum == pytest.approx(4 * N1_4 * 2)
    assert "Cloud Billing Catalog (fake catalogue)" in est.lines()[0] and "2026-11-24 12:00 UTC" in est.lines()[0]
    # No --max-run-time: Vertex AI's default timeout, 7 days, bounds the maximum.
    week = cost.estimate_pools(pools[:1], "us-central1", prices=prices)
    assert week.maximum == pytest.approx(N1_4 * 24 * 7)
    # A tuning study: every trial may run the whole timeout.
    study = cost.estimate_pools(pools[:1], "us-central1", max_run_time=timedelta(hours=1), trials=4, prices=prices)
    assert study.maximum == pytest.approx(4 * N1_4)
    assert "maximum for 1h: $0.94" in study.lines()[-1]
    assert "4 vCPU $0.1600" in study.lines()[1] and "15 GiB RAM $0.0750" in study.lines()[1]


def test_spot_uses_the_spot_skus_and_a_missing_one_is_bounded_by_on_demand_and_says_so():
    spot = cost.estimate_pools([CPU_POOL], "us-central1", spot=True, max_run_time=timedelta(hours=1),
                                   prices=fake_prices())
    assert not spot.bound_only and spot.maximum == pytest.approx(N1_4_SPOT)
    from billingfakes import VERTEX, default_skus

    skus = default_skus()
    skus[VERTEX] = [s for s in skus[VERTEX] if s["category"]["usageType"] != "Preemptible"]
    bound = cost.estimate_pools([CPU_POOL], "us-central1", spot=True, max_run_time=timedelta(hours=1),
                                    prices=fake_prices(skus))
    assert bound.bound_only and bound.maximum == pytest.approx(N1_4)
    text = "\n".join(bound.lines())
    assert "$0.2350/h" in text and "on-demand" in text and "upper bound" in text, text


def test_a_missing_price_is_named_with_the_refresh_command_never_guessed():
    from ground import domain
    from tpuctl.services.prices import Prices

    offline = Prices(None, domain.load_snapshot())
    pools = [{"machine_spec": {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4",
                               "accelerator_count": 1}, "replica_count": 1}]
    est = cost.estimate_pools(pools, "us-central1", prices=offline)
    assert est.hourly is None and est.maximum is None and est.pools[0].hourly is None
    # unknown: what has no price where, why (nothing cached; the snapshot is TPU VM prices only), the fix
    total = est.lines()[-1]
    assert total.startswith("  total: unknown") and "n1-standard-8 + 1 × NVIDIA_TESLA_T4" in total, total
    assert "us-central1" in total, total
    assert "not cached" in total and "snapshot" in total and total.endswith("`tpuctl prices refresh`"), total
    # With the catalogue: a region it has no SKU for is named.
    far = cost.estimate_pools(pools, "asia-east1", prices=fake_prices())
    [missing] = far.missing
    assert "on-demand SKU" in missing and "N1 vCPU" in missing and "asia-east1" in missing, missing


def test_budget_refuses_a_maximum_above_it_and_an_unknown_maximum():
    prices = fake_prices()
    pools = [{"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 2}]
    est = cost.estimate_pools(pools, "us-central1", max_run_time=timedelta(hours=10), prices=prices)
    cost.check_budget(est, 5.0)          # 2 × 0.235 × 10 = 4.70
    with pytest.raises(UserError, match=r"\$4\.70\b.*--budget \$4\.00\b"):
        cost.check_budget(est, 4.0)
    unknown = cost.estimate_pools(pools, "asia-east1", prices=prices)
    with pytest.raises(UserError, match=r"--budget \$100\.00\b.*\bN1 vCPU\b.*\basia-east1\b"):
        cost.check_budget(unknown, 100.0)
    for bad in (0.0, -1.0, float("nan"), float("inf"), 1e7):      # the flag's own bounds, checked with the flags
        with pytest.raises(UserError, match="--budget"):
            targets.request("train", {"target": "vertex", "budget": bad})


def test_tune_dry_run_prints_the_estimate_and_budget_refuses_in_one_line(outputs_file, catalog):
    catalog()   # a dry run with no cache refreshes from the (stand-in) catalogue first
    ok = invoke(["tune", "--target", "vertex", "--outputs", outputs_file, "--dry-run", "--max-run-time", "1h", "--trials", "4"])
    assert ok.exit_code == 0, ok.stderr
    [total] = [line for line in ok.stderr.splitlines() if line.startswith("  total: ")]
    assert "$0.2350/h" in total and "4 trials" in total and "1h" in total and total.endswith("$0.94"), total
    refused = invoke(["tune", "--target", "vertex", "--outputs", outputs_file, "--dry-run", "--max-run-time", "1h", "--trials", "4",
                      "--budget", "0.5"])
    line = error_line(refused, 2)
    # the maximum and how it is made, the budget it is above; the fixes: the flags that lower it or raise the budget
    assert "$0.94" in line and "$0.2350/h × 4 trials" in line and "--budget $0.50" in line, line
    assert "--max-run-time" in line and "--workers" in line and "trial count" in line, line
    assert refused.stdout == ""   # nothing printed as the request


def test_offline_tune_is_a_note_without_budget_and_an_error_with_it(outputs_file):
    ok = invoke(["tune", "--target", "vertex", "--outputs", outputs_file, "--dry-run"])
    assert ok.exit_code == 0, ok.stderr
    [total] = [line for line in ok.stderr.splitlines() if line.startswith("  total: unknown")]
    assert "Vertex AI training price" in total and "n1-standard-4 in us-central1" in total, total
    refused = invoke(["tune", "--target", "vertex", "--outputs", outputs_file, "--dry-run", "--budget", "10"])
    line = error_line(refused, 2)
    assert "--budget $10.00" in line and "Vertex AI training price" in line, line
    assert "`tpuctl prices refresh`" in line, line
