"""A Spot slice's hosts report their own preemption: the startup script's watcher (script.preemption_watcher) waits on
the metadata server's preemption flag and writes "preempted" as the host's report as soon as it turns TRUE, before the
trainer is stopped and before the queued resource's state changes. The generated script runs here in real bash and
curl, against a stand-in metadata server on 127.0.0.1 (tpufakes.FakeMetadata), with `docker` and `gcloud` replaced by
small stand-ins on PATH (gcloud's `storage cp -` uploads to the storage emulator). What this does NOT show: that a TPU
VM's metadata server sets that flag at all (docs/tpu-vm.md)."""

from __future__ import annotations

import os
import time

import pytest

from ground.outputs import read_outputs_file
from tpuctl.services.runs.tpuvm.script import startup_script

from procfixtures import Watched, wait_for
from runfixtures import planned
from tpufakes import FakeMetadata

ARTIFACTS = "tpuctl-my-tpu-project-artifacts"
NAME = "tpuctl-watched"
REPORT = f"runs/{NAME}/tpuctl/hosts/worker-2.exit"

GCLOUD = r"""#!/bin/bash
# gcloud on a TPU VM host, for the startup script: `auth configure-docker` does nothing; `storage cp - gs://B/P`
# uploads what it reads to the storage emulator.
case "$1 $2" in
  "auth configure-docker") exit 0 ;;
  "storage cp")
    target="${4#gs://}"
    exec curl -sf --noproxy '*' -X POST --data-binary @- -H 'Content-Type: text/plain' \
      "$STORAGE_EMULATOR_HOST/upload/storage/v1/b/${target%%/*}/o?uploadType=media&name=${target#*/}" >/dev/null ;;
esac
echo "unexpected: gcloud $*" >&2
exit 2
"""
DOCKER = r"""#!/bin/bash
# The trainer container: runs until the test writes the exit code it ends with into $STUBS/stop (120 s at most).
touch "$STUBS/started"
for _ in $(seq 2400); do
  if [ -s "$STUBS/stop" ]; then exit "$(cat "$STUBS/stop")"; fi
  sleep 0.05
done
exit 99
"""


