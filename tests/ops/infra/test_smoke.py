"""The example stack runs end to end under mocks and exports every output key."""

from infra.mocks import run_program
from tpuctl import domain


def test_defaults_build_every_output(base_values):
    run = run_program(base_values)
    assert set(run.outputs) == set(domain.OUTPUT_KEYS)
    assert run.outputs["buckets"]["data"] == f"tpuctl-{base_values['tpuctl:project']}-data"
    assert run.of_type("gcp:storage/bucket:Bucket")
