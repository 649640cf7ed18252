"""Run the Pulumi program offline with Google Cloud mocked: what `pulumi up` would register.

Runtime code, not test-only: ``tpuctl plan`` and the policy pack's tests use ``run_program`` to
see every resource with its inputs (camelCase, as the engine and policies see them) and the
stack outputs, resolved to plain JSON values, without a Pulumi CLI or cloud credentials.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import mocks as _mocks
from pulumi.runtime import settings as _settings

from ground import domain
from ground import tokens as T
from ground.outputs import OUTPUT_KEYS
from infra.config import NAMESPACE, InfraConfig, load_config
from infra.program import build  # pulumi_gcp is heavy: only when a program actually runs

STACK_TYPE = "pulumi:pulumi:Stack"
DYNAMIC_PROVIDER_KEY = "__provider"
#: Attributes of an existing bucket when the caller says nothing about it. Fine-grained access
#: (uniform off), so an offline plan of the ACL route goes through; the real engine reads the bucket.
DEFAULT_EXISTING_BUCKET: dict[str, Any] = {"uniformBucketLevelAccess": False, "location": "US"}


#: Quota ids Google has been seen to use for these metrics (a Vertex AI RESOURCE_EXHAUSTED error names
#: CustomModelTrainingT4GPUsPerProjectPerRegion; Compute Engine's ids are documented on
#: cloud.google.com/compute/resource-usage; checked 2026-11). Other ids the mocks make up (``mock_quota_id``).
KNOWN_QUOTA_IDS: dict[str, str] = {
    "aiplatform.googleapis.com/custom_model_training_nvidia_t4_gpus": "CustomModelTrainingT4GPUsPerProjectPerRegion",
    "compute.googleapis.com/nvidia_t4_gpus": "NVIDIA-T4-GPUS-per-project-region",
    "compute.googleapis.com/preemptible_nvidia_t4_gpus": "PREEMPTIBLE-NVIDIA-T4-GPUS-per-project-region",
}


def mock_quota_id(metric: str) -> str:
    """A plausible per-region quota id for ``metric`` (mocks only; the real program looks it up)."""
    if metric in KNOWN_QUOTA_IDS:
        return KNOWN_QUOTA_IDS[metric]
    service, _, name = metric.partition("/")
    if service == "compute.googleapis.com":
        return f"{name.upper().replace('_', '-')}-per-project-region"
    return "".join(part.capitalize() for part in name.split("_")) + "PerProjectPerRegion"


def catalogue_quota_infos(service: str) -> list[dict[str, Any]]:
    """One per-region QuotaInfo (camelCase, as the provider returns it) for every accelerator metric of
    ``service`` in the domain catalogue."""
    metrics = {domain.gpu_quota_metric(g, kind, spot) for g in domain.GPU_TYPES.values()
               for kind in domain.QUOTA_SERVICES for spot in (False, True)}
    metrics |= {metric for metric, _ in domain.VERTEX_TPU_QUOTA.values()}
    infos = [quota_info(service, m) for m in sorted(metrics) if m.startswith(service + "/")]
    if service == domain.TPU_VM_QUOTA_SERVICE:   # per-zone ids (the metric is not documented: a made-up one here)
        ids = sorted({q for quota in domain.TPU_VM_QUOTAS.values() for q in (quota.on_demand, quota.spot) if q})
        infos += [quota_info(service, f"{service}/mock-{q.lower()}", q, ("zone",)) for q in ids]
    return infos


def quota_info(service: str, metric: str, quota_id: str | None = None,
               dimensions: tuple[str, ...] = ("region",)) -> dict[str, Any]:
    qid = quota_id or mock_quota_id(metric)
    return {
        "name": f"projects/PROJECT/locations/global/services/{service}/quotaInfos/{qid}",
        "quotaId": qid, "metric": metric, "service": service, "dimensions": list(dimensions),
        "containerType": "PROJECT", "isConcurrent": False, "isFixed": False, "isPrecise": True,
        "metricDisplayName": metric.rsplit("/", 1)[-1], "metricUnit": "1", "quotaDisplayName": qid,
        "refreshInterval": "", "serviceRequestQuotaUri": "https://console.cloud.google.com/iam-admin/quotas",
        "quotaIncreaseEligibilities": [{"isEligible": True, "ineligibilityReason": ""}],
        "dimensionsInfos": [{"dimensions": {}, "applicableLocations": ["us-central1"], "details": [{"value": "0"}]}],
    }


def project_number_for(project: str) -> str:
    """A stable, realistic-looking 12-digit project number for ``project`` (mocks only)."""
    return str(10**11 + int(hashlib.sha1(project.encode()).hexdigest()[:12], 16) % (9 * 10**11))


@dataclass(frozen=True)
class MockedResource:
    type: str                      # type token, e.g. gcp:storage/bucket:Bucket
    name: str                      # logical (Pulumi) name
    urn: str
    parent: str | None             # parent URN (the root stack's for top-level components)
    custom: bool                   # False for component resources
    inputs: dict[str, Any]         # camelCase, as the engine (and a policy pack) sees them
    outputs: dict[str, Any]        # inputs plus the computed outputs the mocks filled
    dependencies: tuple[str, ...] = ()   # URNs this resource waits for (depends_on and input outputs)

    @property
    def parent_type(self) -> str | None:
        """Type of the parent, read from the URN's type chain (``Stack$Component$Type``)."""
        chain = self.urn.split("::")[2].split("$")
        return chain[-2] if len(chain) > 1 else None