@pytest.fixture
def host(tmp_path, gcs):
    """(environment of a host's startup script, its stand-ins' folder): docker and gcloud replaced on PATH."""
    stubs = tmp_path / "stubs"
    (stubs / "bin").mkdir(parents=True)
    for name, text in (("gcloud", GCLOUD), ("docker", DOCKER)):
        (stubs / "bin" / name).write_text(text)
        (stubs / "bin" / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{stubs / 'bin'}:{os.environ['PATH']}", "STUBS": str(stubs)}
    return env, stubs


@pytest.fixture
def metadata():
    fake = FakeMetadata(worker="2")
    yield fake
    fake.stop()


def _script(outputs_file, metadata, *, spot=True) -> str:
    run = planned("tpu-vm", read_outputs_file(outputs_file), accelerator="v5litepod-16", spot=spot,
                         name=NAME, image="us-central1-docker.pkg.dev/p/r/trainer-tpu:1")
    # The one address that differs on a TPU VM: its metadata server.
    return startup_script(run).replace("http://metadata.google.internal", metadata.url)


def _read_report(gcs) -> str | None:
    blob = gcs.bucket(ARTIFACTS).get_blob(REPORT)    # an object is there whole or not at all
    return blob.download_as_text() if blob is not None else None


def _report(gcs, *, changed_from: str | None = None) -> str:
    """The host's report once it is there (and not ``changed_from``)."""
    return wait_for(lambda: (text if (text := _read_report(gcs)) != changed_from else None),
                    f"the host's report {'after ' + repr(changed_from) if changed_from else ''}", interval=0.02)


def _stop_trainer(stubs, status: str) -> None:
    """The exit status the stand-in trainer container ends with (written whole)."""
    (stubs / "stop.tmp").write_text(status)
    (stubs / "stop.tmp").replace(stubs / "stop")


def test_a_preempted_host_reports_it_while_its_trainer_still_runs(outputs_file, gcs, host, metadata):
    env, stubs = host
    with Watched(["bash", "-c", _script(outputs_file, metadata)], env=env) as script:
        # The watcher and the trainer's container start side by side: either may be first.
        script.wait(lambda: metadata.waits >= 1 or None, "the watcher asking for the preemption flag")
        script.wait(lambda: (stubs / "started").exists(), "the trainer's container starting")
        assert gcs.bucket(ARTIFACTS).get_blob(REPORT) is None
        metadata.preempt()
        assert _report(gcs) == "preempted\n"
        assert script.returncode is None and script.proc.poll() is None   # reported before the container stopped
        _stop_trainer(stubs, "143")                      # then the VM's shutdown stops the container
        assert script.finish(timeout=60) == 0, script.tail()
    assert _report(gcs, changed_from="preempted\n") == "143\n"   # the exit status follows, as before


def test_the_watcher_waits_again_on_an_answer_that_is_not_true_and_ends_with_the_trainer(outputs_file, gcs, host):
    env, stubs = host
    metadata = FakeMetadata(worker="2", hang=0.1)    # each hanging GET answers FALSE after 0.1 s: asked again
    try:
        with Watched(["bash", "-c", _script(outputs_file, metadata)], env=env) as script:
            script.wait(lambda: metadata.waits >= 3 or None, "the watcher asking three times")
            assert gcs.bucket(ARTIFACTS).get_blob(REPORT) is None        # FALSE is no report
            _stop_trainer(stubs, "0")
            assert script.finish(timeout=60) == 0, script.tail()
        assert _report(gcs) == "0\n"
        waits = metadata.waits
        metadata.preempt()     # after the run: the watcher was stopped with the trainer, nothing is written
        time.sleep(0.5)        # nothing to wait for: a report written now would be a fault
        assert _read_report(gcs) == "0\n" and metadata.waits <= waits + 1
    finally:
        metadata.stop()


def test_an_on_demand_slice_has_no_watcher(outputs_file, metadata):
    assert "preempted" in _script(outputs_file, metadata)
    assert "preempted" not in _script(outputs_file, metadata, spot=False)


LOGGING_REFUSED_DOCKER = r"""#!/bin/bash
# docker run with the gcplogs driver fails to start the container (exit 125: Docker's own failure), as it does when
# Cloud Logging refuses the VM's service account; without the driver the trainer runs and exits 0.
echo "$*" >> "$STUBS/runs"
case " $* " in *" --log-driver gcplogs "*) echo "docker: Error response from daemon: failed to initialize logging \
driver: unable to connect or authenticate with Google Cloud Logging" >&2; exit 125 ;; esac
exit 0
"""


def test_a_host_whose_cloud_logging_is_refused_still_trains(outputs_file, gcs, host, metadata):
    """Unreachable or denied Cloud Logging never stops the run: the script starts the container again without the
    gcplogs driver (one line on the host's stderr), and the host's report is the trainer's own exit status."""
    env, stubs = host
    (stubs / "bin" / "docker").write_text(LOGGING_REFUSED_DOCKER)
    with Watched(["bash", "-c", _script(outputs_file, metadata, spot=False)], env=env) as script:
        assert script.finish(timeout=60) == 0, script.tail()
    first, second = (stubs / "runs").read_text().splitlines()
    assert "--log-driver gcplogs --log-opt labels=tpuctl_run,tpuctl_worker" in first
    assert "--label tpuctl_run=tpuctl-watched --label tpuctl_worker=2" in first     # the run and this host
    assert "gcplogs" not in second and "tpuctl_run" not in second
    assert [line for line in script.err if "did not start with Cloud Logging" in line]
    assert _report(gcs) == "0\n"
