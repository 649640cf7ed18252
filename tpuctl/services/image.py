"""The trainer's container image: build context, content-hash tag, Cloud Build, Artifact Registry lookup.

A Vertex AI job that runs this image runs the same program in the same environment as every local run
and test: ``container/Dockerfile`` installs exactly ``requirements/image-<variant>.lock`` and copies
``trainer/``. The variants (``domain.IMAGE_VARIANTS``: cpu, gpu, tpu for TensorFlow; jax-cpu, jax-gpu, jax-tpu for
Keras 3 on JAX) and which run uses which (``domain.image_variant``) are the catalogue's. The tag is a content hash of those files, so an unchanged trainer is never rebuilt and a
job always names the exact image it runs.

Facts (checked 2026-11):
- Artifact Registry Docker image names: ``LOCATION-docker.pkg.dev/PROJECT/REPOSITORY/IMAGE:TAG``
  (cloud.google.com/artifact-registry/docs/docker/names); a tag is 1-128 of ``[A-Za-z0-9_.-]``, not starting
  with ``.`` or ``-`` (the Docker reference grammar, distribution/reference).
- Cloud Build ``projects.locations.builds.create`` (google.devtools.cloudbuild.v1.CloudBuild.CreateBuild,
  googleapis/google/devtools/cloudbuild/v1/cloudbuild.proto) returns a long-running operation whose metadata
  names the build; ``gcr.io/cloud-builders/docker`` is the Docker builder step
  (cloud.google.com/build/docs/building/build-containers). A build that runs as a user-specified service
  account must log to Cloud Logging (``options.logging = CLOUD_LOGGING_ONLY``) or a user bucket
  (cloud.google.com/build/docs/securing-builds/configure-user-specified-service-accounts).
- Terminal build states: SUCCESS, FAILURE, INTERNAL_ERROR, TIMEOUT, CANCELLED, EXPIRED (Build.Status in
  the same proto).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cloud import clients
from cloud.google import api_exceptions, artifactregistry_v1, cloudbuild_v1, duration_pb2
from ground import domain
from ground.envs import REPO_ROOT
from ground.errors import UserError
from ground.files import write_atomically
from ground.outputs import StackOutputs
from ground.polling import poll
from tpuctl.services import usercode

VARIANTS: tuple[str, ...] = tuple(domain.IMAGE_VARIANTS)
DOCKERFILE = "container/Dockerfile"
#: The user's project folder layered on the trainer image (docs/your-code.md).
CODE_DOCKERFILE = "container/Dockerfile.code"
DEFAULT_REPOSITORY = "tpuctl-trainer"
DOCKER_BUILDER = "gcr.io/cloud-builders/docker"
#: How long one Cloud Build may run (the build's own timeout) and how long tpuctl follows it.
BUILD_TIMEOUT_SECONDS = 3600
TERMINAL = ("SUCCESS", "FAILURE", "INTERNAL_ERROR", "TIMEOUT", "CANCELLED", "EXPIRED")


def check_variant(variant: str) -> str:
    if variant not in VARIANTS:
        raise UserError(f"image variant {variant!r} must be one of: {', '.join(VARIANTS)}")
    return variant


def lock_file(variant: str) -> str:
    return f"requirements/image-{check_variant(variant)}.lock"


def context_files(variant: str, root: Path = REPO_ROOT) -> list[tuple[str, Path]]:
    """(path in the build context, file on disk), sorted: the Dockerfile, the variant's lock, trainer/*.py."""
    files = {DOCKERFILE: root / DOCKERFILE, lock_file(variant): root / lock_file(variant)}
    for path in sorted((root / "trainer").rglob("*.py")):
        if "__pycache__" not in path.parts:
            files[path.relative_to(root).as_posix()] = path
    for rel, path in files.items():
        if not path.is_file():
            raise UserError(f"build context file {rel} is missing from {root}")
    return sorted(files.items())