@dataclass
class MockRun:
    resources: list[MockedResource]
    outputs: dict[str, Any]
    config: InfraConfig | None = None
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def of_type(self, type_token: str) -> list[MockedResource]:
        return [r for r in self.resources if r.type == type_token]

    def named(self, type_token: str, name: str) -> MockedResource:
        for r in self.resources:
            if r.type == type_token and r.name == name:
                return r
        raise KeyError(f"no {type_token} named {name!r}; have {[r.name for r in self.of_type(type_token)]}")

    @property
    def custom_resources(self) -> list[MockedResource]:
        return [r for r in self.resources if r.custom]


def plain(value: Any) -> Any:
    """JSON-friendly copy of mock inputs/outputs: assets become ``{"asset": kind, ...}``."""
    if isinstance(value, pulumi.FileAsset):
        return {"asset": "file", "path": str(value.path)}
    if isinstance(value, pulumi.StringAsset):
        return {"asset": "string", "text": value.text}
    if isinstance(value, pulumi.FileArchive):
        return {"archive": "file", "path": str(value.path)}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


class GcpMocks(pulumi.runtime.Mocks):
    """Fills computed outputs the way Google Cloud would, and records every resource and call."""
    def __init__(self, project: str, project_number: str | None = None,
                 existing_buckets: Mapping[str, Mapping[str, Any]] | None = None,
                 quota_infos: Mapping[str, list[dict[str, Any]]] | None = None):
        self.project = project
        #: service -> QuotaInfos the getSQuotaInfos lookup returns (default: the catalogue's metrics)
        self.quota_infos = None if quota_infos is None else {k: list(v) for k, v in quota_infos.items()}
        self.project_number = project_number or project_number_for(project)
        self.existing_buckets = None if existing_buckets is None else {k: dict(v) for k, v in existing_buckets.items()}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.registered: dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._last = threading.local()   # (inputs, outputs) of the registration running in this thread

    # -- invokes ------------------------------------------------------------------------------
    def call(self, args: pulumi.runtime.MockCallArgs) -> dict | tuple[dict, list[tuple[str, str]]]:
        """Invoke results by token. A provider-side failure (not found, denied) is returned as a
        check failure, which the SDK raises in the program as the engine's error would be."""
        with self._lock:
            self.calls.append((args.token, dict(args.args)))
        if args.token == T.GET_PROJECT:
            pid = args.args.get("projectId") or self.project
            if pid != self.project:
                return {}, [("projectId", f"googleapi: Error 403: project {pid} not found or permission denied")]
            return {"projectId": pid, "number": self.project_number, "name": pid, "id": f"projects/{pid}"}
        if args.token == T.GET_BUCKET:
            name = args.args.get("name")
            if self.existing_buckets is None:
                attrs = dict(DEFAULT_EXISTING_BUCKET)
            elif name in self.existing_buckets:
                attrs = {**DEFAULT_EXISTING_BUCKET, **self.existing_buckets[name]}
            else:
                return {}, [("name", f"googleapi: Error 404: bucket {name} not found")]
            return {"name": name, "id": name, "url": f"gs://{name}",
                    "selfLink": f"https://www.googleapis.com/storage/v1/b/{name}", **attrs}
        if args.token == T.GET_QUOTA_INFOS:
            parent, service = args.args.get("parent", ""), args.args.get("service", "")
            if parent != f"projects/{self.project}":
                return {}, [("parent", f"googleapi: Error 403: permission denied on {parent}")]
            infos = (catalogue_quota_infos(service) if self.quota_infos is None
                     else self.quota_infos.get(service, []))
            return {"id": f"{parent}/services/{service}", "parent": parent, "service": service, "quotaInfos": infos}
        return {}

    # -- resources ----------------------------------------------------------------------------
    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict]:
        inputs = dict(args.inputs)
        if DYNAMIC_PROVIDER_KEY in inputs:   # a dill pickle: neither readable nor stable across Python versions
            inputs[DYNAMIC_PROVIDER_KEY] = "<dynamic provider>"
        computed, rid = self._computed(args.typ, args.name, inputs)
        outputs = {**inputs, **computed}
        with self._lock:
            self.registered[(args.typ, args.name)] = (inputs, outputs)
        self._last.value = (inputs, outputs)
        return rid, outputs

    def _computed(self, typ: str, name: str, inputs: dict[str, Any]) -> tuple[dict[str, Any], str]:
        project = inputs.get("project") or self.project
        if typ == T.BUCKET:
            bucket = inputs.get("name") or name
            return {
                "name": bucket, "url": f"gs://{bucket}", "project": project,
                "selfLink": f"https://www.googleapis.com/storage/v1/b/{bucket}",
                "projectNumber": self.project_number,
                "effectiveLabels": dict(inputs.get("labels") or {}),
            }, bucket
        if typ == T.SERVICE_IDENTITY:
            service = inputs.get("service", "")
            agent = {"tpu.googleapis.com": "cloud-tpu", "aiplatform.googleapis.com": "gcp-sa-aiplatform"}.get(
                service, f"gcp-sa-{service.split('.')[0]}")
            email = f"service-{self.project_number}@{agent}.iam.gserviceaccount.com"
            return {"email": email, "member": f"serviceAccount:{email}"}, f"projects/{project}/services/{service}"
        if typ == T.TPU_SERVICE_IDENTITY:
            email = f"service-{self.project_number}@gcp-sa-tpu.iam.gserviceaccount.com"
            parent = f"projects/{inputs.get('project')}/locations/{inputs.get('location')}"
            return {"email": email, "member": f"serviceAccount:{email}"}, f"{parent}/serviceIdentity"
        if typ == T.SERVICE_ACCOUNT:
            email = f"{inputs['accountId']}@{project}.iam.gserviceaccount.com"
            unique_id = str(10**20 + int(hashlib.sha1(email.encode()).hexdigest()[:15], 16))
            rid = f"projects/{project}/serviceAccounts/{email}"
            return {"email": email, "member": f"serviceAccount:{email}", "uniqueId": unique_id,
                    "name": rid, "project": project}, rid
        if typ == T.SERVICE:
            return {}, f"{project}/{inputs.get('service')}"
        if typ in (T.BUCKET_IAM_MEMBER, T.PROJECT_IAM_MEMBER):
            target = inputs.get("bucket") or inputs.get("project")
            etag = base64.b64encode(hashlib.sha1(f"{target}{inputs.get('role')}".encode()).digest()[:8]).decode()
            return {"etag": etag}, f"{target}/{inputs.get('role')}/{inputs.get('member')}"
        if typ in (T.BUCKET_ACCESS_CONTROL, T.DEFAULT_OBJECT_ACCESS_CONTROL):
            entity = inputs.get("entity", "")
            email = entity.split("-", 1)[1] if entity.startswith("user-") else None
            return {"email": email, "domain": email.split("@", 1)[1] if email else None}, \
                f"{inputs.get('bucket')}/{entity}"
        if typ == T.QUOTA_PREFERENCE:
            pref = inputs.get("name") or name
            quota_config = dict(inputs.get("quotaConfig") or {})
            quota_config.setdefault("grantedValue", "0")
            quota_config.setdefault("requestOrigin", "ORIGIN_UNSPECIFIED")
            return {"name": pref, "etag": "mock-etag", "reconciling": True, "quotaConfig": quota_config}, \
                f"{inputs.get('parent')}/locations/global/quotaPreferences/{pref}"
        if typ == T.BUCKET_OBJECT:
            obj = inputs.get("name") or name
            computed = {"outputName": obj, "mediaLink":
                        f"https://storage.googleapis.com/download/storage/v1/b/{inputs.get('bucket')}/o/{obj}",
                        "selfLink": f"https://www.googleapis.com/storage/v1/b/{inputs.get('bucket')}/o/{obj}"}
            source = inputs.get("source")
            if isinstance(source, pulumi.FileAsset) and Path(str(source.path)).is_file():
                computed["md5hash"] = base64.b64encode(hashlib.md5(Path(str(source.path)).read_bytes()).digest()).decode()
            return computed, f"{inputs.get('bucket')}-{obj}"
        if typ == T.ARTIFACT_REPOSITORY:
            rid = f"projects/{project}/locations/{inputs.get('location')}/repositories/{inputs.get('repositoryId')}"
            return {"name": inputs.get("repositoryId"), "id": rid, "project": project,
                    "effectiveLabels": dict(inputs.get("labels") or {})}, rid
        if typ == T.ARTIFACT_REPOSITORY_IAM_MEMBER:
            return {"etag": "mock-etag"}, f"{inputs.get('repository')}/{inputs.get('role')}/{inputs.get('member')}"
        return {}, f"{name}-id"


