"""Serving a trained export, one module per job:

- ``exports``: where the export is (a folder, a run, ``gs://``), whether it is one, its files and class names;
- ``local``: ``tpuctl serve`` (TF Serving in a local container);
- ``predict``: ``tpuctl predict`` over REST or a Vertex AI Endpoint;
- ``deploy``: ``tpuctl deploy`` (upload, Model, Endpoint);
- ``batch``: ``tpuctl predict --batch`` (a Vertex AI batch prediction job).

Facts about TF Serving and Vertex AI prediction (ports, layout, images, formats) come from
``ground.domain`` (prediction.py). The names the CLI uses are exported here.
"""

from tpuctl.services.serving.batch import BatchPlan, build_batch_job, list_batch_images, plan_batch, submit_batch
from tpuctl.services.serving.deploy import (
    Deployment,
    DeployPlan,
    as_rest,
    deploy,
    dry_run_document,
    plan_deploy,
    upload_destination,
    upload_export,
)
from tpuctl.services.serving.exports import Export, check_export_dir, export_files, read_class_names, resolve_export
from tpuctl.services.serving.local import ServePlan, container_runtime, plan_serve, run_serve
from tpuctl.services.serving.predict import (
    ACCEPTED,
    DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_IMAGE_BYTES,
    DEFAULT_TIMEOUT_SECONDS,
    MAX_BATCH_SIZE,
    MAX_IMAGES,
    MAX_TIMEOUT_SECONDS,
    Image,
    Instance,
    Prediction,
    check_predict_url,
    predict_rest,
    predict_vertex,
    read_images,
    read_instances,
    shown_url,
    top_classes,
)
