"""What `tpuctl train` shows: one line per epoch in a pipe, one live display on a terminal, the summary;
never the protocol lines, Keras' own lines or TensorFlow's start-up notices (unless --verbose), always a
real TensorFlow error line."""

from __future__ import annotations

import os
import pty
import re
import subprocess

from ground.envs import ops_python

from procfixtures import read_terminal

PROTOCOL = re.compile(r"^(epoch-start|epoch-end|progress|tpuctl-result): ", re.M)
NOISE = ("Could not find cuda drivers", "failed call to cuInit", "oneDNN custom operations")
REAL = "OP_REQUIRES failed: a real problem the user must see"


def _env(fake_trainer, tmp_path):
    return {**fake_trainer, "FAKE_MODE": "chatty", "TPUCTL_CACHE_DIR": str(tmp_path / "cache")}


def test_a_pipe_gets_one_plain_line_per_epoch_and_the_summary(fake_trainer, tools, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    proc = tools.run_cli(["train", "--data-dir", str(data), "--epochs", "2"],
                         env={**_env(fake_trainer, tmp_path), "PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert not PROTOCOL.search(out), out
    assert "Epoch 1/2" not in out and "training: model=" not in out and "3/3 - 1s" not in out   # Keras' lines
    assert not any(n in out for n in NOISE), out
    assert REAL in proc.stderr                                                   # a real error line stays
    epochs = [line for line in proc.stderr.splitlines() if line.startswith("epoch ")]
    assert epochs == [
        "epoch 1/2: loss=0.8000 accuracy=0.6000 val_loss=0.7000 val_accuracy=0.7000 "
        + epochs[0][epochs[0].index("("):],
        "epoch 2/2: loss=0.7000 accuracy=0.7000 val_loss=0.6000 val_accuracy=0.8000 "
        + epochs[1][epochs[1].index("("):],
    ]
    assert epochs[1].endswith(", 120 examples/s)")
    assert "run summary" in proc.stderr and "best val_accuracy  0.8000 (epoch 2)" in proc.stderr
    # the hints name the program as it can be typed here: PATH has no tpuctl in this test, so its path
    tpuctl = str(tools.ops_python.parent / "tpuctl")
    assert f"serve it           {tpuctl} serve " in proc.stderr and f"curves             {tpuctl} board " in proc.stderr
    assert proc.stdout.splitlines()[-2].startswith("SavedModel: ")     # scripts still get the two result lines


def test_verbose_shows_everything(fake_trainer, tools, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    proc = tools.run_cli(["train", "--data-dir", str(data), "--verbose"], env=_env(fake_trainer, tmp_path),
                         cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "epoch-start: 1/2" in proc.stdout and "Epoch 1/2" in proc.stdout and "tpuctl-result: " in proc.stdout
    assert all(n in proc.stderr for n in NOISE)


def test_a_terminal_gets_one_live_display_and_the_summary(fake_trainer, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    master, slave = pty.openpty()
    env = {**os.environ, **_env(fake_trainer, tmp_path), "COLUMNS": "120", "TERM": "xterm"}
    proc = subprocess.Popen([str(ops_python()), "-m", "tpuctl.cli", "train", "--data-dir", str(data)],
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env, cwd=tmp_path)
    os.close(slave)
    try:
        screen = read_terminal(master, proc, "the run to end on its terminal")
    finally:
        os.close(master)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.decode("utf-8", "replace"))
    assert proc.returncode == 0, text[-3000:]
    assert not PROTOCOL.search(text), text
    assert not any(n in text for n in NOISE) and "Epoch 1/2" not in text
    assert "━" in text                       # rich's progress bar was drawn
    assert text.count("epoch 2/2: loss=0.7000") >= 1 and "run summary" in text
    assert "best val_accuracy  0.8000 (epoch 2)" in text


def test_the_live_row_keeps_its_epoch_steps_and_eta_at_80_columns_and_goes_at_the_end(monkeypatch):
    """Issue 44, found as a new user: below ~170 columns the row lost its bar and step count to the previous epoch's
    metrics (`epo… loss=…`) and a stale copy stayed above the summary. The row is the epoch, the bar, the steps and
    the ETA; the metrics are the epoch lines above it; it is gone once the run ends."""
    import io

    from rich.console import Console

    from tpuctl.commands.display import TrainDisplay
    from trainer import protocol

    monkeypatch.setenv("COLUMNS", "80")
    screen = io.StringIO()
    display = TrainDisplay(terminal=True, stream=screen)
    metrics = {"loss": 0.123456, "accuracy": 0.9, "val_loss": 0.2, "val_accuracy": 0.95, "learning_rate": 0.001,
               "examples_per_second": 1234.0}
    display.on_message("trainer", protocol.Message(protocol.EPOCH_START, (1, 10, {})))
    display.on_message("trainer", protocol.Message(protocol.PROGRESS, (400, 400)))
    display.on_message("trainer", protocol.Message(protocol.EPOCH_END, (1, 10, metrics)))
    display.on_message("trainer", protocol.Message(protocol.EPOCH_START, (2, 10, {})))
    display.on_message("trainer", protocol.Message(protocol.PROGRESS, (123, 400)))
    frame = io.StringIO()
    Console(file=frame, width=80).print(display._progress.get_renderable())
    [row] = [line for line in frame.getvalue().splitlines() if line.strip()]
    assert row.startswith("epoch 2/10 ") and "123/400" in row and "━" in row and len(row) <= 80, row
    assert "loss" not in row                                  # epoch 1's numbers are the line above, not the row
    display.close()
    assert "epoch 1/10: loss=0.1235" in screen.getvalue()


def test_a_trainer_line_reaches_the_terminal_without_its_escape_sequences():
    """One sanitiser for every string that reaches a terminal (issue 43): a trainer's error line quotes a file or a
    class folder's name, whose escape sequences (a window title, a screen clear) must not reach the terminal."""
    import io

    from tpuctl.commands.display import TrainDisplay

    screen = io.StringIO()
    display = TrainDisplay(terminal=False, stream=screen)
    display.stderr_sink().write("error: shard /d/\x1b]0;evil\x07x\x1b[2J.tfrecord [/x] is a FIFO\n")
    assert screen.getvalue() == "error: shard /d/x.tfrecord [/x] is a FIFO\n", repr(screen.getvalue())