def image_tag(variant: str, root: Path = REPO_ROOT) -> str:
    """``sha256-<20 hex>`` over the build context's paths and bytes: same sources, same tag."""
    digest = hashlib.sha256()
    for rel, path in context_files(variant, root):
        digest.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"sha256-{digest.hexdigest()[:20]}"


@dataclass(frozen=True)
class ImageRef:
    project: str
    region: str
    repository: str
    variant: str
    tag: str
    #: an image of the user's code: the tag of the trainer image it is layered on (None: the trainer's own image)
    base_tag: str | None = None

    @property
    def package(self) -> str:
        return f"trainer-{self.variant}" if self.base_tag is None else f"code-{self.variant}"

    @property
    def base(self) -> ImageRef:
        """The trainer image a code image is layered on (itself for the trainer's own)."""
        if self.base_tag is None:
            return self
        return ImageRef(self.project, self.region, self.repository, self.variant, self.base_tag)

    @property
    def uri(self) -> str:
        return f"{self.region}-docker.pkg.dev/{self.project}/{self.repository}/{self.package}:{self.tag}"

    @property
    def tag_name(self) -> str:
        """Artifact Registry resource name of the tag."""
        return artifactregistry_v1.ArtifactRegistryClient.tag_path(self.project, self.region, self.repository,
                                                                   self.package, self.tag)


def image_ref(outputs: StackOutputs | None, variant: str, *, project: str | None = None,
              region: str | None = None, repository: str | None = None, root: Path = REPO_ROOT) -> ImageRef:
    """Where the image of ``variant`` lives for a stack (outputs), with explicit overrides."""
    project = project or (outputs.project if outputs else None)
    region = region or (outputs.region if outputs else None)
    if not project or not region:
        raise UserError("the image needs a project and a region: pass --stack/--outputs (or --project and --region)")
    repository = str(repository or (outputs.raw.get("trainer_image_repository") if outputs else None)
                     or DEFAULT_REPOSITORY)
    domain.validate_repository_id(repository)
    return ImageRef(project, region, repository, check_variant(variant), image_tag(variant, root))


def code_tag(variant: str, project: usercode.Project, root: Path = REPO_ROOT) -> str:
    """``sha256-<20 hex>`` over the trainer image's tag, the code layer's Dockerfile and the project's files."""
    digest = hashlib.sha256()
    digest.update(image_tag(variant, root).encode() + b"\0" + (root / CODE_DOCKERFILE).read_bytes() + b"\0")
    digest.update(project.digest().encode())
    return f"sha256-{digest.hexdigest()[:20]}"


def code_image_ref(outputs: StackOutputs | None, variant: str, project: usercode.Project, *,
                   project_id: str | None = None, region: str | None = None, repository: str | None = None,
                   root: Path = REPO_ROOT) -> ImageRef:
    """The image of ``project`` (a user's folder) on the trainer image of ``variant``, in the stack's repository."""
    base = image_ref(outputs, variant, project=project_id, region=region, repository=repository, root=root)
    return ImageRef(base.project, base.region, base.repository, base.variant, code_tag(variant, project, root),
                    base_tag=base.tag)


def code_context_files(project: usercode.Project, root: Path = REPO_ROOT) -> list[tuple[str, Path]]:
    """The code layer's build context: its Dockerfile and ``code/<file>`` for every file the project ships."""
    files = [(CODE_DOCKERFILE, root / CODE_DOCKERFILE)]
    files += [(f"code/{f.rel}", f.path) for f in project.files]
    return sorted(files)


_URI = re.compile(r"^(?P<region>[a-z0-9-]+)-docker\.pkg\.dev/(?P<project>[a-z][a-z0-9-]+)/(?P<repository>[a-z0-9-]+)"
                  rf"/trainer-(?P<variant>{'|'.join(map(re.escape, VARIANTS))}):(?P<tag>sha256-[0-9a-f]{{20}})$")


