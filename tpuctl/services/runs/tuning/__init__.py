"""`tpuctl tune`: hyperparameter search over the bundled trainer, on Vertex AI or on this machine.

The search space is a small YAML file (``--spec``), validated at the edge into ``TuneSpec``; with none,
``DEFAULT_SPEC`` searches learning rate and batch size. Each parameter is a flag of ``python -m trainer.task``:

    spec key        trainer flag          Vertex AI parameter spec
    learning_rate   --learning_rate       double, UNIT_LOG_SCALE ({min, max}); or discrete ({values})
    batch_size      --train_batch_size    categorical of the values as text (see below)
    model           --model               categorical (small_cnn, resnet50)
    epochs          --train_epochs        integer ({min, max}), UNIT_LINEAR_SCALE

Vertex AI passes a trial's values as ``--<parameterId>=<value>`` and sends DISCRETE values as float text
("128.0"; github.com/kuds/mesozoic-labs pull 127, 2026-03-01), so the batch-size list is sent as CATEGORICAL
text values: the same search, passed verbatim. Whether INTEGER values come as "5" or "5.0" is not verified:
the trainer's integer flags take both (trainer/config.py ``Bound.parse``).

The metric is ``val_accuracy``, maximised: the trainer appends it to CLOUD_ML_HP_METRIC_FILE for a trial
(trainer/task.py ``report_tuning_metric``). Every trial writes to its own folder: Vertex AI sets
``AIP_MODEL_DIR=<baseOutputDirectory>/<trial id>/model/`` (and checkpoints/logs likewise) for the CustomJob
behind a trial (custom_job.proto, CustomJobSpec.base_output_directory), and the trainer exports there.
Locally each trial gets ``<run folder>/trial-<n>`` as ``--model_dir``.
"""
