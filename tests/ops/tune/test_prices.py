"""The price table: every entry is a recorded quote of Google's page; the estimate's arithmetic; what an unknown
region or machine says; --budget refuses a job whose maximum is above it."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from tpuctl.ground import domain
from tpuctl.ground.errors import DomainError, UserError
from tpuctl.services import cloudrun

from clifixtures import invoke

N1_4 = 0.21849885   # us-central1 n1-standard-4, Vertex AI custom training, as recorded in prices.PRICE_RECORDS


def test_every_table_entry_is_exactly_a_recorded_quote_and_back():
    recorded = {(r.region, r.item, r.kind): domain.quoted_usd(r.quote) for r in domain.PRICE_RECORDS}
    assert recorded == domain.TRAINING_PRICES
    for r in domain.PRICE_RECORDS:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", r.read_on) and r.read_on <= domain.PRICES_CHECKED
        assert r.read_from.startswith("https://cloud.google.com/")   # Google's page, however it was read
        assert r.kind in (domain.PRICE_ON_DEMAND, domain.PRICE_SPOT)
        assert domain.training_price(r.region, r.item, r.kind).record is r


def test_quote_parser_refuses_anything_but_the_page_format():
    assert domain.quoted_usd("$0.21849885 / 1 hour") == N1_4
    with pytest.raises(DomainError):
        domain.quoted_usd("0.2185/h")


def test_pool_arithmetic_machine_times_replicas_times_run_time():
    pools = [{"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1},
             {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "3"}]
    est = cloudrun.estimate_pools(pools, "us-central1", max_run_time=timedelta(hours=2))
    assert [p.hourly for p in est.pools] == [pytest.approx(N1_4), pytest.approx(3 * N1_4)]
    assert est.hourly == pytest.approx(4 * N1_4)
    assert est.maximum == pytest.approx(4 * N1_4 * 2)
    # No --max-run-time: Vertex AI's default timeout, 7 days, bounds the maximum.
    week = cloudrun.estimate_pools(pools[:1], "us-central1")
    assert week.maximum == pytest.approx(N1_4 * 24 * 7)
    # A tuning study: every trial may run the whole timeout.
    study = cloudrun.estimate_pools(pools[:1], "us-central1", max_run_time=timedelta(hours=1), trials=5)
    assert study.maximum == pytest.approx(5 * N1_4)
    assert "maximum for 1h: $1.09" in study.lines()[-1]


def test_spot_without_a_spot_price_is_bounded_by_on_demand_and_says_so():
    est = cloudrun.estimate_pools([{"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1}],
                                  "us-central1", spot=True, max_run_time=timedelta(hours=1))
    assert est.bound_only and est.maximum == pytest.approx(N1_4)
    text = "\n".join(est.lines())
    assert "at most $0.2185/h" in text and "on-demand used as the upper bound" in text


def test_unknown_region_and_unknown_machine_are_named_never_guessed():
    with pytest.raises(DomainError, match=r"no Vertex AI training prices for region europe-west4 .* it has us-central1"):
        domain.training_price("europe-west4", "n1-standard-4")
    with pytest.raises(DomainError, match=r"no on-demand Vertex AI training price for NVIDIA_TESLA_T4 in us-central1"):
        domain.training_price("us-central1", "NVIDIA_TESLA_T4")
    pools = [{"machine_spec": {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4",
                               "accelerator_count": 1}, "replica_count": 1}]
    est = cloudrun.estimate_pools(pools, "us-central1")
    assert est.hourly is None and est.maximum is None and len(est.missing) == 2
    assert est.pools[0].hourly is None and "total: unknown" in est.lines()[-1]


def test_budget_refuses_a_maximum_above_it_and_an_unknown_maximum():
    pools = [{"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 2}]
    est = cloudrun.estimate_pools(pools, "us-central1", max_run_time=timedelta(hours=10))
    cloudrun.check_budget(est, 5.0)          # 2 × 0.2185 × 10 = 4.37
    with pytest.raises(UserError, match=r"^the job may cost up to \$4\.37 .* above --budget \$4\.00;"):
        cloudrun.check_budget(est, 4.0)
    unknown = cloudrun.estimate_pools(pools, "europe-west4")
    with pytest.raises(UserError, match=r"cannot check --budget \$100\.00: no Vertex AI training prices for region"):
        cloudrun.check_budget(unknown, 100.0)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(UserError, match="--budget"):
            cloudrun.check_budget(est, bad)


def test_tune_dry_run_prints_the_estimate_and_budget_refuses_in_one_line(outputs_file):
    ok = invoke(["tune", "--outputs", outputs_file, "--dry-run", "--max-run-time", "1h", "--trials", "4"])
    assert ok.exit_code == 0, ok.stderr
    assert "total: $0.2185/h per trial × 4 trials; maximum for 1h: $0.87" in ok.stderr
    refused = invoke(["tune", "--outputs", outputs_file, "--dry-run", "--max-run-time", "1h", "--trials", "4",
                      "--budget", "0.5"])
    assert refused.exit_code == 2
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: the job may cost up to $0.87 ($0.2185/h × 4 trials for 1h), above --budget $0.50; "
                      "lower --max-run-time, --workers or the trial count, or raise --budget"]
    assert refused.stdout == ""   # nothing printed as the request


def test_unknown_region_in_the_cli_is_a_note_without_budget_and_an_error_with_it(outputs_file):
    ok = invoke(["tune", "--outputs", outputs_file, "--dry-run", "--region", "europe-west4"])
    assert ok.exit_code == 0, ok.stderr
    assert "total: unknown: no Vertex AI training prices for region europe-west4" in ok.stderr
    refused = invoke(["tune", "--outputs", outputs_file, "--dry-run", "--region", "europe-west4", "--budget", "10"])
    assert refused.exit_code == 2 and "error: cannot check --budget $10.00: no Vertex AI training prices" in refused.stderr