def parse_uri(uri: str) -> ImageRef | None:
    """The ImageRef of a URI ``tpuctl image build`` makes; None for any other image."""
    m = _URI.match(uri)
    if not m:
        return None
    return ImageRef(m["project"], m["region"], m["repository"], m["variant"], m["tag"])


def write_context(variant: str, dest: Path, root: Path = REPO_ROOT, project: usercode.Project | None = None) -> Path:
    """A reproducible ``.tar.gz`` of exactly the build context (fixed mtimes/owners, sorted members); with
    ``project``, the code layer's context too (``code/…`` and its Dockerfile)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    members = context_files(variant, root) + (code_context_files(project, root) if project is not None else [])
    shipped = {f"code/{f.rel}": f for f in project.files} if project is not None else {}
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=9) as tar:
        for rel, path in members:
            # the user's files as they were scanned (project.read): one changed since (a key swapped in) is refused
            data = project.read(shipped[rel]) if project is not None and rel in shipped else path.read_bytes()
            info = tarfile.TarInfo(rel)
            # a script the user may run as ./FILE keeps its owner's x bit (as everyone's: the image runs as uid 10001)
            executable = rel in shipped and shipped[rel].executable
            info.size, info.mode, info.mtime = len(data), 0o755 if executable else 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return write_atomically(dest, buf.getvalue())


def build_account(outputs: StackOutputs | None) -> str | None:
    """The service account a Cloud Build of the stack runs as: its image builder (``image_builder_service_account``,
    infra/builder.py: push, build logs, the build context; ``domain.IMAGE_BUILDER_ROLES``); a stack deployed before
    the builder existed has none, and its training account is used as before (it cannot push until ``pulumi up``
    creates the builder; ``tpuctl doctor`` says so)."""
    if outputs is None:
        return None
    return outputs.image_builder_service_account or outputs.training_service_account


def build_request(ref: ImageRef, bucket: str, obj: str, service_account: str | None = None):
    """The ``cloudbuild_v1.Build`` that builds and pushes ``ref`` from ``gs://bucket/obj``."""
    options = cloudbuild_v1.BuildOptions(logging=cloudbuild_v1.BuildOptions.LoggingMode.CLOUD_LOGGING_ONLY)
    base = ref.base
    trainer_build = ["build", "--build-arg", f"VARIANT={ref.variant}", "-f", DOCKERFILE, "-t", base.uri, "."]
    if ref.base_tag is None:
        steps = [cloudbuild_v1.BuildStep(name=DOCKER_BUILDER, args=trainer_build)]
    else:   # the trainer image when it is not pushed yet (same content tag: the same image), then the code layer
        steps = [cloudbuild_v1.BuildStep(name=DOCKER_BUILDER, entrypoint="bash",
                                         args=["-c", f"docker pull {base.uri} || docker {shlex.join(trainer_build)}"]),
                 cloudbuild_v1.BuildStep(name=DOCKER_BUILDER, args=["build", "--build-arg", f"BASE={base.uri}", "-f",
                                                                    CODE_DOCKERFILE, "-t", ref.uri, "."])]
    build = cloudbuild_v1.Build(
        source=cloudbuild_v1.Source(storage_source=cloudbuild_v1.StorageSource(bucket=bucket, object_=obj)),
        steps=steps,
        images=[base.uri, ref.uri] if ref.base_tag else [ref.uri],
        timeout=duration_pb2.Duration(seconds=BUILD_TIMEOUT_SECONDS),
        tags=["tpuctl", ref.package],
        options=options,
    )
    if service_account:
        build.service_account = cloudbuild_v1.CloudBuildClient.service_account_path(ref.project, service_account)
    return build


def build_document(ref: ImageRef, bucket: str, obj: str, service_account: str | None = None,
                   project: usercode.Project | None = None) -> dict:
    """What ``image build --dry-run`` prints: the image, its build context's files and the Cloud Build request as the
    REST API spells it."""
    request = build_request(ref, bucket, obj, service_account)
    members = context_files(ref.variant) + (code_context_files(project) if project is not None else [])
    return {"image": ref.uri, "context": [rel for rel, _ in members],
            "build": json.loads(cloudbuild_v1.Build.to_json(request, always_print_fields_with_no_presence=False))}


