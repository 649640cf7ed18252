"""The Google Cloud CLI as a contract: every `gcloud …` line tpuctl prints or documents is put through the
installed gcloud (no credentials, an isolated config and HOME, no prompts; it never reaches Google). gcloud
either accepts it and stops at the missing account (exit 1), or refuses it as a usage error (exit 2) - a
test failure naming the file and line. Collection and checks: gcloudcontract.py; one SDK process runs them all
(gcloud_batch.py), and a few are re-run through /usr/bin/gcloud itself to show the batch answers the same."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import gcloudcontract as gc
import pytest

PRINTED = gc.printed_commands()
RENDERED = gc.rendered_commands()
DOCUMENTED = gc.documented_commands()
ALL = PRINTED + RENDERED + DOCUMENTED


#: Lines re-run through /usr/bin/gcloud itself (a second each): parsed (stops at the missing account), refused.
BINARY_LINES = [["services", "enable", "tpu.googleapis.com", "--project", "my-project-1"],
                ["compute", "tpus", "tpu-vm", "ssh", "n1", "--zone", "us-central1-a", "--wrker=all"]]


@pytest.fixture(scope="module")
def contract():
    """One gcloud batch for every collected line, the mutations and BINARY_LINES, while BINARY_LINES also run
    through the gcloud binary in threads: (verdicts, mutation verdicts, batch results, binary results)."""
    # the Google Cloud CLI is part of every machine of this project: its absence is a failure, not a skip
    assert os.path.exists(gc.GCLOUD_BINARY), f"the Google Cloud CLI is not installed ({gc.GCLOUD_BINARY})"
    mutated = [gc._command("mutation", text) for text in MUTATIONS]
    start = time.monotonic()
    with ThreadPoolExecutor(len(BINARY_LINES)) as pool:
        binary = pool.map(gc.run_binary, BINARY_LINES)
        found, gcloud_seconds = gc.check(ALL + mutated, extra=BINARY_LINES)
        binary = list(binary)
    print(f"\n{len(ALL)} gcloud lines (+{len(mutated)} mutations) checked in {time.monotonic() - start:.1f} s "
          f"({gcloud_seconds:.1f} s inside gcloud)")
    return found, mutated, found.pop("extra"), binary


def test_the_scan_finds_the_commands_tpuctl_prints_and_documents():
    printed = {" ".join(c.argv[:3]) for c in PRINTED}
    # doctor's fix lines, the pre-flight quota hints, the agents' creating calls, the TPU VM startup script
    assert {"artifacts repositories add-iam-policy-binding", "beta quotas preferences", "services enable tpu.googleapis.com",
            "compute tpus tpu-vm", "beta services identity", "auth configure-docker us-central1-docker.pkg.dev",
            "projects add-iam-policy-binding my-project-1"} <= printed
    assert {c.where.split(":")[0] for c in PRINTED} >= {"bootstrap/doctor.py", "bootstrap/quotas.py",
                                                        "ground/domain/principals.py", "tpuctl/services/runs/tpuvm/script.py"}
    # the scan sees what the functions really print: each rendered fix line is a scanned line with its values
    shape = {(c.argv[:4], tuple(a.split("=", 1)[0] for a in c.argv if a.startswith("-"))) for c in PRINTED}
    for c in RENDERED:
        assert (c.argv[:4], tuple(a.split("=", 1)[0] for a in c.argv if a.startswith("-"))) in shape, c.where
    documented = {c.where.split(":")[0] for c in DOCUMENTED}
    assert {"docs/doctor.md", "docs/tpu-vm.md", "docs/access-modes.md"} <= documented
    assert sum(not c.reference for c in ALL) >= 20


@pytest.mark.parametrize("command", ALL, ids=[f"{c.where} gcloud {' '.join(c.argv[:4])}" for c in ALL])
def test_gcloud_accepts_the_command(command, contract):
    verdicts = contract[0]
    assert verdicts[command] is None, f"{command.where}: `{command.text}`: {verdicts[command]}"


# --------------------------------------------------------------------------------------------
# The checker itself: broken lines fail, and the batch answers as /usr/bin/gcloud does
# --------------------------------------------------------------------------------------------

MUTATIONS = {
    # what docs/tpu-vm.md said before issue 26: gcloud refuses it once it has read the slice's workers
    "gcloud compute tpus tpu-vm ssh NAME --zone Z --worker=all": gc.MULTI_WORKER_RULE,
    # a misspelt flag, a wrong flag name in a doctor fix line, a command that does not exist
    "gcloud compute tpus tpu-vm ssh NAME --zone Z --wrker=all --command=ls": "unrecognized arguments: --wrker=all",
    "gcloud artifacts repositories add-iam-policy-binding R --region REGION --project P --member MEMBER "
    "--role roles/artifactregistry.reader": "unrecognized arguments",
    "gcloud beta quotas preferences create --service=tpu.googleapis.com --quota-id=Q --preferred-value=8 "
    "--dimensions=zone=Z --project=P --email=YOUR_EMAIL --bogus": "unrecognized arguments: --bogus",
    # Cloud Quotas preferences are beta-only in gcloud 528: the GA spelling is refused
    "gcloud quotas preferences create --service=tpu.googleapis.com --quota-id=Q --preferred-value=8 "
    "--dimensions=zone=Z --project=P --email=YOUR_EMAIL": "Invalid choice: 'quotas'",
    "gcloud compute tpus tpu-vm service-identities create --zone=Z --project=P": "Invalid choice",
    # the startup script's failure line (script.failure_logger): its entry must be JSON, its severity one of gcloud's
    "gcloud logging write tpuctl-startup 'tpuctl: not json' --payload-type=json --severity=ERROR --project=P":
        "Invalid JSON value",
    "gcloud logging write tpuctl-startup '{}' --payload-type=json --severity=FAILURE --project=P": "Invalid choice",
    # references: a command path that does not exist, a flag the command lacks
    "gcloud iam roles describex": "gcloud has no command",
    "gcloud services enable … --projects P": "has no flag --projects",
}


def test_a_broken_command_fails_the_contract(contract):
    found, mutated = contract[0], contract[1]
    for command, expected in zip(mutated, MUTATIONS.values()):
        assert found[command] is not None and expected in found[command], (command.text, found[command])


def test_the_multi_worker_rule_is_still_gclouds_own():
    assert gc.MULTI_WORKER_RULE in (gc.sdk_root() / gc.MULTI_WORKER_RULE_SOURCE).read_text()


def test_the_batch_answers_as_the_gcloud_binary_does(contract):
    batch = [(r["code"], gc.NO_ACCOUNT in r["output"]) for r in contract[2]]
    binary = [(code, gc.NO_ACCOUNT in out) for code, out in contract[3]]
    assert batch == binary == [(1, True), (2, False)]
