"""`tpuctl serve`, `tpuctl predict` and `tpuctl deploy` without TensorFlow: the exact docker command and batching
file, the no-docker line, predictions over TF Serving's REST format and from a Vertex AI Endpoint, the deployment
and batch-job requests parsed strictly into aiplatform_v1 types (real clients, local fake endpoint)."""

from __future__ import annotations

import base64
import datetime
import json
import socket
import threading

import pytest
from google.cloud import aiplatform_v1

from ground import domain
from ground.errors import DomainError

from clifixtures import error_line, invoke

BATCHING = ("max_batch_size { value: 32 }\n"
            "batch_timeout_micros { value: 1000 }\n"
            "max_enqueued_batches { value: 100 }\n"
            "num_batch_threads { value: 2 }\n")


def strict(message_type, body):
    """The request body as the aiplatform_v1 type, refusing any field the type does not have."""
    return message_type.from_json(json.dumps(body), ignore_unknown_fields=False)


def _command(export, batching=False, tool="docker"):
    parts = [tool, "run", "--rm", "--name", "tpuctl-serve-small_cnn-8501", "-p", "127.0.0.1:8501:8501",
             "-p", "127.0.0.1:8500:8500", "--mount", f"type=bind,source={export},target=/models/small_cnn/3,readonly"]
    if batching:
        parts += ["--mount", f"type=bind,source={export.parent}/batching_parameters.txt,"
                             "target=/models/batching_parameters.txt,readonly"]
    parts += ["-e", "MODEL_NAME=small_cnn", "docker.io/tensorflow/serving:2.20.0"]
    if batching:
        parts += ["--enable_batching", "--batching_parameters_file=/models/batching_parameters.txt"]
    return " ".join(parts)


# ------------------------------------------------------------------------------------------------
# serve
# ------------------------------------------------------------------------------------------------