def tag_exists(ref: ImageRef, client=None) -> bool:
    client = client or clients.gapic(artifactregistry_v1.ArtifactRegistryClient, "artifactregistry")
    with clients.google_errors(f"looking up image {ref.uri}",
                               forbidden=f"permission denied reading {ref.tag_name}: you need "
                                         "artifactregistry.tags.get (roles/artifactregistry.reader)"):
        try:
            client.get_tag(name=ref.tag_name)
        except api_exceptions.NotFound:
            return False
    return True


@dataclass
class BuildResult:
    ref: ImageRef
    built: bool                  # False: the tag already existed
    build_id: str | None = None
    log_url: str | None = None
    status: str | None = None


def build(ref: ImageRef, staging_bucket: str, *, service_account: str | None = None,
          on_status: Callable[[str], None] | None = None, poll_seconds: float = 5.0,
          timeout: float = BUILD_TIMEOUT_SECONDS + 600, build_client=None, registry_client=None,
          storage_client=None, root: Path = REPO_ROOT, sleep: Callable[[float], None] = time.sleep,
          project: usercode.Project | None = None) -> BuildResult:
    """Build and push ``ref`` with Cloud Build unless its tag exists; follow the build to its end. A code image
    (``project``) is built on the trainer image, which is built first when it is not pushed yet."""
    if tag_exists(ref, registry_client):
        return BuildResult(ref, built=False)
    say = on_status or (lambda _: None)
    obj = f"tpuctl-image-context/{ref.package}-{ref.tag}.tar.gz"
    _upload_context(ref.variant, staging_bucket, obj, storage_client, root, project)
    say(f"uploaded the build context to gs://{staging_bucket}/{obj}")
    client = build_client or clients.gapic(cloudbuild_v1.CloudBuildClient, "cloudbuild")
    parent = cloudbuild_v1.CloudBuildClient.common_location_path(ref.project, ref.region)
    with clients.google_errors(f"creating a Cloud Build in {parent}",
                               forbidden=f"permission denied creating a build in {parent}: you need "
                                         "cloudbuild.builds.create (roles/cloudbuild.builds.editor)"
                                         + (f" and iam.serviceAccounts.actAs on {service_account} "
                                            "(roles/iam.serviceAccountUser on that account)" if service_account else "")):
        operation = client.create_build(request={"parent": parent, "project_id": ref.project,
                                                 "build": build_request(ref, staging_bucket, obj, service_account)})
        meta = operation.metadata
    build_id = meta.build.id
    name = f"{parent}/builds/{build_id}"

    def read():
        with clients.google_errors(f"following Cloud Build {name}"):
            return client.get_build(request={"name": name})

    def status_of(build) -> str:
        return cloudbuild_v1.Build.Status(build.status).name

    current = poll(read, lambda build: status_of(build) in TERMINAL, interval=poll_seconds, timeout=timeout,
                   expired=lambda build: f"Cloud Build {name} is still {status_of(build)} after {timeout:.0f} s; "
                                         f"follow it at {build.log_url or 'the Cloud Build console'}",
                   key=status_of, on_change=lambda build: say(f"build {build_id}: {status_of(build)}"), sleep=sleep)
    status = status_of(current)
    if status != "SUCCESS":
        detail = current.failure_info.detail or current.status_detail or status
        raise UserError(f"Cloud Build {build_id} ended {status}: {detail.splitlines()[0] if detail else status}"
                        f" (log: {current.log_url or 'n/a'})", 1)
    return BuildResult(ref, True, build_id, current.log_url, status)


