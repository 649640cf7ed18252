"""A training run, one shape for every target (this machine, Vertex AI, TPU VMs; a tuning search locally or on
Vertex AI).

``request.RunRequest`` is what the user asked for (every run flag declared once: the common ones, and each target's
own in its options model); ``spec.plan`` makes of it, the stack's outputs and the target's planning hooks the one
``spec.RunSpec`` (its target's subclass) the target turns into its request. ``targets`` is the registry every
command goes through (request, plan, target), and ``target.launch`` drives every target the same way:

1. ``preflight()``: what can be known before anything is created (the quota pre-flight, the cost estimate, a
   refusal over ``--budget``), said as notes;
2. ``describe()``: with ``--dry-run``, the request that would be sent (JSON-able), and nothing is created;
3. ``submit()``: a context manager; inside it the run exists (a claimed run folder, a CustomJob, a queued
   resource), and leaving it (the end, an error, Ctrl-C) is the one place its cleanup lives: a local run
   releases an empty folder and records an interruption, a TPU VM slice is deleted unless ``--keep``, a Vertex
   AI job says it keeps running and how to cancel it;
4. ``follow(handle)``: until the run ends (or, for a run submitted without waiting, at once): one ``Outcome``.

The targets: ``local.LocalTarget``, ``vertex.VertexTarget``, ``tpuvm.target.TpuVmTarget``,
``tuning.local.LocalTuningTarget``, ``tuning.vertex.VertexTuningTarget``, each speaking through one ``target.Report``.
The flags only a target takes are the fields of its options model: the request refuses them for any other target. ``records`` reads runs back (``tpuctl runs``), ``cost``
prices them, ``board`` shows their curves.
"""
