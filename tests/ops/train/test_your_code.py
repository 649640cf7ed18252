"""The user's code on every target (issue 41; docs/your-code.md), the ops side: what ships from a project folder
(.gitignore/.dockerignore, secrets left out and named, bounds, requirements that would move the image's pinned
TensorFlow refused), the content-hash tag of the code image (unchanged code, same tag), the Cloud Build request
that layers it on the trainer image, and the run flags' checks: one line, exit 2, nothing made."""

from __future__ import annotations

import json

import pytest

from ground.envs import REPO_ROOT
from ground.errors import UserError
from ground.outputs import parse_outputs
from tpuctl.services import image, usercode

from clifixtures import invoke
from runfixtures import planned
from stackfixtures import write_outputs

OUTPUTS = {"project": "my-project-1", "region": "us-central1", "zone": "us-central1-a",
           "buckets": {"data": "tpuctl-my-project-1-data", "staging": "tpuctl-my-project-1-staging",
                       "artifacts": "tpuctl-my-project-1-artifacts"},
           "training_service_account": "tpuctl-trainer@my-project-1.iam.gserviceaccount.com"}


@pytest.fixture
def project(tmp_path):
    folder = tmp_path / "my-project"
    (folder / "pkg").mkdir(parents=True)
    (folder / "model.py").write_text("def build(ctx):\n    pass\n")
    (folder / "pkg" / "__init__.py").write_text("")
    return folder


def test_what_ships_honours_ignore_files_and_leaves_secrets_out(project):
    (project / ".gitignore").write_text("data/\n*.ckpt\n")
    (project / ".dockerignore").write_text("notes.txt\n")
    (project / "data").mkdir()
    (project / "data" / "big.bin").write_bytes(b"x" * 10)
    (project / "weights.ckpt").write_bytes(b"w")
    (project / "notes.txt").write_text("n")
    (project / ".env").write_text("TOKEN=1")
    (project / "id_rsa").write_text("key")
    (project / "key.json").write_text('{"type": "service_account", "private_key": "-----BEGIN"}')
    (project / ".git").mkdir()
    (project / ".git" / "HEAD").write_text("ref")
    shipped = usercode.scan_project(project)
    assert sorted(f.rel for f in shipped.files) == [".dockerignore", ".gitignore", "model.py", "pkg/__init__.py"]
    assert shipped.secrets == (".env", "id_rsa", "key.json (a service-account key)")   # what its content shows


def test_the_code_tag_follows_the_content_and_nothing_else(project, tmp_path):
    outputs = parse_outputs(OUTPUTS)
    first = image.code_image_ref(outputs, "cpu", usercode.scan_project(project))
    again = image.code_image_ref(outputs, "cpu", usercode.scan_project(project))
    assert first == again and first.uri.endswith(f"/code-cpu:{first.tag}") and first.base_tag == image.image_tag("cpu")
    (project / "model.py").touch()                               # a new mtime: same content, same tag
    assert image.code_image_ref(outputs, "cpu", usercode.scan_project(project)).tag == first.tag
    (project / "model.py").write_text("def build(ctx):\n    return 1\n")
    assert image.code_image_ref(outputs, "cpu", usercode.scan_project(project)).tag != first.tag
    assert image.code_image_ref(outputs, "tpu", usercode.scan_project(project)).tag != first.tag


def test_the_cloud_build_layers_the_code_on_the_trainer_image(project):
    ref = image.code_image_ref(parse_outputs(OUTPUTS), "cpu", usercode.scan_project(project))
    doc = image.build_document(ref, "tpuctl-my-project-1-staging", "ctx.tar.gz", project=usercode.scan_project(project))
    steps = doc["build"]["steps"]
    assert len(steps) == 2 and ref.base.uri in steps[0]["args"][1] and "docker pull" in steps[0]["args"][1]
    assert steps[1]["args"] == ["build", "--build-arg", f"BASE={ref.base.uri}", "-f", image.CODE_DOCKERFILE, "-t",
                                ref.uri, "."]
    assert doc["build"]["images"] == [ref.base.uri, ref.uri]
    assert "code/model.py" in doc["context"] and image.DOCKERFILE in doc["context"]


