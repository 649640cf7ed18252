"""docs/vertex.md's accelerator → machine spec table says what the request builder does."""

from __future__ import annotations

import datetime
from pathlib import Path

from ground import domain
from tpuctl.services.runs import spec as spec_module
from tpuctl.services.runs import vertex

DOC = Path(__file__).resolve().parents[3] / "docs" / "vertex.md"


def _cell(value) -> str:
    return "–" if value is None else f"`{value}`"


def test_machine_spec_table_matches_the_catalogue():
    rows = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0].startswith("`") and cells[0] != "`--accelerator`":
            rows[cells[0].strip("`")] = cells[1:]
    today = datetime.date.today()       # a GPU past its end of support is refused, not in the table
    expected_names = ["cpu", *(f"gpu-{g.short}" + ("" if c == 1 else f"x{c}")
                               for g in domain.GPU_TYPES.values() for c in sorted(g.machine_types)
                               if g.end_of_support is None or g.end_of_support > today),
                      *domain.vertex_tpu_names()]
    assert sorted(rows) == sorted(expected_names)
    for name in expected_names:
        accel = domain.parse_accelerator(name)
        spec = vertex.machine_spec(accel)
        strategy = f"`{spec_module.strategy(accel, 1, 0)}`" + (f" `--num_gpus {accel.gpu_count}`" if accel.kind == "gpu" else "")
        auto = domain.default_backend(accel.kind, accel.tpu.generation if accel.tpu else None,
                                      vertex.VertexTarget.SUPPORT)      # --backend auto's image
        image = f"`trainer-{vertex.VertexTarget.image_variant(accel, auto)}`"
        assert rows[name] == [
            f"`{spec['machine_type']}`", _cell(spec.get("accelerator_type")), _cell(spec.get("accelerator_count")),
            _cell(spec.get("tpu_topology")), image, strategy,
        ], name
