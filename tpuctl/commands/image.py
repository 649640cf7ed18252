"""``tpuctl image tag|build``: the trainer's container image (container/Dockerfile) for Vertex AI jobs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ground.envs import REPO_ROOT
from ground.errors import UserError
from tpuctl.commands.options import say, shown, stack_outputs
from tpuctl.services import image, usercode

image_app = typer.Typer(
    name="image", no_args_is_help=True,
    help="The trainer's container image: one Dockerfile, variants cpu/gpu/tpu (TensorFlow) and jax-cpu/jax-gpu/jax-tpu "
         "(Keras 3 on JAX), tagged by a hash of its sources.",
)

_VARIANT = typer.Option("cpu", "--variant", help="cpu | gpu (TensorFlow's CUDA wheels) | tpu (tensorflow-tpu + libtpu) | "
                        "jax-cpu | jax-gpu (JAX's CUDA 12 wheels) | jax-tpu (JAX with the libtpu it pins): Keras 3 on "
                        "JAX, beside TensorFlow's CPU build.")
_STACK = typer.Option(None, "--stack", help="Project, region, staging bucket and repository from this stack's outputs.")
_OUTPUTS = typer.Option(None, "--outputs", help="The same from this outputs JSON (`pulumi stack output --json`).")
_REPO = typer.Option(None, "--repository", help="Artifact Registry Docker repository (default: the stack's, else tpuctl-trainer).")
_CODE = typer.Option(None, "--code", help="Your project folder, layered on the trainer image (code-VARIANT:TAG, tagged by its content; docs/your-code.md).")


def _project(code, variant: str, *, check: bool = False):
    """The user's project folder as it ships (None without --code); ``check``: its requirements.txt against the
    image's pinned versions, and the files left out as secrets named."""
    if code is None:
        return None
    project = usercode.scan_project(code)
    if check:
        usercode.check_requirements(project, REPO_ROOT / image.lock_file(variant))
        if project.secrets:
            # each name on the note's one line (a name with a line break could forge a line of its own)
            say(f"note: left out of the image as secrets: {', '.join(shown(n) for n in project.secrets)}", err=True)
    return project


def register(app: typer.Typer) -> None:
    app.add_typer(image_app, name="image")


def _ref(variant, stack, outputs, repository, project=None, region=None, dry_run=False, code=None):
    image.check_variant(variant)
    so = stack_outputs(stack, outputs, dry_run=dry_run)
    if code is not None:
        return so, image.code_image_ref(so, variant, code, project_id=project, region=region, repository=repository)
    return so, image.image_ref(so, variant, project=project, region=region, repository=repository)


@image_app.command("tag")
def tag(
    variant: str = _VARIANT,
    stack: Optional[str] = _STACK,
    outputs: Optional[Path] = _OUTPUTS,
    repository: Optional[str] = _REPO,
    local: bool = typer.Option(False, "--local", help="Print the name a local build gets (tpuctl/trainer-VARIANT:TAG)."),
    code: Optional[Path] = _CODE,
) -> None:
    """Print the image URI (or, with no stack, the content tag) of the current trainer sources (with --code: of them
    and your project)."""
    project = _project(code, image.check_variant(variant))
    if local:
        say(image.local_name(variant, project=project))
        return
    if stack is None and outputs is None:
        say(image.code_tag(variant, project) if project else image.image_tag(variant))
        return
    _, ref = _ref(variant, stack, outputs, repository, code=project)
    say(ref.uri)


@image_app.command("build")
def build(
    variant: str = _VARIANT,
    stack: Optional[str] = _STACK,
    outputs: Optional[Path] = _OUTPUTS,
    repository: Optional[str] = _REPO,
    project: Optional[str] = typer.Option(None, "--project", help="Override the stack's project."),
    region: Optional[str] = typer.Option(None, "--region", help="Override the stack's region (the repository's location)."),
    local: bool = typer.Option(False, "--local", help="Build with a local docker/podman instead of Cloud Build (no stack needed: tpuctl/trainer-VARIANT:TAG)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the tag and the Cloud Build request; build nothing."),
    poll_seconds: float = typer.Option(5.0, "--poll-seconds", min=0.5, max=300, help="How often to check the build (0.5-300 s)."),
    code: Optional[Path] = _CODE,
) -> None:
    """Build and push the trainer image with Cloud Build, or build it locally with --local (skipped when the tag already exists); with --code, your project layered on it."""
    user = _project(code, image.check_variant(variant), check=True)
    dockerfiles = f"{image.DOCKERFILE}" + (f" + {image.CODE_DOCKERFILE}" if user else "")
    if local and stack is None and outputs is None and project is None:
        # No stack: a local image only (run it with docker run, see docs/image.md).
        if dry_run:
            say(f"would build {image.local_name(variant, project=user)} locally from {dockerfiles}")
            return
        name, built = image.build_local(variant, project=user)
        say(f"built {name}" if built else f"{name} already exists: nothing to build")
        return
    so, ref = _ref(variant, stack, outputs, repository, project, region, dry_run=dry_run, code=user)
    if local:
        if dry_run:
            say(f"would build {image.local_name(variant, project=user)} locally from {dockerfiles}, tagged {ref.uri}")
            return
        name, built = image.build_local(variant, also_tag=ref.uri, project=user)
        say(f"{'built' if built else 'already built'} {name}, tagged {ref.uri} (push it with: docker push {ref.uri})")
        return
    staging = so.bucket("staging") if so else None
    if not staging:
        raise UserError("Cloud Build needs the stack's staging bucket for the build context: pass --stack/--outputs")
    obj = f"tpuctl-image-context/{ref.package}-{ref.tag}.tar.gz"
    if dry_run:
        typer.echo(json.dumps(image.build_document(ref, staging, obj, image.build_account(so),
                                                   project=user), indent=2))
        return
    result = image.build(ref, staging, service_account=image.build_account(so),
                         on_status=lambda line: say(line, err=True), poll_seconds=poll_seconds, project=user)
    if not result.built:
        say(f"{ref.uri} already exists: nothing to build")
    else:
        say(f"built and pushed {ref.uri} (build {result.build_id}; log: {result.log_url})")
