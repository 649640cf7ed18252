"""`tpuctl train --target tpu-vm` checks the zone's Cloud TPU quota before creating anything: the real
google-cloud-quotas client against the local fake Google server (tests/ops/bootstrap/fakegoogle.py), the real
google-cloud-tpu client against the queued-resource fake."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ground import domain
from ground.errors import UserError
from tpuctl.services.runs.spec import RunSpec
from tpuctl.services.runs.tpuvm.target import check_quota, recovery_zones

from clifixtures import error_line, invoke
from runfixtures import planned

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bootstrap"))
from fakegoogle import quota_info, quotas_endpoint

# The stack of the `outputs_file` fixture (conftest.py).
PROJECT, ZONE = "my-tpu-project", "us-central1-a"
TPU = "tpu.googleapis.com"
V5E = "TPUV5sLitepodPerProjectPerZoneForTPUAPI"
V5E_SPOT = "TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI"
V5P = "TPUV5PPerProjectPerZoneForTPUAPI"


@pytest.fixture
def quotas(monkeypatch, tmp_path):
    with quotas_endpoint(monkeypatch, tmp_path, {TPU: [
        quota_info(TPU, f"{TPU}/v5e", V5E, {ZONE: 8}, default=0, dimension="zone"),
        quota_info(TPU, f"{TPU}/v5e-spot", V5E_SPOT, {ZONE: 64}, default=0, dimension="zone"),
        quota_info(TPU, f"{TPU}/v5p", V5P, {ZONE: 8}, default=0, dimension="zone"),
    ]}) as server:
        yield server


def plan(outputs_file, accelerator: str, spot: bool = False, zone: str | None = None, **flags) -> RunSpec:
    from ground.outputs import load_outputs

    return planned("tpu-vm", load_outputs(outputs_file=outputs_file), accelerator=accelerator, zone=zone, spot=spot,
                   name="q-run", image="us-docker.pkg.dev/p/r/trainer-tpu:abc", **flags)


def test_a_slice_within_the_zones_quota_passes(quotas, outputs_file):
    assert check_quota(plan(outputs_file, "v5litepod-8")) == 8
    assert check_quota(plan(outputs_file, "v5litepod-64", spot=True)) == 64   # Spot: its own quota
    assert check_quota(plan(outputs_file, "v5p-8")) == 8           # v5p counts TensorCores: 4 chips x 2


def test_a_slice_over_quota_is_refused_with_the_stack_key_and_gcloud_command(quotas, outputs_file):
    with pytest.raises(UserError) as err:
        check_quota(plan(outputs_file, "v5litepod-16"))
    text = str(err.value)
    assert err.value.exit_code == 1 and "\n" not in text
    # the quota (its id, zone, limit) and the slice over it; both fixes: the stack key entry and the request command
    assert V5E in text and ZONE in text and "8 chips" in text and "v5litepod-16" in text, text
    assert "tpuctl:tpuVmQuotas" in text and f"v5e:{ZONE}:16" in text and "`pulumi up`" in text, text
    assert (f"gcloud beta quotas preferences create --service={TPU} --quota-id={V5E} --preferred-value=16 "
            f"--dimensions=zone={ZONE} --project={PROJECT}") in text
    with pytest.raises(UserError, match=r"\b8 TensorCores\b.*\bv5p-16\b.*\b16\b"):
        check_quota(plan(outputs_file, "v5p-16"))


def test_another_zone_has_its_own_limit(quotas, outputs_file):
    with pytest.raises(UserError, match=r"in us-west4-a is 0 chips"):
        check_quota(plan(outputs_file, "v5litepod-1", zone="us-west4-a"))


def test_what_cannot_be_checked_is_a_note_and_the_run_goes_on(quotas, outputs_file):
    notes: list[str] = []
    assert check_quota(plan(outputs_file, "v6e-8"), echo=notes.append) is None      # id not listed
    assert check_quota(plan(outputs_file, "v4-8"), echo=notes.append) is None       # id not known
    unlisted, unknown = notes
    assert unlisted.startswith("note: ") and "skipped" in unlisted, unlisted
    assert "TPUV6EPerProjectPerZoneForTPUAPI" in unlisted and "report" in unlisted, unlisted
    assert unknown.startswith("note: ") and "skipped" in unknown and unknown.endswith("TPU v4"), unknown


def test_no_credentials_is_a_note(outputs_file, monkeypatch, tmp_path):
    monkeypatch.delenv("TPUCTL_CLOUDQUOTAS_ENDPOINT", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "none.json"))
    notes: list[str] = []
    assert check_quota(plan(outputs_file, "v5litepod-8"), echo=notes.append) is None
    [note] = notes
    assert note.startswith("note: ") and "skipped" in note and "`gcloud auth application-default login`" in note, note


def test_the_cli_refuses_before_creating_anything(quotas, outputs_file, tpu_cloud):
    fake = tpu_cloud()
    r = invoke(["train", "--target", "tpu-vm", "-a", "v5litepod-16", "--name", "q-run", "--outputs", str(outputs_file),
                "--image", "us-docker.pkg.dev/p/r/trainer-tpu:abc"])
    line = error_line(r, 1)
    assert V5E in line and ZONE in line and "8 chips" in line, line
    assert fake.requests == []          # nothing was created, not even looked up
    ok = invoke(["train", "--target", "tpu-vm", "-a", "v5litepod-16", "--spot", "--name", "q-run", "--outputs", str(outputs_file),
                 "--image", "us-docker.pkg.dev/p/r/trainer-tpu:abc", "--dry-run"])
    assert ok.exit_code == 0, ok.output   # Spot quota (64) covers it: the request is printed


def test_catalogue_units_match_the_slice_sizes():
    for name, accel in domain.TPU_SLICES.items():
        if not accel.tpu_vm:
            continue                    # v2/v3 boards run on Vertex AI here: Vertex AI's regional quota
        _, units, unit = domain.tpu_vm_quota_need(accel)
        # v5p-N / v4-N count TensorCores in the name; v5litepod-N / v6e-N count chips
        assert units == int(name.rsplit("-", 1)[1]), name
        assert unit == ("TensorCores" if accel.generation in ("v5p", "v4") else "chips")


def test_recovery_zones_leave_out_a_zone_without_spot_quota(quotas, outputs_file):
    """--zones: us-central1-b has no v5e Spot quota (default 0): left out with a note; the run's zone stays
    first, a repeat is dropped."""
    notes = []
    zones = recovery_zones(plan(outputs_file, "v5litepod-16", spot=True, recover=1,
                                zones="us-central1-b,us-central1-a"), echo=notes.append)
    assert zones == [ZONE]
    [note] = notes
    assert note.startswith("note: us-central1-b ") and "recovery zones" in note, note
    assert V5E_SPOT in note and "0 chips" in note, note


def test_flex_start_draws_on_the_preemptible_quota(quotas, outputs_file):
    """Cloud TPU flex-start: "ensure you have sufficient preemptible quota" (request-using-flex-start)."""
    assert check_quota(plan(outputs_file, "v5litepod-64", provisioning="flex-start")) == 64
    with pytest.raises(UserError, match=V5E):
        check_quota(plan(outputs_file, "v5litepod-64"))                      # the on-demand quota is 8


def test_a_reservation_skips_the_quota_preflight_with_a_note(quotas, outputs_file):
    notes: list[str] = []
    assert check_quota(plan(outputs_file, "v5litepod-64", reservation="any"), echo=notes.append) is None
    assert len(notes) == 1 and "reserved capacity" in notes[0]
