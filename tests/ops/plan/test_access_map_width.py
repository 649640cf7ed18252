"""The plan's access map never breaks a principal or a grant (issue 28: below ~160 columns principals were
squeezed to `pri/nci/pal`): a table when it fits, else one wrapped paragraph per principal; --json for machines."""

from __future__ import annotations

import re

from clifixtures import invoke


def test_access_map_keeps_every_principal_whole_when_the_table_does_not_fit():
    r = invoke(["plan", "--stack", "example"])        # captured: rendered 120 columns wide
    assert r.exit_code == 0, r.output
    section = r.stdout.split("Access map", 1)[1].split("Policy", 1)[0]
    assert "…" not in section
    grants = dict(re.findall(r"^  ([^\s:]+(?::[^\s:]+)?): (\S+=.*)$", section, flags=re.M))
    assert {"tpu-agent", "tpu-vm-agent", "training-sa", "vertex-agent",
            "group:cloud-storage-analytics@google.com"} <= set(grants), section
    assert "data=read,list" in grants["training-sa"].split() and "artifacts=read,list,write" in grants[
        "training-sa"].split()
    assert all(len(line) <= 120 for line in r.stdout.splitlines())