def test_serve_dry_run_prints_the_exact_command(fake_export):
    result = invoke(["serve", fake_export.export, "--dry-run"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == _command(fake_export.export) + "\n"


def test_serve_dry_run_with_batching_prints_the_file_and_writes_nothing(fake_export):
    result = invoke(["serve", "20261122", "--dir", fake_export.runs, "--batching", "--dry-run"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == (_command(fake_export.export, batching=True) + "\n"
                             f"# {fake_export.export.parent}/batching_parameters.txt:\n" + BATCHING)
    assert not (fake_export.export.parent / "batching_parameters.txt").exists()


def test_serve_without_docker_or_podman_is_the_command_and_one_line(fake_export, tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    result = invoke(["serve", fake_export.export, "--batching"], env={"PATH": str(empty)})
    assert result.stdout == _command(fake_export.export, batching=True) + "\n"
    line = error_line(result, 1, alone=True)      # what is missing where; the way out: the command printed above
    assert "docker" in line and "podman" in line and "PATH" in line and "command above" in line, line
    assert not (fake_export.export.parent / "batching_parameters.txt").exists()


def test_serve_runs_podman_in_the_foreground_with_the_batching_file(fake_export, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "argv.json"
    podman = bin_dir / "podman"
    podman.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {record}\nexit 3\n")
    podman.chmod(0o755)
    result = invoke(["serve", fake_export.run, "--batching"], env={"PATH": str(bin_dir)})
    assert result.exit_code == 3                      # the container's own status, and one error line
    last = result.stderr.splitlines()[-1]
    assert last.startswith("error: ") and "TF Serving" in last and "code 3" in last, last
    assert result.stdout == _command(fake_export.export, batching=True, tool="podman") + "\n"
    assert record.read_text().splitlines() == _command(fake_export.export, batching=True).split()[1:]
    assert (fake_export.export.parent / "batching_parameters.txt").read_text() == BATCHING


@pytest.mark.parametrize("setup, message", [
    (lambda e: (e / "saved_model.pb").unlink(), "no saved_model.pb in it"),
    (lambda e: e.rename(e.parent / "latest"), "is not a version: TF Serving loads only folders named by an integer"),
])
def test_serve_validates_the_export_at_the_edge(fake_export, setup, message):
    setup(fake_export.export)
    target = fake_export.export if fake_export.export.exists() else fake_export.export.parent / "latest"
    result = invoke(["serve", target, "--dry-run"])
    assert result.exit_code == 2
    assert message in result.stderr and result.stderr.count("\n") == 1, result.stderr


@pytest.mark.parametrize("args, message", [
    (["gs://bkt-ok/runs/x/export/small_cnn/1"], "is in Cloud Storage"),
    (["{export}", "--port", "70000"], "--port 70000 is not a TCP port"),
    (["{export}", "--model-name", "a/b"], "model name 'a/b' must be"),
    (["nosuchrun", "--dir", "{runs}"], "no run 'nosuchrun'"),
    (["{export_parent}"], "is a model folder: name one of its version folders"),
])
def test_serve_bad_input_is_one_line(fake_export, args, message):
    values = {"export": fake_export.export, "runs": fake_export.runs, "export_parent": fake_export.export.parent}
    result = invoke(["serve", *[a.format(**values) for a in args], "--dry-run"])
    assert result.exit_code == 2
    assert message in result.stderr and result.stderr.count("\n") == 1, result.stderr


# ------------------------------------------------------------------------------------------------
# predict over REST (TF Serving's documented format)
# ------------------------------------------------------------------------------------------------

def test_predict_rest_batches_and_sends_the_documented_format(tf_serving, helpers, tmp_path, fake_export):
    server = tf_serving()
    paths = helpers.images(tmp_path / "imgs")
    result = invoke(["predict", server.url, *paths, "--batch-size", "3", "--top", "2", "--json",
                     "--manifest", fake_export.data / "manifest.json"])
    assert result.exit_code == 0, result.stderr
    assert [len(b["instances"]) for b in server.bodies] == [3, 3, 1]
    sent = [i for b in server.bodies for i in b["instances"]]
    assert all(b["signature_name"] == "serving_default" for b in server.bodies)
    assert sent == [{"image_bytes": {"b64": base64.b64encode(p.read_bytes()).decode()}} for p in paths]
    shown = json.loads(result.stdout)
    for path, item in zip(paths, shown):
        top = len(path.read_bytes()) % 3
        assert item["image"] == str(path)
        assert item["top"][0] == {"class_id": top, "class_name": f"model-{top}", "probability": 0.8}
        second = 1 if top == 0 else 0          # ties broken by class id; names from the manifest
        assert item["top"][1] == {"class_id": second, "class_name": ["cat", "dog", "fox"][second],
                                  "probability": 0.1}


def test_every_row_names_its_classes_with_their_ids(tf_serving, helpers, tmp_path):
    """Old: a row showed the top class's name without its id, and the other classes as `class N` although the model
    had named them in other rows (it answers only its top class's name; no --manifest here)."""
    server = tf_serving()
    paths = helpers.images(tmp_path / "imgs", sizes=(10, 11, 12, 13))     # the canned model's top: 1, 2, 0, 1
    result = invoke(["predict", server.url, *paths, "--top", "3"])
    assert result.exit_code == 0, result.stderr
    for path, line in zip(paths, result.stdout.splitlines()):
        top = len(path.read_bytes()) % 3
        rest = [i for i in range(3) if i != top]
        assert line == (f"{path}: model-{top} (class {top}) 0.800, model-{rest[0]} (class {rest[0]}) 0.100, "
                        f"model-{rest[1]} (class {rest[1]}) 0.100")
    shown = json.loads(invoke(["predict", server.url, *paths, "--json"]).stdout)
    assert all(t["class_name"] == f"model-{t['class_id']}" for item in shown for t in item["top"])

    # a model that names one class two ways: its own name for each row's top, no guess for the others
    two_ways = tf_serving(predictor=lambda instances: [
        {"probabilities": [0.7, 0.3], "class_id": 0, "class_name": f"zero-{n}"} for n in range(len(instances))])
    result = invoke(["predict", two_ways.url, *paths[:2], "--top", "2"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [f"{paths[0]}: zero-0 (class 0) 0.700, class 1 0.300",
                                          f"{paths[1]}: zero-1 (class 0) 0.700, class 1 0.300"]


def test_predict_takes_every_format_make_tfrecords_reads(tf_serving, format_samples):
    """Old: a WebP (and GIF, BMP, TIFF) was "not a JPEG or PNG image" to predict, though make-tfrecords trains on
    them. JPEG and PNG go as they are; the others as make-tfrecords stores them: a JPEG of the same size."""
    from trainer import jpegcheck
    from trainer.flags import IMAGE_EXTENSIONS

    server = tf_serving()
    paths = [format_samples / f"sample{ending}" for ending in IMAGE_EXTENSIONS]
    result = invoke(["predict", server.url, *paths, "--json"])
    assert result.exit_code == 0, result.stderr
    assert [item["image"] for item in json.loads(result.stdout)] == [str(p) for p in paths]
    sent = [base64.b64decode(i["image_bytes"]["b64"]) for b in server.bodies for i in b["instances"]]
    for path, data in zip(paths, sent):
        if path.suffix in (".jpg", ".jpeg", ".png"):
            assert data == path.read_bytes(), path.name
        else:
            assert data != path.read_bytes() and jpegcheck.check(data) == (6, 10, 3), path.name


def test_predict_says_why_an_image_cannot_be_converted(tf_serving, format_samples, tmp_path, monkeypatch):
    server = tf_serving()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-named-like-a-flag.webp").write_bytes((format_samples / "sample.webp").read_bytes())
    assert invoke(["predict", server.url, "--", "-named-like-a-flag.webp"]).exit_code == 0   # converted, a file
    server.bodies.clear()
    cut = format_samples / "cut.webp"
    result = invoke(["predict", server.url, format_samples / "sample.png", cut])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {cut}: truncated WebP file") and result.stderr.count("\n") == 1
    result = invoke(["predict", server.url, format_samples / "sample.gif"],
                    env={"TPUCTL_TRAINER_PYTHON": str(tmp_path / "no-python")})
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: {format_samples / 'sample.gif'}: images other than JPEG and PNG are "
                                    "converted as make-tfrecords stores them, in the trainer environment")
    assert server.bodies == []


def _silent_server():
    """Accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    held = []
    threading.Thread(target=lambda: held.extend(sock.accept() for _ in range(8)), daemon=True).start()
    return sock


def test_predict_bad_input_is_one_line(tf_serving, helpers, tmp_path):
    server = tf_serving()
    good = helpers.images(tmp_path / "imgs", sizes=(20,))[0]
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    big = tmp_path / "big.jpg"
    big.write_bytes(b"\xff\xd8\xff" + bytes(200))
    silent = _silent_server()
    silent_url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1/models/digits:predict"
    wrong_model = server.url.replace("/digits:", "/other:")
    cases = [
        ([server.url, tmp_path / "missing.jpg"], f"image {tmp_path / 'missing.jpg'} does not exist"),
        ([server.url, text], f"{text}: not an image tpuctl reads"),
        ([server.url, big, "--max-bytes", "100"], f"image {big} is larger than 100 bytes"),
        ([server.url, good, "--max-bytes", str(2**40)], "--max-bytes must be from 1 to"),   # no upper bound before
        ([server.url, good, "--max-bytes", "0"], "--max-bytes must be from 1 to"),
        (["http://127.0.0.1:8501/v1/models/digits", good], "is neither a TF Serving predict URL"),
        ([server.url, good, "--batch-size", "0"], "--batch-size must be 1-256"),
        ([silent_url, good, "--timeout", "1"], f"no answer from {silent_url} within 1 s"),
        ([wrong_model, good], f"{wrong_model} answered HTTP 404: Servable not found"),
        ([server.url], "give at least one image"),
    ]
    try:
        for args, message in cases:
            result = invoke(["predict", *args])
            assert result.exit_code in (1, 2), (args, result.stderr)
            assert message in result.stderr and result.stderr.count("\n") == 1, (args, result.stderr)
    finally:
        silent.close()


# ------------------------------------------------------------------------------------------------
# predict on a Vertex AI Endpoint; deploy; batch
# ------------------------------------------------------------------------------------------------

ENDPOINT = "projects/my-serve-project/locations/us-central1/endpoints/500"


def test_predict_on_a_vertex_endpoint_sends_the_same_instances(vertex, helpers, tmp_path):
    fake = vertex(predictor=lambda instances: [helpers.canned(i) for i in instances], endpoints=["tpuctl-x"])
    paths = helpers.images(tmp_path / "imgs", sizes=(10, 11, 12))
    result = invoke(["predict", ENDPOINT, *paths, "--batch-size", "2", "--top", "1"])
    assert result.exit_code == 0, result.stderr
    posts = fake.posts(":predict")
    assert [p for p, _ in posts] == [f"/v1/{ENDPOINT}:predict"] * 2
    requests = [strict(aiplatform_v1.PredictRequest, body) for _, body in posts]
    sent = [dict(v) for r in requests for v in r.instances]
    assert [base64.b64decode(i["image_bytes"]["b64"]) for i in sent] == [p.read_bytes() for p in paths]
    assert result.stdout.splitlines() == [f"{p}: model-{n} (class {n}) 0.800"
                                          for p in paths for n in [len(p.read_bytes()) % 3]]



def test_predict_on_a_vertex_endpoint_sends_json_instances_as_they_are(vertex, tmp_path):
    """A model whose inputs are not images (a plug-in's own features): --instances rows go to the Endpoint's
    :predict unchanged (numbers, text, lists), batched, and each answer is printed for its row."""
    rows = [{"measurements": [5.0, 3.4, 1.5, 0.2], "colour": "white"},
            {"measurements": [5.9, 2.8, 4.3, 1.3], "colour": "blue"},
            {"measurements": [6.6, 3.0, 5.6, 2.0], "colour": "purple"}]
    names = ["setosa", "versicolor", "virginica"]

    def predictor(instances):
        return [{"probabilities": [0.1, 0.1, 0.1][:n] + [0.8] + [0.1] * (2 - n), "class_id": n, "class_name": names[n]}
                for n in (len(i["colour"]) % 3 for i in instances)]

    fake = vertex(predictor=predictor, endpoints=["tpuctl-x"])
    file = tmp_path / "rows.json"
    file.write_text(json.dumps({"instances": rows}))
    result = invoke(["predict", ENDPOINT, "--instances", str(file), "--batch-size", "2", "--json"])
    assert result.exit_code == 0, result.stderr
    posts = fake.posts(":predict")
    assert [p for p, _ in posts] == [f"/v1/{ENDPOINT}:predict"] * 2
    for _, body in posts:
        strict(aiplatform_v1.PredictRequest, body)      # Google's type accepts the request as sent
    assert [row for _, body in posts for row in body["instances"]] == rows
    answers = json.loads(result.stdout)
    assert [a["top"][0]["class_name"] for a in answers] == [names[len(r["colour"]) % 3] for r in rows]

def test_deploy_dry_run_creates_nothing(fake_export, outputs_file):
    result = invoke(["deploy", "20261122-1000", "--dir", fake_export.runs, "--outputs", outputs_file, "--dry-run",
                     "--min-replicas", "1", "--max-replicas", "3"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    model = strict(aiplatform_v1.Model, doc["uploadModel"]["model"])
    assert model.artifact_uri == "gs://tpuctl-my-serve-project-artifacts/models/20261122-1000/small_cnn/3"
    assert model.container_spec.image_uri == "us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"
    deployed = strict(aiplatform_v1.DeployedModel, doc["deployModel"]["deployedModel"])
    assert deployed.dedicated_resources.max_replica_count == 3
    assert doc["deployModel"]["trafficSplit"] == {"0": 100}


def test_deploy_uploads_a_local_export_and_deploys_it(fake_export, outputs_file, vertex, gcs, helpers):
    fake = vertex()
    result = invoke(["deploy", "20261122", "--dir", fake_export.runs, "--outputs", outputs_file,
                     "--machine-type", "n1-standard-4", "--min-replicas", "1", "--max-replicas", "2",
                     "--endpoint", "digits-endpoint"])
    assert result.exit_code == 0, result.stderr
    prefix = "models/20261122-1000/small_cnn/3/"
    names = sorted(b.name for b in gcs.list_blobs(helpers.ARTIFACTS, prefix=prefix))
    assert names == [prefix + "saved_model.pb", prefix + "variables/variables.index"]

    parent = f"projects/{helpers.PROJECT}/locations/{helpers.REGION}"
    (path, body), = fake.posts(":upload")
    assert path == f"/v1/{parent}/models:upload"
    upload = strict(aiplatform_v1.UploadModelRequest, body)
    assert upload.model.artifact_uri == f"gs://{helpers.ARTIFACTS}/{prefix.rstrip('/')}"
    assert upload.model.container_spec.image_uri == "us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"
    assert upload.model.labels == {"stack": "dev"}

    (path, body), = fake.posts("/endpoints")
    endpoint = strict(aiplatform_v1.Endpoint, body)
    assert endpoint.display_name == "digits-endpoint"

    (path, body), = fake.posts(":deployModel")
    request = strict(aiplatform_v1.DeployModelRequest, body)
    assert request.traffic_split == {"0": 100}
    assert request.deployed_model.model == f"{parent}/models/700"
    resources = request.deployed_model.dedicated_resources
    assert (resources.machine_spec.machine_type, resources.min_replica_count, resources.max_replica_count) == \
        ("n1-standard-4", 1, 2)
    assert any(m == "GET" and "/operations/" in p for m, p, _ in fake.requests)   # the LROs were followed
    assert f"to {parent}/endpoints/600" in result.stdout and "4242" in result.stdout


def test_deploy_reuses_an_endpoint_by_display_name(fake_export, outputs_file, vertex, gcs):
    fake = vertex(endpoints=["tpuctl-small_cnn"])
    result = invoke(["deploy", fake_export.run, "--outputs", outputs_file])
    assert result.exit_code == 0, result.stderr
    assert fake.posts("/endpoints") == []
    (path, _), = fake.posts(":deployModel")
    assert path == f"/v1/{ENDPOINT}:deployModel"
    assert "(reused)" in result.stderr


def test_deploy_goes_to_the_stack_endpoint_without_looking_up_or_creating_one(fake_export, vertex, gcs, helpers,
                                                                              tmp_path):
    owned = f"projects/{helpers.PROJECT}/locations/{helpers.REGION}/endpoints/1234567890"
    outputs = tmp_path / "owned.json"
    outputs.write_text(json.dumps({**helpers.OUTPUTS, "serving_endpoint": owned}))
    fake = vertex(endpoints=["tpuctl-small_cnn"])       # a same-named endpoint exists: not the one to use
    fake.endpoints[owned] = {"name": owned, "displayName": "flowers-prod"}   # what `pulumi up` created
    result = invoke(["deploy", fake_export.run, "--outputs", str(outputs)])
    assert result.exit_code == 0, result.stderr
    assert fake.posts("/endpoints") == [] and not [p for m, p, _ in fake.requests if m == "GET" and
                                                   p.endswith("/endpoints")]
    (path, _), = fake.posts(":deployModel")
    assert path == f"/v1/{owned}:deployModel"
    assert f"endpoint: {owned} (the stack's)" in result.stderr
    # --endpoint still picks another one, and a stack endpoint in another region is one line
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({**helpers.OUTPUTS, "serving_endpoint": owned.replace(helpers.REGION,
                                                                                          "europe-west4")}))
    refused = invoke(["deploy", fake_export.run, "--outputs", str(elsewhere), "--dry-run"])
    assert refused.exit_code == 2 and refused.stderr.count("\n") == 1 and "is not in" in refused.stderr


def test_prediction_image_end_of_availability():
    image = domain.VERTEX_PREDICTION_IMAGES["cpu"]
    assert image.end_of_availability == datetime.date(2027, 1, 14)
    assert domain.check_prediction_image(image, datetime.date(2026, 9, 1)) is None
    warning = domain.check_prediction_image(image, datetime.date(2026, 11, 22))
    assert warning.startswith("warning: ") and "tf2-cpu.2-15" in warning, warning
    assert "end of availability" in warning and "2027-01-14 (53 days)" in warning, warning
    with pytest.raises(DomainError, match=r"end of availability\b.*\b2027-01-14"):
        domain.check_prediction_image(image, datetime.date(2027, 1, 14))


def test_deploy_refuses_a_past_image_and_bad_bounds(fake_export, outputs_file):
    from ground.errors import UserError
    from ground.outputs import read_outputs_file
    from tpuctl.services import serving

    export = serving.resolve_export(str(fake_export.export))
    # past the prebuilt image's end of availability deploy serves with TF Serving from the stack's repository; a stack
    # without one is told how to go on (tests/ops/serve/test_deploy_tf_serving.py)
    with pytest.raises(UserError, match="trainer_image_url"):
        serving.plan_deploy(export, read_outputs_file(outputs_file), today=datetime.date(2027, 2, 1))
    result = invoke(["deploy", fake_export.run, "--outputs", outputs_file, "--min-replicas", "3",
                     "--max-replicas", "2", "--dry-run"])
    line = error_line(result, 2, alone=True)
    assert "--max-replicas (2)" in line and "--min-replicas (3)" in line, line


def test_predict_batch_creates_a_batch_prediction_job(fake_export, outputs_file, vertex, gcs, helpers):
    fake = vertex()
    bucket = gcs.bucket(helpers.DATA)
    for name in ("pics/a.jpg", "pics/b.PNG", "pics/notes.txt", "pics/sub/c.jpeg", "other/d.jpg"):
        bucket.blob(name).upload_from_string(b"\xff\xd8\xff")
    result = invoke(["predict", "--batch", f"gs://{helpers.DATA}/pics", "--outputs", outputs_file,
                     "--dir", fake_export.runs, "20261122-1000", "--max-replicas", "2"])
    assert result.exit_code == 0, result.stderr
    (path, body), = fake.posts("/batchPredictionJobs")
    assert path == f"/v1/projects/{helpers.PROJECT}/locations/{helpers.REGION}/batchPredictionJobs"
    job = strict(aiplatform_v1.BatchPredictionJob, body)
    assert job.input_config.instances_format == "file-list"
    assert job.output_config.predictions_format == "jsonl"
    assert job.unmanaged_container_model.artifact_uri == \
        f"gs://{helpers.ARTIFACTS}/models/20261122-1000/small_cnn/3"
    assert job.dedicated_resources.max_replica_count == 2
    file_list = job.input_config.gcs_source.uris[0]
    assert file_list.startswith(f"gs://{helpers.ARTIFACTS}/batch-predictions/tpuctl-batch-")
    listed = gcs.bucket(helpers.ARTIFACTS).blob(file_list.split("/", 3)[3]).download_as_text().split()
    assert listed == [f"gs://{helpers.DATA}/pics/{n}" for n in ("a.jpg", "b.PNG", "sub/c.jpeg")]
    assert job.output_config.gcs_destination.output_uri_prefix == file_list.rsplit("/", 1)[0] + "/output"
    assert result.stdout.startswith("batch prediction job: projects/")


def test_predict_batch_with_a_model_and_no_images(outputs_file, vertex, gcs, helpers):
    vertex()
    model = f"projects/{helpers.PROJECT}/locations/{helpers.REGION}/models/77"
    result = invoke(["predict", "--batch", f"gs://{helpers.DATA}/empty", "--outputs", outputs_file, model])
    line = error_line(result, 2, alone=True)
    assert f"gs://{helpers.DATA}/empty " in line and "no images" in line and "(.jpg, .jpeg, .png)" in line, line


def test_a_run_is_served_from_its_own_folder_even_moved_and_never_from_elsewhere(fake_export, tmp_path):
    """A sixth trial: the trainer records its export as an absolute path, and `serve RUN` followed it as written: a
    copied run folder served the original's export, and an edited record any folder shaped like one. A run's export
    is the one in its own folder (the recorded place below it, wherever the folder now is); a record naming a folder
    elsewhere is one line."""
    import shutil

    from ground.errors import UserError
    from tpuctl.services import serving

    copy = tmp_path / "elsewhere" / "copied-run"
    shutil.copytree(fake_export.run, copy)
    assert serving.resolve_export(str(copy)).path == str(copy / "export" / "small_cnn" / "3")
    assert serving.resolve_export(str(fake_export.run)).path == str(fake_export.export)
    shutil.rmtree(copy / "export")
    (copy / "other" / "small_cnn" / "3").mkdir(parents=True)
    record = json.loads((copy / "result.json").read_text())
    (copy / "result.json").write_text(json.dumps({**record, "export_dir": str(fake_export.export)}))
    with pytest.raises(UserError, match="names an export outside its folder"):
        serving.resolve_export(str(copy))
