"""``tpuctl serve`` (TF Serving on an export, in docker/podman), ``tpuctl predict`` (images to a TF Serving URL or a
Vertex AI Endpoint; ``--batch`` for a batch prediction job) and ``tpuctl deploy`` (Vertex AI Model + Endpoint)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from ground import domain
from ground.domain.prediction import DEFAULT_PREDICTION_MACHINE, TF_SERVING_IMAGE
from ground.errors import UserError
from tpuctl.commands.options import image_ref, say, shown, stack_outputs, strict_json
from tpuctl.services import serving

_DIR = typer.Option("runs", "--dir", help="Folder of local runs (RUN may be a run name or a unique prefix).")
_STACK = typer.Option(None, "--stack", help="Stack whose outputs give the project, region and artifacts bucket.")
_OUTPUTS = typer.Option(None, "--outputs", help="The same, from this outputs JSON.")
_REGION = typer.Option(None, "--region", help="Vertex AI region (default: the stack's).")
_IMAGE = typer.Option(None, "--image", callback=image_ref,
                      help="Prediction container image instead of the prebuilt TF2 CPU one.")
_MACHINE = typer.Option(DEFAULT_PREDICTION_MACHINE, "--machine-type", help="Machine type of each prediction replica.")


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
    app.command("predict")(predict)
    app.command("deploy")(deploy)


def serve(
    ref: str = typer.Argument(..., metavar="RUN|EXPORT_DIR", help="A run (name/prefix/folder) or an export version folder."),
    model_name: Optional[str] = typer.Option(None, "--model-name", help="Model name in the URL (default: the export's model folder)."),
    port: int = typer.Option(8501, "--port", help="Host port for the REST API (on 127.0.0.1)."),
    grpc_port: int = typer.Option(8500, "--grpc-port", help="Host port for gRPC (on 127.0.0.1)."),
    batching: bool = typer.Option(False, "--batching", help="Server-side batching (writes batching_parameters.txt next to the export)."),
    image: Optional[str] = typer.Option(None, "--image", callback=image_ref,
                                        help=f"TF Serving image (default: {TF_SERVING_IMAGE})."),
    base: str = _DIR,
    dry_run: bool = typer.Option(False, "--dry-run", help="Only print the command (and the batching file)."),
) -> None:
    """Serve an export with TF Serving in docker (or podman), in the foreground; Ctrl-C stops it."""
    export = serving.resolve_export(ref, runs_dir=base, model_name=model_name)
    runtime = None if dry_run else serving.container_runtime()
    plan = serving.plan_serve(export, port=port, grpc_port=grpc_port, batching=batching,
                              image=image or domain.TF_SERVING_IMAGE, runtime=runtime)
    say(plan.command)
    if dry_run:
        if plan.batching_file is not None and plan.batching_text is not None:
            say(f"# {plan.batching_file}:")
            say(plan.batching_text.rstrip("\n"))
        return
    code = serving.run_serve(plan, on_start=lambda: typer.echo(
        f"ready: REST http://127.0.0.1:{port}{domain.predict_path(export.model_name)} (Ctrl-C stops)", err=True))
    if code:

        raise UserError(serve_failure(plan, code), code)


def serve_failure(plan, code: int) -> str:
    """The one `error:` line after the container runtime's own output. docker/podman exit 125 when they could
    not start the container at all (no daemon, no permission, image not pulled), 126/127 when its command could
    not run; anything else is TF Serving's own exit status."""
    runtime = Path(plan.runtime or plan.argv[0]).name
    if code == 130:
        return "interrupted"
    if code in (125, 126, 127):
        return (f"{runtime} could not start the TF Serving container (exit {code}; its message is above): is the "
                f"{runtime} daemon running, may you use it, and can it pull the image? The command: {plan.command}")
    return f"TF Serving exited with code {code} (its log is above); the command: {plan.command}"


def _render(predictions, as_json: bool) -> None:
    """Predictions as lines or strict JSON: per image its top classes, each with its id and, when known, its name
    (``cat (class 0) 0.912``; ``class 3 0.041`` unnamed). Class names from the server or a manifest are terminal-safe
    text, and a probability the server sent as NaN/Infinity is unknown ("?", null in JSON), never printed as a
    number."""

    if as_json:
        typer.echo(strict_json([{"image": p.path, "top": [{"class_id": i, "class_name": n, "probability": v}
                                                           for i, n, v in p.top]} for p in predictions]))
        return
    for p in predictions:
        ranked = ", ".join(f"{f'{shown(n, limit=80)} (class {i})' if n is not None else f'class {i}'} "
                           f"{f'{v:.3f}' if v is not None else '?'}" for i, n, v in p.top)
        typer.echo(f"{shown(p.path)}: {ranked}")


