"""The pack as the Pulumi engine runs it: a subprocess that prints its port and serves pulumirpc.Analyzer.

The requests are the engine's own protobuf messages (pulumi.runtime.proto.analyzer_pb2). The order is
the engine's: GetAnalyzerInfo, Configure (policy config from --policy-pack-config, enforcement levels
included), then Analyze per resource and AnalyzeStack once with every resource's outputs.
pulumi-policy 1.21 does not implement Handshake; the engine treats UNIMPLEMENTED as "old plugin".
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import grpc
import pytest
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc
from pulumi_policy.proxy import UNKNOWN_BOOLEAN_VALUE, UNKNOWN_STRING_VALUE

from ground import domain
from ground import tokens as T
from ground.envs import ops_python
from policy.rules import RESOURCE_RULES
from policy.stack_rules import STACK_RULES

from procfixtures import Watched

REPO = Path(__file__).resolve().parents[3]
PYTHON = ops_python()
SA = "serviceAccount:tpuctl-trainer@my-tpu-project.iam.gserviceaccount.com"
NAMES = {p: f"tpuctl-my-tpu-project-{p}" for p in domain.BUCKET_PURPOSES}


def _start(args: list[str], cwd: Path = REPO) -> tuple[Watched, int]:
    """The pack as a process; its first line is the port it serves on."""
    proc = Watched([str(PYTHON), "-u", *args], cwd=cwd, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        line = proc.wait_line(lambda _: True, "the pack's first line (the port it serves on)", timeout=60)
    except BaseException:
        proc.kill()
        raise
    if not line.strip().isdigit():
        proc.kill()
        raise AssertionError(f"pack did not print a port: {line!r} {proc.tail()}")
    return proc, int(line)


@contextlib.contextmanager
def _serving(args: list[str], cwd: Path = REPO):
    """Start the pack with ``args``, yield an AnalyzerStub on the port it printed, stop it afterwards."""
    proc, port = _start(args, cwd)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    with proc:     # killed on the way out if it did not stop when asked
        try:
            grpc.channel_ready_future(channel).result(timeout=60)
            yield analyzer_pb2_grpc.AnalyzerStub(channel)
        finally:
            channel.close()
            proc.proc.terminate()
            try:
                proc.finish(timeout=10)
            except subprocess.TimeoutExpired:
                pass


@pytest.fixture(scope="module")
def analyzer():
    with _serving(["-m", "policy"]) as stub:
        yield stub


def struct(props: dict) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(props)
    return out


def urn(rtype: str, name: str) -> str:
    return f"urn:pulumi:dev::tpuctl::{rtype}::{name}"


def analyze(stub, rtype: str, name: str, props: dict):
    return stub.Analyze(analyzer_pb2.AnalyzeRequest(type=rtype, name=name, urn=urn(rtype, name), properties=struct(props)))


def bucket_props(purpose: str, **over) -> dict:
    props = {"name": NAMES[purpose], "uniformBucketLevelAccess": True, "publicAccessPrevention": "enforced",
             "forceDestroy": False, "versioning": {"enabled": purpose in ("data", "artifacts")},
             "logging": {"logBucket": "tpuctl-proj-access-logs", "logObjectPrefix": NAMES[purpose]},
             "labels": {domain.PURPOSE_LABEL: purpose, "managed-by": "tpuctl"}}
    props.update(over)
    return props


def test_analyzer_protocol_end_to_end(analyzer):
    # Handshake: not implemented by pulumi-policy 1.21 (the engine falls back to the classic flow).
    with pytest.raises(grpc.RpcError) as err:
        analyzer.Handshake(analyzer_pb2.AnalyzerHandshakeRequest(engine_address="127.0.0.1:1", root_directory=str(REPO)))
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED

    # The engine's next call: stack identity and stack config (pulumi-policy keeps the stack tags).
    analyzer.ConfigureStack(analyzer_pb2.AnalyzerStackConfigureRequest(stack="dev", project="tpuctl", dry_run=True))

    info = analyzer.GetAnalyzerInfo(empty_pb2.Empty())
    assert info.name == "tpuctl" and info.supportsConfig
    policies = {p.name: p for p in info.policies}
    assert set(policies) == {spec.name for spec in RESOURCE_RULES + STACK_RULES}
    assert policies["bucket-uniform-access"].enforcementLevel == analyzer_pb2.MANDATORY
    assert policies["bucket-labels"].enforcementLevel == analyzer_pb2.ADVISORY
    assert policies["training-principals-storage-access"].policy_type == analyzer_pb2.POLICY_TYPE_STACK
    schema = json_format.MessageToDict(policies["gpu-quota-preference"].configSchema.properties)
    assert schema["maxGpuQuota"]["default"] == domain.DEFAULT_MAX_GPU_QUOTA

    # Resource analysis with the pack's defaults.
    good = analyze(analyzer, T.BUCKET, "artifacts", bucket_props("artifacts"))
    assert list(good.diagnostics) == []
    bad = analyze(analyzer, T.BUCKET, "artifacts",
                  bucket_props("artifacts", uniformBucketLevelAccess=False, versioning={"enabled": False}))
    got = {d.policyName: d for d in bad.diagnostics}
    assert set(got) == {"bucket-uniform-access", "artifacts-bucket-versioned"}
    assert all(d.enforcementLevel == analyzer_pb2.MANDATORY and d.policyPackName == "tpuctl" for d in got.values())
    assert "uniform_bucket_level_access=True" in got["bucket-uniform-access"].message

    # A value unknown during preview is not judged (no false violation, no crash).
    preview = analyze(analyzer, T.BUCKET, "data", bucket_props("data", uniformBucketLevelAccess=UNKNOWN_BOOLEAN_VALUE))
    assert list(preview.diagnostics) == []

    public = analyze(analyzer, T.BUCKET_IAM_MEMBER, "pub",
                     {"bucket": NAMES["data"], "role": "roles/storage.objectViewer", "member": "allUsers"})
    assert [d.policyName for d in public.diagnostics] == ["no-public-members"]

    quota = {"parent": "projects/my-tpu-project", "service": domain.QUOTA_SERVICE,
             "quotaId": "NVIDIA-T4-GPUS-per-project-region", "quotaConfig": {"preferredValue": "4"},
             "contactEmail": "ml@example.com"}
    assert list(analyze(analyzer, T.QUOTA_PREFERENCE, "q", quota).diagnostics) == []

    # Configure as `--policy-pack-config` does: a lower cap, and accessMode=project for the broad-roles pair.
    analyzer.Configure(analyzer_pb2.ConfigureAnalyzerRequest(policyConfig={
        "gpu-quota-preference": analyzer_pb2.PolicyConfig(enforcementLevel=analyzer_pb2.MANDATORY,
                                                          properties=struct({"maxGpuQuota": 2})),
        "project-roles-need-project-mode": analyzer_pb2.PolicyConfig(enforcementLevel=analyzer_pb2.MANDATORY,
                                                                     properties=struct({"accessMode": "project"})),
        "project-mode-broad-roles": analyzer_pb2.PolicyConfig(enforcementLevel=analyzer_pb2.ADVISORY,
                                                              properties=struct({"accessMode": "project"})),
    }))
    capped = analyze(analyzer, T.QUOTA_PREFERENCE, "q", quota)
    assert [(d.policyName, d.enforcementLevel) for d in capped.diagnostics] == [("gpu-quota-preference", analyzer_pb2.MANDATORY)]
    assert "maxGpuQuota=2" in capped.diagnostics[0].message
    broad = analyze(analyzer, T.PROJECT_IAM_MEMBER, "sa-admin",
                    {"project": "my-tpu-project", "role": "roles/storage.admin", "member": SA})
    assert [(d.policyName, d.enforcementLevel) for d in broad.diagnostics] == [("project-mode-broad-roles", analyzer_pb2.ADVISORY)]

    # Stack analysis: legacy roles only -> every bucket fails the access rule, reported on the bucket's URN.
    account = urn(T.SERVICE_ACCOUNT, "training-sa")

    def stack(read_role: str, write_role: str, member: str = SA, logs: bool = True) -> analyzer_pb2.AnalyzeStackRequest:
        resources = [analyzer_pb2.AnalyzerResource(
            type=T.SERVICE_ACCOUNT, name="training-sa", urn=account,
            properties=struct({"accountId": "tpuctl-trainer", "email": member.partition(":")[2] or member}))]
        if logs:      # the training account's log writer on the project (infra/access.py, both modes)
            name = "project-training-sa-logging.logWriter"
            resources.append(analyzer_pb2.AnalyzerResource(
                type=T.PROJECT_IAM_MEMBER, name=name, urn=urn(T.PROJECT_IAM_MEMBER, name),
                properties=struct({"project": "my-tpu-project", "role": "roles/logging.logWriter", "member": member}),
                propertyDependencies={"member": analyzer_pb2.AnalyzerPropertyDependencies(urns=[account])}))
        for purpose in domain.BUCKET_PURPOSES:
            resources.append(analyzer_pb2.AnalyzerResource(type=T.BUCKET, name=purpose, urn=urn(T.BUCKET, purpose),
                                                           properties=struct(bucket_props(purpose))))
            role = read_role if purpose in domain.READ_BUCKETS else write_role
            name = f"{purpose}-training-sa"
            resources.append(analyzer_pb2.AnalyzerResource(
                type=T.BUCKET_IAM_MEMBER, name=name, urn=urn(T.BUCKET_IAM_MEMBER, name),
                properties=struct({"bucket": NAMES[purpose], "role": role, "member": member}),
                propertyDependencies={"bucket": analyzer_pb2.AnalyzerPropertyDependencies(urns=[urn(T.BUCKET, purpose)]),
                                      "member": analyzer_pb2.AnalyzerPropertyDependencies(urns=[account])},
            ))
        return analyzer_pb2.AnalyzeStackRequest(resources=resources)

    ok = analyzer.AnalyzeStack(stack("roles/storage.objectViewer", "roles/storage.objectUser"))
    assert list(ok.diagnostics) == []
    # without the log writer: one advisory, which the engine reports and does not enforce
    quiet = analyzer.AnalyzeStack(stack("roles/storage.objectViewer", "roles/storage.objectUser", logs=False))
    assert [(d.policyName, d.enforcementLevel) for d in quiet.diagnostics] == [
        ("training-account-writes-logs", analyzer_pb2.ADVISORY)]
    assert domain.LOG_WRITE_PERMISSION in quiet.diagnostics[0].message
    legacy = analyzer.AnalyzeStack(stack("roles/storage.legacyBucketReader", "roles/storage.legacyBucketWriter"))
    diags = list(legacy.diagnostics)
    assert {d.policyName for d in diags} == {"training-principals-storage-access"}
    assert {d.urn for d in diags} == {urn(T.BUCKET, p) for p in domain.BUCKET_PURPOSES}
    assert all("storage.objects.get" in d.message and d.enforcementLevel == analyzer_pb2.MANDATORY for d in diags)

    # During a preview the member e-mail is unknown: the principal is named after the resource it comes from.
    preview_stack = analyzer.AnalyzeStack(stack("roles/storage.legacyBucketReader", "roles/storage.objectUser",
                                                member=UNKNOWN_STRING_VALUE))
    messages = [d.message for d in preview_stack.diagnostics]
    assert len(messages) == len(domain.READ_BUCKETS)
    assert all("<member of training-sa>" in m and "storage.objects.get" in m for m in messages), messages


def test_engine_launch_style_serves_the_same_pack():
    """`pulumi preview --policy-pack policy` starts pulumi-analyzer-policy-python in the pack folder with
    `<engine address> . -virtualenv=../.venv`, which runs `<venv>/bin/python -u -m pulumi.policy <engine> .`."""
    with _serving(["-m", "pulumi.policy", "127.0.0.1:1", "."], cwd=REPO / "policy") as stub:
        assert stub.GetPluginInfo(empty_pb2.Empty()).version
        assert stub.GetAnalyzerInfo(empty_pb2.Empty()).name == "tpuctl"