class _RecordingMonitor(_mocks.MockMonitor):
    """The SDK's mock monitor plus what the real engine does and the SDK's doesn't: reject
    duplicate URNs. Records the parent of each resource."""

    def __init__(self, mocks: GcpMocks):
        super().__init__(mocks)
        self.mocks = mocks
        self.recorded: list[MockedResource] = []
        self._urns: set[str] = set()
        self._lock = threading.Lock()

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        # The engine leaves the root stack's type out of its children's type chain.
        if parent and parent.split("::")[2] == STACK_TYPE:
            parent = ""
        return super().make_urn(parent, type_, name)

    def RegisterResource(self, request):
        if request.type == STACK_TYPE:
            return super().RegisterResource(request)
        urn = self.make_urn(request.parent, request.type, request.name)
        with self._lock:
            if urn in self._urns:
                raise Exception(f"Duplicate resource URN '{urn}'; try giving it a unique name")
            self._urns.add(urn)
        response = super().RegisterResource(request)   # calls GcpMocks.new_resource in this thread
        inputs, outputs = self.mocks._last.value
        deps = set(request.dependencies)
        for prop in request.propertyDependencies.values():
            deps.update(prop.urns)
        with self._lock:
            self.recorded.append(MockedResource(request.type, request.name, urn, request.parent or None,
                                                bool(request.custom), inputs, outputs, tuple(sorted(deps))))
        return response


