"""Stand-in for the trainer interpreter running ``-m trainer.make_tfrecords SRC OUT …`` (data interrupt tests).

$FAKE_FILES shards of 2 KB + manifest.json, then the summary line; $FAKE_MODE=hang writes $FAKE_PID_FILE
and waits to be stopped instead.
"""

import json
import os
import sys
import time
from pathlib import Path

argv = sys.argv[1:]
if argv and argv[0] == "-u":
    argv = argv[1:]
module, args = argv[1], argv[2:]
assert module == "trainer.make_tfrecords", module
out = Path(args[1])
if os.environ.get("FAKE_MODE") == "hang":
    pid_file = Path(os.environ["FAKE_PID_FILE"])   # written whole: a reader never sees half of it
    pid_file.with_suffix(".tmp").write_text(str(os.getpid()))
    pid_file.with_suffix(".tmp").replace(pid_file)
    while True:
        time.sleep(0.2)
out.mkdir(parents=True, exist_ok=True)
count = int(os.environ.get("FAKE_FILES", "30"))
for i in range(count):
    (out / f"x-train-{i:05d}-of-{count:05d}.tfrecord").write_bytes(b"r" * 2048)
(out / "manifest.json").write_text(json.dumps({"shards": count}))
print("summary: " + json.dumps({"train": count, "validation": 0, "classes": ["a"], "shards": count,
                                "bytes": 2048 * count}), flush=True)
