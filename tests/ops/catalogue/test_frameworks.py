"""The framework facts (ground/domain/frameworks.py): every TPU generation x target x framework, and GPUs and CPUs, has
an answer with Google's page and the day it was read; the `auto` rule keeps TensorFlow wherever Google supports it
(every run tpuctl could plan before JAX came), picks JAX where TensorFlow is not supported (TPU v6e on Vertex AI),
and a backend Google does not support there is one line naming the page."""

from __future__ import annotations

import datetime
import re

import pytest

from ground import domain
from ground.domain import frameworks

TPU_CASES = [(g, t) for g in frameworks.TPU_GENERATIONS for t in frameworks.TARGETS]
OTHER_CASES = [(k, t) for k in ("cpu", "gpu") for t in ("local", "vertex")]


def _check_answer(support: domain.Support, framework: str) -> None:
    assert support.framework == framework
    assert support.source in frameworks.SOURCES.values()
    assert re.fullmatch(r"https://[^\s,]+", support.source.url), support.source.url
    assert datetime.date.fromisoformat(support.source.read) <= datetime.date(2026, 12, 7)
    assert support.reason and "\n" not in support.reason and support.source.says
    if support.unverified_id is not None:
        assert support.unverified_id in domain.UNVERIFIED_FRAMEWORK_FACTS
        assert f"[unverified: {support.unverified_id}]" in support.reason


@pytest.mark.parametrize("generation, target", TPU_CASES)
def test_every_tpu_generation_and_target_has_an_answer_for_every_framework_with_its_source(generation, target):
    answers = domain.backend_support("tpu", generation, target)
    assert sorted(answers) == sorted(domain.FRAMEWORKS)
    for framework, support in answers.items():
        _check_answer(support, framework)
        if target == "tpu-vm" and support.supported:
            # Google's route on a TPU VM is a software version: the TensorFlow runtime or JAX's base version
            assert support.runtime_version and support.multi_host_runtime_version and support.route


@pytest.mark.parametrize("kind, target", OTHER_CASES)
def test_gpus_and_cpus_run_both_frameworks_by_the_frameworks_own_pages(kind, target):
    answers = domain.backend_support(kind, None, target)
    for framework, support in answers.items():
        _check_answer(support, framework)
        assert support.supported
    if target == "vertex":   # Vertex AI runs what its custom container holds: one page says so for both
        assert {s.source.url for s in answers.values()} == {frameworks.SOURCES["vertex-custom-container"].url}
    else:
        assert answers["jax"].source.url.startswith("https://docs.jax.dev/")
        assert answers["tensorflow"].source.url.startswith("https://www.tensorflow.org/")


def test_jax_on_tpu_vms_installs_onto_the_base_version_the_tpu_catalogue_creates_slices_with():
    # two readings of the same Google table (tpu.py's TPU_VM_GENERATIONS, this module's JAX row) must agree
    for generation, record in domain.TPU_VM_GENERATIONS.items():
        jax = domain.backend_support("tpu", generation, "tpu-vm")["jax"]
        assert jax.runtime_version == record.runtime_version, generation
        assert "jax[tpu]" in jax.route


def test_tensorflow_on_tpu_vms_is_googles_pjrt_runtime_from_v5e_on_and_the_plain_one_before():
    runtimes = {g: domain.backend_support("tpu", g, "tpu-vm")["tensorflow"] for g in frameworks.TPU_GENERATIONS}
    for generation, support in runtimes.items():
        pjrt = generation in ("v5e", "v5p", "v6e")
        assert support.runtime_version == f"tpu-vm-tf-2.18.0{'-pjrt' if pjrt else ''}", generation
        assert support.multi_host_runtime_version == f"tpu-vm-tf-2.18.0-pod{'-pjrt' if pjrt else ''}", generation


def _runs_planned_before_jax():
    """(kind, generation, target) of every run tpuctl's catalogue planned before JAX: Vertex AI's TPU slices, TPU VM
    slices, GPUs and CPUs locally and on Vertex AI. TPU v6e on Vertex AI came with the JAX backend (JAX only there:
    the test below)."""
    cases = {(s.generation, "vertex") for s in domain.TPU_SLICES.values() if s.vertex is not None
             and s.generation != "v6e"}
    cases |= {(s.generation, "tpu-vm") for s in domain.TPU_SLICES.values() if s.tpu_vm}
    return [("tpu", g, t) for g, t in sorted(cases)] + [(k, None, t) for k, t in OTHER_CASES]


@pytest.mark.parametrize("kind, generation, target", _runs_planned_before_jax())
def test_auto_keeps_tensorflow_on_every_run_that_trained_before(kind, generation, target):
    assert domain.default_backend(kind, generation, target) == "tensorflow"
    domain.check_backend(kind, generation, target, "tensorflow")


@pytest.mark.parametrize("generation, target", TPU_CASES)
def test_auto_is_tensorflow_where_google_supports_it_else_jax(generation, target):
    answers = domain.backend_support("tpu", generation, target)
    supported = [f for f in ("tensorflow", "jax") if answers[f].supported]
    if not supported:
        with pytest.raises(domain.DomainError) as err:
            domain.default_backend("tpu", generation, target)
        assert answers["tensorflow"].source.url in str(err.value) and "\n" not in str(err.value)
    else:
        assert domain.default_backend("tpu", generation, target) == supported[0]


