"""Run many gcloud command lines in ONE process of the Cloud SDK's own Python: ``python gcloud_batch.py IN OUT``.

IN is a JSON list of argv lists (without the leading ``gcloud``); OUT receives, per argv, gcloud's exit code and
its output. It builds gcloud's CLI once (``googlecloudsdk.gcloud_main.CreateCLI``, what ``gcloud`` itself runs)
and calls ``Execute(argv)`` for each line, so a line costs milliseconds instead of a second of start-up.
Runs under the SDK's interpreter (the SDK root is ``$TPUCTL_GCLOUD_SDK``); imports nothing of tpuctl.
"""

import json
import os
import sys
import tempfile
import time

_SDK = os.environ["TPUCTL_GCLOUD_SDK"]
sys.path[:0] = [os.path.join(_SDK, "lib"), os.path.join(_SDK, "lib", "third_party")]

from googlecloudsdk import gcloud_main  # noqa: E402


def main(source: str, report: str) -> None:
    with open(source) as f:
        commands = json.load(f)
    cli = gcloud_main.CreateCLI([])
    results = []
    saved = os.dup(1), os.dup(2)
    for argv in commands:
        # gcloud's log handlers hold the process's streams: capture at the file-descriptor level
        with tempfile.TemporaryFile() as out:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(out.fileno(), 1)
            os.dup2(out.fileno(), 2)
            start = time.monotonic()
            try:
                cli.Execute(argv)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException as exc:  # noqa: BLE001 - reported with the line that raised it
                print(f"gcloud_batch: {type(exc).__name__}: {exc}", file=sys.stderr)
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            out.seek(0)
            results.append({"argv": argv, "code": code, "seconds": round(time.monotonic() - start, 3),
                            "output": out.read().decode(errors="replace")[-3000:]})
    with open(report, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
