"""`tpuctl plan` of a stack with a trainingCluster: the persistent resource among the resources, and its cost per
hour while it exists (the same list prices as every estimate)."""

from __future__ import annotations

import re

from clifixtures import invoke
from stackfixtures import write_stack


def test_the_plan_prices_the_stacks_cluster_per_hour(tmp_path, monkeypatch):
    from tpuctl.services import prices

    from billingfakes import fake_prices

    monkeypatch.setenv("TPUCTL_CACHE_DIR", str(tmp_path / "cache"))
    book = fake_prices()
    prices.write_cache(book.catalogue)
    stack = write_stack(tmp_path / "Pulumi.dev.yaml", tmp_path / "hub", trainingCluster="team-cpu:cpu:2")
    res = invoke(["plan", "--config", str(stack)])
    assert res.exit_code == 0, res.output
    assert "AiPersistentResource" in res.stdout and "team-cpu" in res.stdout
    # one paragraph, wrapped to the width (issue 57): read it whole
    line = re.search(r"^Training cluster team-cpu .*?(?=\n\S|\Z)", res.stdout, re.M | re.S).group(0)
    line = " ".join(line.split())
    assert "2 × cpu" in line and "fake catalogue" in line, line
    hourly = float(re.search(r"\$(\d+\.\d{4})/h while it exists", line).group(1))
    # 2 × n1-standard-4 at the fake catalogue's on-demand prices (what a 2-replica CPU job costs per hour)
    from ground import domain
    from tpuctl.services.runs.cost import estimate_pools
    from tpuctl.services.runs.vertex import machine_spec

    job = estimate_pools([{"machine_spec": machine_spec(domain.parse_accelerator("cpu")), "replica_count": 2}],
                         "us-central1", prices=book)
    assert hourly == round(job.hourly, 4) and hourly > 0


def test_no_cluster_line_without_one(tmp_path):
    res = invoke(["plan", "--config", str(write_stack(tmp_path / "Pulumi.dev.yaml", tmp_path / "hub"))])
    assert res.exit_code == 0 and "Training cluster" not in res.stdout


def test_prices_show_prices_a_cluster_of_replicas(tmp_path, monkeypatch):
    from tpuctl.services import prices

    from billingfakes import fake_prices
    from clifixtures import error_line

    monkeypatch.setenv("TPUCTL_CACHE_DIR", str(tmp_path / "cache"))
    prices.write_cache(fake_prices().catalogue)
    res = invoke(["prices", "show", "-a", "cpu", "--replicas", "3"])
    assert res.exit_code == 0, res.output
    total = float(re.search(r"total: \$(\d+\.\d{4})/h", res.stdout).group(1))
    cluster = float(re.search(r"a cluster of 3: \$(\d+\.\d{4})/h while it exists", res.stdout).group(1))
    assert cluster == round(total * 3, 4) or abs(cluster - total * 3) < 0.0002
    assert "--replicas" in error_line(invoke(["prices", "show", "-a", "v5litepod-8", "--replicas", "2"]), 2)
