"""Where a run goes: one shape for every target (local, Vertex AI, TPU VM; a tuning search locally or on Vertex AI).

Every target is planned by its own code (``training.plan_local``, ``vertex.plan_job``, ``tpuvm.plan_run``…) and then
driven the same way by ``launch``:

1. ``preflight()``: what can be known before anything is created (the quota pre-flight, the cost estimate, a
   refusal over ``--budget``), said as notes;
2. ``describe()``: with ``--dry-run``, the request that would be sent (JSON-able), and nothing is created;
3. ``submit()``: a context manager; inside it the run exists (a claimed run folder, a CustomJob, a queued
   resource), and leaving it (the end, an error, Ctrl-C) is the one place its cleanup lives: a local run
   releases an empty folder and records an interruption, a TPU VM slice is deleted unless ``--keep``, a Vertex
   AI job says it keeps running and how to cancel it;
4. ``follow(handle)``: until the run ends (or, for a run submitted without waiting, at once): one ``Outcome``.

The flags only a target takes are declared on it (``flags``): the CLI refuses them for any other target.
"""

from tpuctl.services.targets.base import Outcome, RunTarget, launch, target_flags

__all__ = ["Outcome", "RunTarget", "launch", "target_flags"]