@pytest.mark.parametrize("line, key", [
    ("tensorflow==2.10.0", "tensorflow-cpu==2.21.0"),
    ("tf-keras<2.20", "tf-keras==2.21.0"),
    ("protobuf<5", "protobuf=="),
    ("--index-url https://example.invalid/simple", "only plain requirements"),
    ("./local-wheel.whl", "only plain requirements"),
    ("not a requirement!!", "is not a requirement"),
    ('foo; python_version ~= "3"', "environment marker cannot be evaluated"),      # a seventh trial: a traceback
    # a fresh trial: these TensorFlow and Keras distributions were installed beside the image's
    *((f"{name}>=2.0", "provides TensorFlow as tensorflow-cpu==2.21.0") for name in (
        "tf-nightly", "tf-nightly-cpu", "TF_Nightly.GPU", "intel-tensorflow", "tensorflow-cpu-aws", "tensorflow-rocm",
        "tensorflow-macos", "tensorflow-metal", "tensorflow-gpu")),
    ("tf-keras-nightly", "provides Keras as tf-keras==2.21.0; drop tf-keras-nightly"),
    ("Keras_Nightly==3.16.0.dev2026120703", "provides Keras as keras==3.15.1; drop keras-nightly"),
])
def test_a_requirement_that_moves_the_image_is_refused_naming_its_line(project, line, key):
    (project / "requirements.txt").write_text(f"pandas>=2\n{line}\n")
    with pytest.raises(UserError) as err:
        usercode.check_requirements(usercode.scan_project(project), REPO_ROOT / image.lock_file("cpu"))
    assert str(err.value).startswith(f"{project / 'requirements.txt'}:2: ") and key in str(err.value)


def test_plain_requirements_pass(project):
    (project / "requirements.txt").write_text("# tools\npandas>=2  # dataframes\ntf-keras>=2.15\n")
    assert usercode.check_requirements(usercode.scan_project(project), REPO_ROOT / image.lock_file("cpu")) == [
        "pandas>=2", "tf-keras>=2.15"]


def test_a_project_out_of_bounds_is_one_line(project, monkeypatch):
    monkeypatch.setattr(usercode, "MAX_PROJECT_BYTES", 100)
    (project / "data.csv").write_bytes(b"x" * 200)
    with pytest.raises(UserError) as err:
        usercode.scan_project(project)
    assert "more than" in str(err.value) and "data.csv" in str(err.value)
    empty = project.parent / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match="no Python file"):
        usercode.scan_project(empty)


def test_a_plugin_run_is_planned_with_its_code_on_every_target(project, monkeypatch):
    monkeypatch.chdir(project)
    outputs = parse_outputs(OUTPUTS)
    local = planned("local", None, model="model.py:build", hparam=("units=32",))
    assert local.trainer.code_dir == str(project) and local.code == str(project)
    assert local.argv[-2:] == ["--hp_units", "32"] and local.labels["model"] == "build"
    vertex = planned("vertex", outputs, model="model.py:build", data_dir="gs://tpuctl-my-project-1-data/t")
    assert vertex.trainer.code_dir == "/opt/tpuctl/code" and "/code-cpu:sha256-" in vertex.image
    (project / "train.py").write_text("print('trained')\n")      # what a cloud run's command runs must ship
    script = planned("vertex", outputs, command="python train.py --epochs 3", workers=2)
    assert script.command == ("python", "train.py", "--epochs", "3") and script.data_dir is None
    assert "AIP_MODEL_DIR" not in script.env       # Vertex AI sets the AIP_* folders itself, from the base output
    assert planned("local", None, command="python train.py").env["AIP_MODEL_DIR"].endswith("/model/")   # elsewhere
    # tpuctl sets them as Vertex AI would


@pytest.mark.parametrize("args, key", [
    (["--command", "python t.py", "--epochs", "3"], "--epochs is the bundled trainer's"),
    (["--command", "python t.py", "--", "--seed", "1"], "flags after `--`"),
    (["--command", "python 'unclosed"], "--command"),
    # a sixth trial: shell syntax reached the program as words (or named no program), and a cloud dry run took it
    (["--command", "FOO=1 python t.py"], "'FOO=1' is shell syntax"),
    (["--command", "cd sub && python t.py"], "'&&' is shell syntax"),
    (["--command", "python t.py | tee log"], "'|' is shell syntax"),
    (["--command", "cd sub"], "'cd' is shell syntax"),
    (["--hparam", "units=3"], "--hparam"),
    (["--hparam", "Units=3", "--model", "m.py:build"], "--hparam"),
    # the trainer refuses a value that is no finite number once it starts: a cloud job would be created first
    (["--hparam", "a=nan", "--model", "m.py:build"], "must be finite"),
    (["--hparam", "b=1e999", "--model", "m.py:build", "--dry-run"], "must be finite"),
    (["--code", "."], "--code is your project folder"),
    (["--model", "not a ref"], "--model"),
    (["--dataset", "data.py"], "--dataset"),
    (["--model", "m.py:build", "--code", "/nonexistent/folder"], "--code"),
])
def test_a_bad_use_of_the_code_flags_is_one_line_and_makes_nothing(project, monkeypatch, args, key):
    monkeypatch.chdir(project)
    r = invoke(["train", *args])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and key in r.stderr, r.output
    assert not (project / "runs").exists()