def _engine_config(values: Mapping[str, Any]) -> dict[str, str]:
    """Config as the engine passes it to a program: namespaced keys, arrays as JSON text."""
    out: dict[str, str] = {}
    for key, value in values.items():
        full = key if ":" in key else f"{NAMESPACE}:{key}"
        out[full] = value if isinstance(value, str) else json.dumps(value)
    return out


def run_program(values: Mapping[str, Any], *, stack: str = "dev",
                existing_buckets: Mapping[str, Mapping[str, Any]] | None = None,
                base_dir: Path | None = None, project_number: str | None = None,
                quota_infos: Mapping[str, list[dict[str, Any]]] | None = None) -> MockRun:
    """Validate ``values`` (stack config), run ``infra.program.build`` under ``GcpMocks``
    (``preview=False``: every output is known) and return the resources and resolved outputs.

    ``existing_buckets`` maps bucket name -> attributes (camelCase, e.g. ``{"uniformBucketLevelAccess":
    True}``) that the ``getBucket`` lookup returns; when given, other buckets do not exist.
    ``quota_infos`` maps service -> QuotaInfos (``quota_info(...)``) the getSQuotaInfos lookup returns; by
    default every accelerator metric of the catalogue has a per-region quota.
    Raises ``ConfigError`` before anything is registered. Safe to call repeatedly in one process.
    """

    cfg = load_config(values, base_dir=base_dir)
    mocks = GcpMocks(cfg.settings.project, project_number=project_number, existing_buckets=existing_buckets,
                     quota_infos=quota_infos)
    monitor = _RecordingMonitor(mocks)
    _settings.set_root_resource(None)  # type: ignore[arg-type]  # a fresh Stack for this run
    pulumi.runtime.set_all_config(_engine_config(values))
    pulumi.runtime.set_mocks(mocks, project="tpuctl", stack=stack, preview=False, monitor=monitor)

    resolved: dict[str, Any] = {}

    def program() -> pulumi.Output[Any]:
        return pulumi.Output.from_input(build(cfg)).apply(resolved.update)

    try:
        pulumi.runtime.test(program)()
    finally:
        _settings.set_root_resource(None)  # type: ignore[arg-type]

    resources = list(monitor.recorded)
    outputs = {key: resolved.get(key) for key in OUTPUT_KEYS}
    return MockRun(resources=resources, outputs=outputs, config=cfg, calls=list(mocks.calls))
