"""`tpuctl image`: the Dockerfile lints, the build context is exactly what it needs and runs the trainer,
the tag follows the sources, and Cloud Build is driven through its real client (a local fake endpoint)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from ground import domain
from ground.envs import REPO_ROOT
from ground.errors import UserError
from tpuctl.services import image

from clifixtures import error_line, invoke
from gcsfixtures import storage_emulator

PROJECT, REGION = "my-tpu-project", "us-central1"
STAGING = "tpuctl-my-tpu-project-staging"
SA = "tpuctl-trainer@my-tpu-project.iam.gserviceaccount.com"
BUILDER = f"tpuctl-builder@{PROJECT}.iam.gserviceaccount.com"


@pytest.fixture
def outputs_file(tmp_path):
    f = tmp_path / "outputs.json"
    f.write_text(json.dumps({
        "project": PROJECT, "region": REGION, "zone": f"{REGION}-a",
        "buckets": {"staging": STAGING, "artifacts": "tpuctl-my-tpu-project-artifacts"},
        "principals": {"training-sa": SA}, "training_service_account": SA, "image_builder_service_account": BUILDER,
    }))
    return f


def _copy_sources(dest: Path) -> Path:
    for variant in image.VARIANTS:
        for rel, path in image.context_files(variant):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, dest / rel)
    return dest


@pytest.mark.parametrize("dockerfile", [image.DOCKERFILE, image.CODE_DOCKERFILE])
def test_dockerfile_passes_hadolint(dockerfile):
    """The trainer's Dockerfile and the code layer on it (issue 57: Dockerfile.code failed DL3042 and was not
    linted): hadolint's default threshold, so an info-level finding fails too."""
    hadolint = shutil.which("hadolint") or str(Path(os.sys.executable).with_name("hadolint"))
    proc = subprocess.run([hadolint, str(REPO_ROOT / dockerfile)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_variant_has_a_lock_the_dockerfile_installs():
    dockerfile = (REPO_ROOT / image.DOCKERFILE).read_text()
    assert "requirements/image-${VARIANT}.lock" in dockerfile and "--no-deps" in dockerfile
    assert "USER 10001" in dockerfile and 'ENTRYPOINT ["python", "-m", "trainer.task"]' in dockerfile
    for variant in image.VARIANTS:
        lock = (REPO_ROOT / image.lock_file(variant)).read_text().splitlines()
        pins = [line for line in lock if line and not line.startswith("#")]
        assert pins and all("==" in line for line in pins), variant
        names = {line.split("==")[0].lower().replace("_", "-") for line in pins}
        assert "pytest" not in names and "hypothesis" not in names  # runtime only
        assert {"tf-keras", "tensorflow-hub"} <= names, variant
    gpu = (REPO_ROOT / image.lock_file("gpu")).read_text()
    assert "nvidia-cudnn-cu12==" in gpu and "tensorflow==2.21.0" in gpu
    tpu = (REPO_ROOT / image.lock_file("tpu")).read_text()
    assert "tensorflow_tpu==" in tpu and "libtpu==" in tpu


def test_tag_follows_the_sources_and_nothing_else(tmp_path):
    root = _copy_sources(tmp_path / "a")
    first = image.image_tag("cpu", root)
    assert first == image.image_tag("cpu", root) and first.startswith("sha256-")
    (root / "README.md").write_text("not in the build context")
    assert image.image_tag("cpu", root) == first
    (root / "trainer" / "task.py").write_text((root / "trainer" / "task.py").read_text() + "\n# changed\n")
    assert image.image_tag("cpu", root) != first
    assert image.image_tag("gpu", root) != image.image_tag("cpu", root)


def test_bad_variant_and_repository_are_one_line(outputs_file):
    r = invoke(["image", "build", "--variant", "xpu", "--outputs", str(outputs_file), "--dry-run"])
    line = error_line(r, 2, alone=True)
    assert "variant 'xpu'" in line and line.endswith("cpu, gpu, tpu, jax-cpu, jax-gpu, jax-tpu"), line
    r = invoke(["image", "build", "--repository", "Bad_Repo", "--outputs", str(outputs_file), "--dry-run"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "Bad_Repo" in r.stderr


def _pins(path: Path) -> dict[str, str]:
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    return {line.split("==")[0].lower().replace("_", "-"): line.split("==")[1] for line in lines}


def test_build_context_holds_exactly_what_the_image_needs(tmp_path):
    # That the context builds and trains is shown for real by scripts/test-images.sh (run by .ci/run): it builds
    # every variant from this context and trains the demo in each image.
    archive = image.write_context("cpu", tmp_path / "context.tar.gz")
    with tarfile.open(archive) as tar:
        names = sorted(tar.getnames())
    assert names == sorted(rel for rel, _ in image.context_files("cpu"))
    assert image.DOCKERFILE in names and "trainer/task.py" in names and image.lock_file("cpu") in names


def test_the_cpu_image_runs_the_versions_every_test_runs():
    # tensorflow-cpu is the CUDA-free build of the same TensorFlow release the trainer environment runs.
    image_pins = _pins(REPO_ROOT / image.lock_file("cpu"))
    tested = _pins(REPO_ROOT / "requirements" / "trainer.lock")
    assert image_pins.pop("tensorflow-cpu") == tested["tensorflow"] and "tensorflow" not in image_pins
    differ = {name: (version, tested.get(name)) for name, version in image_pins.items() if tested.get(name) != version}
    assert not differ, f"the cpu image pins versions the tests never ran: {differ}"


#: What each JAX image adds to the cpu image's packages (requirements/image-jax-*.in): JAX and, per accelerator, the
#: runtime JAX's own extra brings.
JAX_ADDS = {"jax-cpu": {"jax", "jaxlib"}, "jax-tpu": {"jax", "jaxlib", "libtpu"},
            "jax-gpu": {"jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda12-pjrt"}}


@pytest.mark.parametrize("variant", sorted(JAX_ADDS))
def test_a_jax_image_is_the_cpu_image_plus_jax_and_its_accelerators_runtime(variant):
    pins, cpu = _pins(REPO_ROOT / image.lock_file(variant)), _pins(REPO_ROOT / image.lock_file("cpu"))
    added = set(pins) - set(cpu)
    assert {n for n in added if not n.startswith("nvidia-")} == JAX_ADDS[variant]
    assert all(n.endswith("-cu12") for n in added if n.startswith("nvidia-")) and (variant == "jax-gpu") == any(
        n.startswith("nvidia-") for n in added)
    # TensorFlow's CPU build (tf.data, the SavedModel export; JAX owns the accelerator) at the tested versions
    assert set(cpu) <= set(pins) and {n: pins[n] for n in cpu} == cpu
    assert pins["keras"] == "3.15.1" and pins["jax"] == domain.JAX_TPU_REQUIREMENTS["jax"] == pins["jaxlib"]


def test_the_jax_tpu_image_holds_the_libtpu_jax_pins_not_one_of_ours():
    pins = _pins(REPO_ROOT / image.lock_file("jax-tpu"))
    wanted = domain.JAX_TPU_REQUIREMENTS["libtpu"]               # jax 0.10.2's metadata: libtpu==0.0.42.*
    assert wanted.endswith(".*") and pins["libtpu"].startswith(wanted[:-1])
    wants = [line for line in (REPO_ROOT / "requirements" / "image-jax-tpu.in").read_text().splitlines()
             if line and not line.startswith("#")]
    assert "jax[tpu]==0.10.2" in wants and not any(line.startswith("libtpu") for line in wants)
    # the TensorFlow tpu image keeps its own, contract-checked pin (tests/ops/image/test_libtpu_contract.py)
    assert _pins(REPO_ROOT / image.lock_file("tpu"))["libtpu"] != pins["libtpu"]


def test_every_run_kind_and_backend_has_an_image_variant_with_its_own_lock_and_tag(tmp_path):
    root = _copy_sources(tmp_path / "a")
    assert image.VARIANTS == tuple(domain.IMAGE_VARIANTS)
    tags = {image.image_tag(v, root) for v in image.VARIANTS}
    assert len(tags) == len(image.VARIANTS)                       # one lock each: one tag each
    for kind in ("cpu", "gpu", "tpu"):
        for backend in domain.FRAMEWORKS:
            variant = domain.image_variant(kind, backend)
            assert image.lock_file(variant) in dict(image.context_files(variant))
            name = image.local_name(variant, root)
            assert name == f"tpuctl/trainer-{variant}:{image.image_tag(variant, root)}"
            uri = image.image_ref(None, variant, project=PROJECT, region=REGION, root=root).uri
            assert image.parse_uri(uri) == image.ImageRef(PROJECT, REGION, image.DEFAULT_REPOSITORY, variant,
                                                          image.image_tag(variant, root))


@pytest.mark.parametrize("line, key", [("jax==0.9.0", "jax==0.10.2"), ("libtpu==0.0.21", "libtpu==0.0.42"),
                                       ("keras<3", "keras==3.15.1"), ("ml-dtypes==0.4.0", "ml-dtypes==0.6.0")])
def test_a_project_cannot_move_the_jax_images_runtime(tmp_path, line, key):
    from tpuctl.services import usercode

    project = tmp_path / "project"
    project.mkdir()
    (project / "model.py").write_text("def build(ctx):\n    return None\n")
    (project / "requirements.txt").write_text(f"pandas>=2\n{line}\n")
    with pytest.raises(UserError) as err:
        usercode.check_requirements(usercode.scan_project(project), REPO_ROOT / image.lock_file("jax-tpu"))
    assert str(err.value).startswith(f"{project / 'requirements.txt'}:2: ") and key in str(err.value)


def test_cloud_build_request_then_no_rebuild_of_an_unchanged_trainer(build_cloud, outputs_file, monkeypatch):
    from google.cloud.devtools import cloudbuild_v1

    fake = build_cloud()
    with storage_emulator(default_bucket=STAGING) as url:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
        first = invoke(["image", "build", "--outputs", str(outputs_file), "--poll-seconds", "0.5"])
        assert first.exit_code == 0, first.output
        ref = image.image_ref(None, "cpu", project=PROJECT, region=REGION)
        assert first.stdout.strip().startswith(f"built and pushed {ref.uri} (build b1")
        creates = fake.creates()
        assert len(creates) == 1
        path, body = creates[0][1], creates[0][2]
        assert path.startswith(f"/v1/projects/{PROJECT}/builds") and f"locations%2F{REGION}" in path
        # Google's own type accepts exactly what was sent
        sent = cloudbuild_v1.Build.from_json(json.dumps(body), ignore_unknown_fields=False)
        obj = f"tpuctl-image-context/trainer-cpu-{ref.tag}.tar.gz"
        assert (sent.source.storage_source.bucket, sent.source.storage_source.object_) == (STAGING, obj)
        assert [s.name for s in sent.steps] == ["gcr.io/cloud-builders/docker"]
        assert list(sent.steps[0].args) == ["build", "--build-arg", "VARIANT=cpu", "-f", "container/Dockerfile",
                                            "-t", ref.uri, "."]
        assert list(sent.images) == [ref.uri] and list(sent.tags) == ["tpuctl", "trainer-cpu"]
        assert sent.timeout.seconds == image.BUILD_TIMEOUT_SECONDS
        # the stack's image builder, never the training account (push + build logs: infra/builder.py)
        assert sent.service_account == f"projects/{PROJECT}/serviceAccounts/{BUILDER}"
        assert sent.options.logging == cloudbuild_v1.BuildOptions.LoggingMode.CLOUD_LOGGING_ONLY
        # the uploaded context is the reproducible archive of exactly the build context
        from gcsfixtures import anonymous_client

        blob = anonymous_client(url).bucket(STAGING).blob(obj)
        assert blob.exists()
        second = invoke(["image", "build", "--outputs", str(outputs_file)])
        assert second.exit_code == 0 and "already exists: nothing to build" in second.stdout
        assert len(fake.creates()) == 1   # no second build call


def test_a_failed_build_is_one_line_with_its_log(build_cloud, outputs_file, monkeypatch):
    detail = "step 0 exited 1: pip could not find tensorflow"       # Cloud Build's failure detail
    build_cloud(statuses=("QUEUED", "FAILURE"), failure=detail)
    with storage_emulator(default_bucket=STAGING) as url:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
        r = invoke(["image", "build", "--outputs", str(outputs_file), "--poll-seconds", "0.5"])
    line = error_line(r, 1)
    assert r.stderr.splitlines()[-1] == line      # the last line; the build's status and its failure detail, its log
    assert "FAILURE" in line and detail in line, line
    assert "cloud-build/builds/b1" in line, line


def test_local_build_without_docker_is_one_line(outputs_file, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))   # no docker, no podman
    r = invoke(["image", "build", "--local", "--outputs", str(outputs_file)])
    line = error_line(r, 2)
    assert "--local" in line and "docker" in line and "podman" in line, line


@pytest.mark.parametrize("variant", ["tpu", "jax-tpu"])
def test_dry_run_prints_the_request_and_calls_nothing(build_cloud, outputs_file, variant):
    fake = build_cloud()
    r = invoke(["image", "build", "--outputs", str(outputs_file), "--dry-run", "--variant", variant])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["image"].startswith(f"{REGION}-docker.pkg.dev/{PROJECT}/tpuctl-trainer/trainer-{variant}:sha256-")
    assert f"requirements/image-{variant}.lock" in doc["context"]
    assert f"VARIANT={variant}" in doc["build"]["steps"][0]["args"]
    assert fake.requests == []


def test_doctor_checks_the_repository_and_who_can_pull(build_cloud):
    from bootstrap import doctor

    fake = build_cloud()
    sa, agent = SA, "service-123@gcp-sa-aiplatform-cc.iam.gserviceaccount.com"
    principals = {"training-sa": sa, "vertex-agent": agent}
    checks = list(doctor.check_image_repository(PROJECT, REGION, "tpuctl-trainer", principals))
    assert [(c.status, c.name) for c in checks] == [("fail", "image repository tpuctl-trainer")]
    assert "does not exist" in checks[0].detail and checks[0].fix.startswith("pulumi up")
    name = f"projects/{PROJECT}/locations/{REGION}/repositories/tpuctl-trainer"
    fake.repositories[name] = [{"role": "roles/artifactregistry.reader", "members": [f"serviceAccount:{sa}"]}]
    checks = {c.name: c for c in doctor.check_image_repository(PROJECT, REGION, "tpuctl-trainer", principals)}
    assert checks["image repository tpuctl-trainer"].status == "pass"
    assert checks["training-sa pulls from tpuctl-trainer"].status == "pass"
    missing = checks["vertex-agent pulls from tpuctl-trainer"]
    assert missing.status == "fail" and f"--member serviceAccount:{agent} --role roles/artifactregistry.reader" in missing.fix


@pytest.mark.parametrize("network", ["host --privileged", "$(id)", "x" * 65])
def test_a_bad_build_network_is_one_line_before_any_engine_call(monkeypatch, network):
    calls = []
    monkeypatch.setenv("TPUCTL_DOCKER_BUILD_NETWORK", network)
    with pytest.raises(UserError) as err:
        image.build_local("cpu", run=lambda *a, **k: calls.append(a))
    assert "TPUCTL_DOCKER_BUILD_NETWORK" in str(err.value) and "\n" not in str(err.value) and not calls


@pytest.mark.parametrize("args, env, says", [
    (["xpu"], {}, "error: unknown variant 'xpu' (use cpu, gpu, tpu, jax-cpu, jax-gpu, jax-tpu)"),
    (["cpu"], {"TPUCTL_IMAGE_RUN_TIMEOUT": "abc"}, "error: TPUCTL_IMAGE_RUN_TIMEOUT=abc must be whole seconds"),
    (["cpu"], {"TPUCTL_IMAGE_RUN_TIMEOUT": "0"}, "error: TPUCTL_IMAGE_RUN_TIMEOUT=0 must be whole seconds"),
])
def test_the_image_check_refuses_bad_input_in_one_line_before_touching_an_engine(args, env, says):
    proc = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "test-images.sh"), *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **env})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stderr.startswith(says), proc.stderr
    assert proc.stdout == ""   # no engine started, nothing built


def test_the_build_runs_as_the_image_builder_and_an_older_stack_keeps_its_training_account():
    from ground.outputs import StackOutputs

    both = StackOutputs.model_validate({"training_service_account": SA, "image_builder_service_account": BUILDER})
    assert image.build_account(both) == BUILDER
    older = StackOutputs.model_validate({"training_service_account": SA})
    assert image.build_account(older) == SA
    assert image.build_account(None) is None