def test_a_local_command_dry_run_shows_the_processes_in_the_project_folder(project, monkeypatch, tmp_path):
    monkeypatch.chdir(project)
    r = invoke(["train", "--command", "python model.py --x 1", "-w", "2", "--dry-run"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["folder"] == str(project)
    assert [p["command"] for p in doc["processes"]] == [["python", "model.py", "--x", "1"]] * 2
    assert doc["environment"]["AIP_CHECKPOINT_DIR"].endswith("/checkpoints/")


def test_a_local_command_run_is_listed_by_runs(project, tools, tmp_path):
    """Issue 56 (a fresh trial): a --command run finished (exit 0) but `runs ls` left it out and `runs show` said no
    such run: its program writes no result.json. Its record lists it. The folders it is given are there, as Cloud
    Storage prefixes are on Vertex AI (it failed writing into $AIP_MODEL_DIR without making it)."""
    (project / "t.py").write_text("import os\n"
                                  "with open(os.path.join(os.environ['AIP_MODEL_DIR'], 'weights.txt'), 'w') as f:\n"
                                  "    f.write('1')\n"
                                  "print('tpuctl-result: {\"export_dir\": \"' + os.environ['AIP_MODEL_DIR'] + '\", "
                                  "\"val_accuracy\": 0.99}')\n")
    env = {"TPUCTL_CACHE_DIR": str(tmp_path / "cache")}
    proc = tools.run_cli(["train", "--command", "python t.py", "--name", "mine"], env=env, cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (project / "runs" / "mine" / "model" / "weights.txt").read_text() == "1"
    # its lines name the user's program, and a completion record it prints is its own text (issue 56, a fresh trial:
    # tpuctl vouched for the SavedModel and the accuracy such a line named)
    assert "started program (pid " in proc.stderr and "SavedModel" not in proc.stdout + proc.stderr, proc.stderr
    assert "validation accuracy" not in proc.stdout + proc.stderr
    listed = json.loads(tools.run_cli(["runs", "ls", "--json"], env=env, cwd=project).stdout)
    assert [(row["run"], row["state"], row["problem"], row["model"]) for row in listed] == [
        ("mine", "finished", None, "python t.py")], listed
    shown = tools.run_cli(["runs", "show", "mine"], env=env, cwd=project)
    assert shown.returncode == 0 and shown.stdout.startswith("run mine"), shown.stdout + shown.stderr


def test_an_ignore_file_is_read_bounded(project, monkeypatch):
    """The one bounded reader (issue 43): an ignore file is read through ground.files.read_file (a 5 GB
    .gitignore was read whole); over the bound is one line naming it."""
    monkeypatch.setattr(usercode, "MAX_IGNORE_BYTES", 1000, raising=False)   # (old code: no bound)
    (project / ".gitignore").write_text("data/\n" * 500)
    with pytest.raises(UserError, match=r"\.gitignore is larger than 1000 bytes"):
        usercode.scan_project(project)


def test_the_files_left_out_as_secrets_are_named_as_text(project, tmp_path):
    """A file name is the user's text: the note naming what stays out of the image neutralises escape sequences
    (issue 43, terminal text) and still names the file."""
    (project / ".env.\x1b]0;evil\x07prod").write_text("TOKEN=1")
    outputs = write_outputs(tmp_path / "outputs.json", OUTPUTS)
    result = invoke(["image", "build", "--code", str(project), "--outputs", str(outputs), "--dry-run"])
    assert result.exit_code == 0, result.stderr
    [note] = [line for line in result.stderr.splitlines() if "left out of the image as secrets" in line]
    assert "\x1b" not in note and "\x07" not in note and ".env." in note and "prod" in note, repr(note)
