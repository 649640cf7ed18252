"""Which flag applies to which target is declared once, by the target's options model (a field of it); a flag given
to a target that does not take it is one line naming the targets that do, before anything is read or planned."""

from __future__ import annotations

import pytest

from tpuctl.commands import train, tune

from clifixtures import error_line, invoke

#: A value for each target-specific flag (a bare flag when the value is None).
SAMPLES = {
    "name": ("--name", "n1"), "parameter_servers": ("--parameter-servers", "1"), "verbose": ("--verbose", None),
    "region": ("--region", "us-central1"), "job_name": ("--name", "j1"), "image": ("--image", "img"),
"spot": ("--spot", None), "max_run_time": ("--max-run-time", "1h"),
    "budget": ("--budget", "5"), "dry_run": ("--dry-run", None), "wait": ("--no-wait", None),
    "poll_seconds": ("--poll-seconds", "1"), "zone": ("--zone", "us-central1-a"), "keep": ("--keep", None),
    "recover": ("--recover", "0"), "zones": ("--zones", "us-central1-b"), "seed": ("--seed", "1"),
    "max_wait": ("--max-wait", "1h"), "provisioning": ("--provisioning", "spot"), "reservation": ("--reservation", "any"),
    "autocheckpoint": ("--no-autocheckpoint", None), "cluster": ("--cluster", "c1"),
}


def _refusals(command: str, table: dict[str, frozenset[str]]):
    for target, own in table.items():
        for param in sorted(set().union(*table.values()) - own):
            takers = [t for t, flags in table.items() if param in flags]
            yield pytest.param(command, target, param, takers, id=f"{command}-{target}-{param}")


@pytest.mark.parametrize(("command", "target", "param", "takers"),
                         [*_refusals("train", train.target_flags()), *_refusals("tune", tune.target_flags())])
def test_a_flag_given_to_a_target_that_does_not_take_it_is_refused(command, target, param, takers):
    flag, value = SAMPLES[param]
    result = invoke([command, "--target", target, flag, *([value] if value is not None else [])])
    line = error_line(result, 2, alone=True)      # the flag, then the targets that take it
    assert line.startswith(f"error: {flag} ") and f"--target {' or '.join(takers)}" in line, line


def test_a_flag_given_with_its_default_value_still_counts_as_given():
    result = invoke(["train", "--target", "vertex", "--recover", "0"])   # 0 is the default: given, yet meaningless
    line = error_line(result, 2)
    assert "--recover" in line and "--target tpu-vm" in line, line


def test_a_flag_a_target_takes_is_not_refused_by_the_table():
    # --name on tpu-vm goes past the table to the run's own checks (here: no stack outputs)
    result = invoke(["train", "--target", "tpu-vm", "-a", "v5litepod-8", "--name", "j1", "--dry-run"])
    assert result.exit_code != 0 and "only applies" not in result.stderr
    assert "needs the stack's outputs" in result.stderr