def test_v6e_on_vertex_ai_is_jax_and_tensorflow_there_is_refused_naming_googles_page():
    assert domain.default_backend("tpu", "v6e", "vertex") == "jax"
    domain.check_backend("tpu", "v6e", "vertex", "jax")
    with pytest.raises(domain.DomainError) as err:
        domain.check_backend("tpu", "v6e", "vertex", "tensorflow")
    message = str(err.value)
    assert "\n" not in message and "TPU v6e" in message and "jax backend" in message
    assert frameworks.SOURCES["vertex-tpu-tensorflow"].url in message
    # on TPU VMs Google still documents TensorFlow on v6e (its -pjrt runtimes): auto keeps it there
    assert domain.default_backend("tpu", "v6e", "tpu-vm") == "tensorflow"


@pytest.mark.parametrize("call, says", [
    (lambda: domain.check_backend("tpu", "v5e", "vertex", "pytorch"), "unknown backend 'pytorch'"),
    (lambda: domain.check_backend("tpu", "v4", "vertex", "jax"), "does not offer TPU v4"),
    (lambda: domain.backend_support("tpu", "tpu7x", "tpu-vm"), "TPU7x (Ironwood) is not offered"),
    (lambda: domain.backend_support("tpu", "v9z", "tpu-vm"), "unknown TPU generation 'v9z'"),
    (lambda: domain.backend_support("tpu", None, "vertex"), "unknown TPU generation None"),
    (lambda: domain.backend_support("gpu", None, "tpu-vm"), "cannot target tpu-vm"),
    (lambda: domain.backend_support("xpu", None, "local"), "unknown accelerator kind 'xpu'"),
    (lambda: domain.backend_support("cpu", None, "gke"), "unknown target 'gke'"),
    (lambda: domain.image_variant("cpu", "torch"), "unknown backend 'torch'"),
    (lambda: domain.image_variant("npu", "jax"), "unknown accelerator kind 'npu'"),
])
def test_bad_input_is_one_line(call, says):
    with pytest.raises(domain.DomainError) as err:
        call()
    assert says in str(err.value) and "\n" not in str(err.value)


def test_each_kind_and_backend_has_one_image_and_each_image_one_kind_and_backend():
    pairs = {(k, b): domain.image_variant(k, b) for k in ("cpu", "gpu", "tpu") for b in domain.FRAMEWORKS}
    assert pairs == {("cpu", "tensorflow"): "cpu", ("gpu", "tensorflow"): "gpu", ("tpu", "tensorflow"): "tpu",
                     ("cpu", "jax"): "jax-cpu", ("gpu", "jax"): "jax-gpu", ("tpu", "jax"): "jax-tpu"}
    assert sorted(pairs.values()) == sorted(domain.IMAGE_VARIANTS)


def _table(text: str, first: str) -> list[list[str]]:
    """The rows of the markdown table whose header starts with ``| first |``, as stripped cells."""
    lines = text[text.index(f"| {first} |"):].splitlines()
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _key(source: frameworks.Source) -> str:
    return next(key for key, known in frameworks.SOURCES.items() if known == source)


def test_the_support_matrix_page_says_what_the_catalogue_says():
    from ground.envs import REPO_ROOT

    text = (REPO_ROOT / "docs" / "frameworks-on-tpus.md").read_text()
    rows = _table(text, "generation")
    assert [(r[0], r[1]) for r in rows] == [(g, t) for g in frameworks.TPU_GENERATIONS for t in ("vertex", "tpu-vm")]
    for generation, target, tf_cell, jax_cell, auto, tf_versions, jax_version, sources in rows:
        answers = domain.backend_support("tpu", generation, target)
        for cell, support in ((tf_cell, answers["tensorflow"]), (jax_cell, answers["jax"])):
            assert cell.split()[0] == ("yes" if support.supported else "no"), (generation, target, cell)
            assert (support.unverified_id is None) == ("unverified" not in cell), cell
            if support.unverified_id:
                assert f"`{support.unverified_id}`" in cell
        supported = [f for f in domain.FRAMEWORKS if answers[f].supported]
        assert auto == (supported[0] if supported else "— (refused)"), (generation, target)
        tf, jax = answers["tensorflow"], answers["jax"]
        assert tf_versions == (f"{tf.runtime_version} / {tf.multi_host_runtime_version}" if tf.runtime_version else "")
        assert jax_version == (jax.runtime_version or "")
        assert set(sources.split(", ")) == {_key(tf.source), _key(jax.source)}, (generation, target)
    for key, source in frameworks.SOURCES.items():   # every source in the page's list, with its address
        assert f"| {key} |" in text and (source.url in text or key in ("vertex-tpu-tensorflow",
                                                                        "tpu-runtimes-tensorflow"))
    for kind, target, tf_cell, jax_cell, auto, _ in _table(text, "kind"):
        answers = domain.backend_support(kind, None, target)
        assert (tf_cell, jax_cell) == ("yes", "yes") and all(a.supported for a in answers.values())
        assert auto == domain.default_backend(kind, None, target)