def _upload_context(variant: str, bucket: str, obj: str, storage_client, root: Path,
                    project: usercode.Project | None = None) -> None:
    client = storage_client or clients.storage_client()
    with tempfile.TemporaryDirectory(prefix="tpuctl-image-") as tmp:
        archive = write_context(variant, Path(tmp) / "context.tar.gz", root, project)
        with clients.google_errors(f"uploading the build context to gs://{bucket}",
                                   not_found=f"staging bucket gs://{bucket} does not exist (pulumi up)",
                                   forbidden=f"permission denied writing gs://{bucket}/{obj}: you need "
                                             "storage.objects.create on the staging bucket"):
            client.bucket(bucket).blob(obj).upload_from_filename(str(archive), content_type="application/gzip")


#: A Docker network name (what ``docker build --network`` takes): letters, digits and ``_.-``, at most 64.
_NETWORK = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def local_name(variant: str, root: Path = REPO_ROOT, project: usercode.Project | None = None) -> str:
    """The image name a local build gets: ``tpuctl/trainer-VARIANT:TAG`` (the same content tag as Cloud Build's);
    with a user's ``project``, ``tpuctl/code-VARIANT:TAG`` (its code layer)."""
    if project is not None:
        return f"tpuctl/code-{check_variant(variant)}:{code_tag(variant, project, root)}"
    return f"tpuctl/trainer-{check_variant(variant)}:{image_tag(variant, root)}"


def container_tool() -> str:
    tool = shutil.which("docker") or shutil.which("podman")
    if tool is None:
        raise UserError("--local needs docker or podman on PATH; without them drop --local to build with Cloud Build")
    return tool


def build_local(variant: str, *, also_tag: str | None = None, root: Path = REPO_ROOT,
                run=subprocess.run, project: usercode.Project | None = None) -> tuple[str, bool]:
    """``docker build`` (or podman) of exactly the Cloud Build context on this machine.

    Returns (local image name, built): an image already tagged with the current sources' content tag is not built
    again. ``also_tag`` adds a second tag (the Artifact Registry URI when a stack is given). With a user's
    ``project``: its code layer (container/Dockerfile.code) on the trainer image, which is built first if missing.
    The build's network is the engine's default unless ``$TPUCTL_DOCKER_BUILD_NETWORK`` names one
    (scripts/test-images.sh sets ``host`` for an engine started without a bridge).
    """
    network = os.environ.get("TPUCTL_DOCKER_BUILD_NETWORK") or None
    if network is not None and not _NETWORK.fullmatch(network):
        raise UserError(f"TPUCTL_DOCKER_BUILD_NETWORK={network[:80]!r} is not a network name (e.g. host, bridge, none)")
    tool = container_tool()
    base = local_name(variant, root)
    name = local_name(variant, root, project)

    def missing(image: str) -> bool:
        return run([tool, "image", "inspect", image], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0

    def docker_build(args: list[str], with_code: bool) -> None:
        with tempfile.TemporaryDirectory(prefix="tpuctl-image-") as tmp:
            archive = write_context(variant, Path(tmp) / "context.tar.gz", root, project if with_code else None)
            with tarfile.open(archive) as tar:
                tar.extractall(Path(tmp) / "ctx", filter="data")
            proc = run([tool, "build", *(["--network", network] if network else []), *args, "."], cwd=Path(tmp) / "ctx")
        if proc.returncode != 0:
            raise UserError(f"{Path(tool).name} build failed (exit {proc.returncode}); its output is above", 1)

    exists = not missing(name)
    if not exists:
        if project is None or missing(base):
            docker_build(["--build-arg", f"VARIANT={variant}", "-f", DOCKERFILE, "-t", base], with_code=False)
        if project is not None:
            docker_build(["--build-arg", f"BASE={base}", "-f", CODE_DOCKERFILE, "-t", name], with_code=True)
    if also_tag:
        proc = run([tool, "tag", name, also_tag])
        if proc.returncode != 0:
            raise UserError(f"{Path(tool).name} tag {name} {also_tag} failed (exit {proc.returncode})", 1)
    return name, not exists
