"""`tpuctl serve` ends with one `error:` line when the container runtime or TF Serving fails (issue 28: docker's
exit 125 came with no error line), keeping the exit status."""

from __future__ import annotations

import pytest

from clifixtures import invoke


@pytest.mark.parametrize("code, fragment", [
    (125, "docker could not start the TF Serving container (exit 125; its message is above): is the docker daemon "
          "running"),
    (3, "TF Serving exited with code 3 (its log is above); the command: "),
])
def test_a_failed_container_is_one_error_line_with_its_exit_status(fake_export, tmp_path, code, fragment):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(f"#!/bin/sh\necho 'docker: Cannot connect to the Docker daemon.' >&2\nexit {code}\n")
    docker.chmod(0o755)
    r = invoke(["serve", fake_export.run], env={"PATH": str(bin_dir)})
    assert r.exit_code == code
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and fragment in errors[0], r.stderr
