"""`tpuctl train --target tpu-vm`, `tpuctl tpu attach|list|delete`: train on TPU VMs created through Cloud TPU queued
resources.

One run = one queued resource (Spot or on-demand) holding one TPU VM slice, single-host or multi-host.
Every TPU VM of the slice runs the same startup script: ``docker run`` of the trainer's tpu image with the
arguments and environment a Vertex AI job gets (data and model folders in gs://, ``TPU_NAME``). tpuctl
creates the queued resource, follows it (queued -> provisioning -> active), then watches the model folder
until the chief's ``result.json`` appears, a host reports a failure, or the slice fails or is preempted;
then it deletes the queued resource (``keep=True`` keeps it), also on Ctrl-C / SIGTERM.

A relaunch resumes: the trainer keeps its BackupAndRestore state under ``<model_dir>/checkpoints/backup``
in Cloud Storage, and the default model folder is derived from the run name, so the same command with the
same ``--name`` continues from the last backup. With ``recover=N`` (``--spot --recover N``) tpuctl does that
itself: a preempted slice is deleted and queued again (the run's zone first, then ``--zones``), at most N times.

Facts used here (checked 2026-11-22):
- Cloud TPU v2 API, queued resources (googleapis google/cloud/tpu/v2/cloud_tpu.proto as shipped in
  google-cloud-tpu 1.27.0 ``tpu_v2``): states CREATING/ACCEPTED/WAITING_FOR_RESOURCES -> PROVISIONING -> ACTIVE,
  FAILED (``failed_data.error``), SUSPENDING/SUSPENDED (resources deleted, ``state_initiator`` SERVICE or
  USER), DELETING; ``DeleteQueuedResourceRequest.force`` also deletes the nodes.
- TPU VM metadata attributes ``agent-worker-number`` (this VM's index in the slice) and
  ``worker-network-endpoints``: what JAX reads to find its place in a slice
  (github.com/jax-ml/jax jax/_src/clusters/cloud_tpu_cluster.py).
- Containers on TPU VMs run ``docker run --net=host --privileged`` (cloud.google.com/tpu/docs/run-in-container);
  base runtimes include Docker (cloud.google.com/tpu/docs/runtimes).
NOT verified (no TPU VM here): that ``gcloud`` is on the base runtime images (the startup script uses it to
log Docker into Artifact Registry and to report a host's exit status), that the image's non-root user can
open the TPU devices under ``--privileged``, how TensorFlow's TPUStrategy spans the hosts of a multi-host
slice when every host runs the program, and that a TPU VM's metadata server sets the preemption flag a Spot host's
watcher waits on (``domain.TPU_VM_PREEMPTED_METADATA_KEY``; see docs/tpu-vm.md).
"""