def predict(
    target: str = typer.Argument(..., metavar="URL|ENDPOINT|RUN",
                                 help="http://HOST:8501/v1/models/NAME:predict, projects/P/locations/R/endpoints/ID, "
                                      "or with --batch a run / export / projects/P/locations/R/models/ID."),
    images: Optional[List[str]] = typer.Argument(None, metavar="IMAGE...",
                                                 help=f"Image files of the formats make-tfrecords reads: "
                                                      f"{serving.ACCEPTED}."),
    instances_file: Optional[str] = typer.Option(None, "--instances", help="A JSON file of instances for a model that takes its own inputs (a plug-in's export): {\"instances\": [{\"feature\": value, ...}]}."),
    batch: Optional[str] = typer.Option(None, "--batch", help="gs:// folder of images: create a Vertex AI batch prediction job."),
    batch_size: int = typer.Option(16, "--batch-size", help="Images per request (1-256)."),
    max_bytes: int = typer.Option(4 * 1024 * 1024, "--max-bytes", help="Largest image file accepted (at most 64 MiB)."),
    timeout: float = typer.Option(30.0, "--timeout", help="Seconds one request may take in all (connect, answer and every byte of it)."),
    top: int = typer.Option(3, "--top", help="Classes shown per image."),
    manifest: Optional[Path] = typer.Option(None, "--manifest", help="Data manifest.json (or its folder) naming the classes."),
    as_json: bool = typer.Option(False, "--json", help="One JSON list."),
    stack: Optional[str] = _STACK,
    outputs: Optional[Path] = _OUTPUTS,
    region: Optional[str] = _REGION,
    base: str = _DIR,
    machine_type: str = _MACHINE,
    max_replicas: int = typer.Option(1, "--max-replicas", help="With --batch: most replicas of the job."),
    image: Optional[str] = _IMAGE,
    dry_run: bool = typer.Option(False, "--dry-run", help="With --batch: print the job, create nothing."),
) -> None:
    """Top classes of images from a TF Serving URL or a Vertex AI Endpoint (or, with --batch, a batch job)."""
    if batch is not None:
        if images:
            raise UserError("--batch reads its images from Cloud Storage: give no IMAGE arguments with it")
        plan = serving.plan_batch(batch, target, stack_outputs(stack, outputs, dry_run=dry_run), runs_dir=base, region=region,
                                  machine_type=machine_type, max_replicas=max_replicas, image=image)
        if plan.warning:
            say(plan.warning, err=True)
        job = serving.build_batch_job(plan)
        if dry_run:
            typer.echo(json.dumps({"parent": plan.parent, "batchPredictionJob": serving.as_rest(job)}, indent=2))
            return
        created = serving.submit_batch(plan, echo=lambda m: say(m, err=True))
        say(f"batch prediction job: {created.name}")
        say(f"predictions will be written under {plan.output_prefix}")
        return
    if not 1 <= top <= 1000:
        raise UserError(f"--top must be 1-1000 (got {top})")
    if not 0 < timeout <= 3600:
        raise UserError(f"--timeout must be more than 0 and at most 3600 seconds (got {timeout:g})")
    if instances_file is not None and images:
        raise UserError("give IMAGE files or --instances FILE, not both")
    files = serving.read_instances(instances_file) if instances_file else serving.read_images(list(images or []),
                                                                                            max_bytes)
    names = serving.read_class_names(str(manifest)) if manifest else None
    if target.startswith("projects/"):
        found = serving.predict_vertex(target, files, batch_size=batch_size, timeout=timeout, class_names=names, k=top)
    else:
        found = serving.predict_rest(target, files, batch_size=batch_size, timeout=timeout, class_names=names, k=top)
    _render(found, as_json)


def deploy(
    ref: str = typer.Argument(..., metavar="RUN", help="A run (name/prefix/folder), an export folder or a gs:// export."),
    stack: Optional[str] = _STACK,
    outputs: Optional[Path] = _OUTPUTS,
    region: Optional[str] = _REGION,
    base: str = _DIR,
    machine_type: str = _MACHINE,
    min_replicas: int = typer.Option(1, "--min-replicas", help="Fewest replicas of the deployment."),
    max_replicas: int = typer.Option(1, "--max-replicas", help="Most replicas of the deployment."),
    endpoint: Optional[str] = typer.Option(None, "--endpoint", help="Endpoint display name to reuse or create (default tpuctl-<model>)."),
    image: Optional[str] = _IMAGE,
    model_name: Optional[str] = typer.Option(None, "--model-name", help="Model name (default: the export's model folder)."),
    tf_serving: bool = typer.Option(False, "--tf-serving", help="Serve with TF Serving from the stack's image repository "
                                    "(tf-serving:<version>; --image names another copy) instead of the prebuilt TF2 "
                                    "image; the default once that image reaches its end of availability."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the requests, upload and create nothing."),
) -> None:
    """Upload an export as a Vertex AI Model and deploy it to an Endpoint (100% of its traffic)."""
    planned = stack_outputs(stack, outputs, dry_run=dry_run)
    export = serving.resolve_export(ref, runs_dir=base, model_name=model_name, outputs=planned)
    plan = serving.plan_deploy(export, planned, region=region, machine_type=machine_type,
                               min_replicas=min_replicas, max_replicas=max_replicas, endpoint=endpoint, image=image,
                               tf_serving=tf_serving)
    if plan.warning:
        say(plan.warning, err=True)
    if dry_run:
        typer.echo(json.dumps(serving.dry_run_document(plan), indent=2))
        return
    done = serving.deploy(plan, echo=lambda m: say(m, err=True))
    say(f"deployed model {done.model} to {done.endpoint} (deployed model id {done.deployed_model_id}, "
        "100% of traffic)")
    say(f"predict: tpuctl predict {done.endpoint} IMAGE...")
