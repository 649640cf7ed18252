"""A small threaded HTTP server on 127.0.0.1 standing in for the Google APIs grant-access and doctor call.

Unlike gcp-storage-emulator it ENFORCES IAM etags (stale etag -> 412 for GCS, 409 ABORTED for
resource manager) and counts setIamPolicy calls, which is what the concurrency tests need.
Implements only: GCS JSON API bucket get / getIamPolicy / setIamPolicy / objects list / object media;
Cloud Resource Manager v3 projects get / getIamPolicy / setIamPolicy; serviceusage v1beta1
generateServiceIdentity and v1 services batchGet / batchEnable; cloudquotas v1 quotaPreferences list and
quotaInfos list; Cloud TPU v2 projects.locations.generateServiceIdentity (the TPU VM agent).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import itertools
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit


class FakeGoogle:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._etags = itertools.count(1)
        self.buckets: dict[str, dict] = {}        # name -> {"policy": {...}, "uniform": bool, "objects": [..]}
        self.projects: dict[str, dict] = {}       # id -> {"number": str, "policy": {...}}
        self.forbidden_policy_read: set[str] = set()   # bucket names / project ids
        self.services: dict[str, set[str]] = {}    # project -> enabled services
        self.quota_preferences: dict[str, list[dict]] = {}
        self.quota_infos: dict[str, list[dict]] = {}     # service -> QuotaInfos (JSON), any project
        self.quota_info_calls: list[tuple[str, str]] = []
        self.tpu_identity_calls: list[tuple[str, str]] = []
        self.set_calls: dict[str, int] = {}        # resource -> successful setIamPolicy calls
        self.conflicts: dict[str, int] = {}        # resource -> rejected (stale etag) calls
        self.identity_calls: list[tuple[str, str]] = []
        self.enable_calls: list[tuple[str, list[str]]] = []
        self.interfere: dict[str, list[dict]] = {}  # resource -> bindings a "concurrent writer" adds before the next set
        self.lost_answers: dict[str, int] = {}      # resource -> setIamPolicy calls applied but answered 503 (answer lost)
        self.server: ThreadingHTTPServer | None = None

    # ---- state helpers used by tests ----
    def _etag(self) -> str:
        return base64.b64encode(f"etag-{next(self._etags)}".encode()).decode()

    def add_bucket(self, name: str, bindings: list[dict] | None = None, uniform: bool = True,
                   objects: list[dict] | None = None) -> None:
        self.buckets[name] = {"policy": {"version": 3, "etag": self._etag(), "bindings": copy.deepcopy(bindings or [])},
                              "uniform": uniform, "objects": list(objects or [])}

    def add_project(self, project: str, number: str, bindings: list[dict] | None = None) -> None:
        self.projects[project] = {"number": number,
                                  "policy": {"version": 3, "etag": self._etag(), "bindings": copy.deepcopy(bindings or [])}}

    def bucket_bindings(self, name: str) -> list[dict]:
        with self.lock:
            return copy.deepcopy(self.buckets[name]["policy"]["bindings"])

    def project_bindings(self, project: str) -> list[dict]:
        with self.lock:
            return copy.deepcopy(self.projects[project]["policy"]["bindings"])

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    # ---- server ----
    def start(self) -> FakeGoogle:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _send(self, status: int, body: dict | bytes) -> None:
                raw = isinstance(body, bytes)       # object media (alt=media) goes out as stored
                data = body if raw else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/octet-stream" if raw else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int, message: str, reason: str) -> None:
                self._send(status, {"error": {"code": status, "message": message, "status": reason,
                                              "errors": [{"message": message, "reason": reason}]}})

            def _body(self) -> dict:
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n) or b"{}") if n else {}

            def do_GET(self):
                self._dispatch("GET")

            def do_POST(self):
                self._dispatch("POST")

            def do_PUT(self):
                self._dispatch("PUT")

            def _dispatch(self, method: str) -> None:
                parts = urlsplit(self.path)
                path, query = unquote(parts.path), parse_qs(parts.query)
                body = self._body() if method in ("POST", "PUT") else {}
                for pattern, meth, fn in ROUTES:
                    m = re.fullmatch(pattern, path)
                    if m and meth == method:
                        with fake.lock:
                            status, out = fn(fake, m, query, body)
                        if status >= 400:
                            self._error(status, out["message"], out["reason"])
                        else:
                            self._send(status, out)
                        return
                self._error(404, f"no route {method} {path}", "NOT_FOUND")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def _err(status: int, message: str, reason: str):
    return status, {"message": message, "reason": reason}


def _interfere(fake: FakeGoogle, resource: str, policy: dict) -> None:
    """Simulate another tool writing between our read and our write: new binding, new etag."""
    extra = fake.interfere.pop(resource, None)
    if extra:
        policy["bindings"] = policy["bindings"] + copy.deepcopy(extra)
        policy["etag"] = fake._etag()


# ---- GCS JSON API ----
def _bucket_get(fake: FakeGoogle, m, q, body):
    b = fake.buckets.get(m["b"])
    if b is None:
        return _err(404, "The specified bucket does not exist.", "notFound")
    return 200, {"kind": "storage#bucket", "name": m["b"], "id": m["b"], "metageneration": "1",
                 "location": "US", "iamConfiguration": {"uniformBucketLevelAccess": {"enabled": b["uniform"]}}}


def _bucket_iam_get(fake, m, q, body):
    b = fake.buckets.get(m["b"])
    if b is None:
        return _err(404, "The specified bucket does not exist.", "notFound")
    if m["b"] in fake.forbidden_policy_read:
        return _err(403, "caller does not have storage.buckets.getIamPolicy access", "forbidden")
    return 200, dict(copy.deepcopy(b["policy"]), kind="storage#policy", resourceId=f"projects/_/buckets/{m['b']}")


def _bucket_iam_set(fake, m, q, body):
    b = fake.buckets.get(m["b"])
    if b is None:
        return _err(404, "The specified bucket does not exist.", "notFound")
    res = f"gs://{m['b']}"
    _interfere(fake, res, b["policy"])
    if body.get("etag") != b["policy"]["etag"]:
        fake.conflicts[res] = fake.conflicts.get(res, 0) + 1
        return _err(412, "Precondition Failed: stale etag", "conditionNotMet")
    bindings = body.get("bindings", [])
    if any(bd.get("condition") for bd in bindings) and body.get("version") != 3:
        return _err(400, "conditional bindings need policy version 3", "invalid")
    b["policy"] = {"version": body.get("version", 1), "etag": fake._etag(), "bindings": bindings}
    fake.set_calls[res] = fake.set_calls.get(res, 0) + 1
    if fake.lost_answers.get(res):
        fake.lost_answers[res] -= 1
        return _err(503, "Backend Error", "backendError")       # written, but the client sees a failure
    return 200, dict(copy.deepcopy(b["policy"]), kind="storage#policy")


def _objects_list(fake, m, q, body):
    b = fake.buckets.get(m["b"])
    if b is None:
        return _err(404, "The specified bucket does not exist.", "notFound")
    prefix = (q.get("prefix") or [""])[0]
    items = [{k: v for k, v in dict(o, bucket=m["b"], kind="storage#object").items() if k != "data"}
             for o in b["objects"] if o["name"].startswith(prefix)]
    return 200, {"kind": "storage#objects", "items": items}


# ---- Cloud Resource Manager v3 ----
def _project_get(fake, m, q, body):
    p = fake.projects.get(m["p"])
    if p is None:
        return _err(403, f"Permission denied on resource project {m['p']} (or it may not exist).", "PERMISSION_DENIED")
    return 200, {"name": f"projects/{p['number']}", "projectId": m["p"], "state": "ACTIVE"}


def _project_iam_get(fake, m, q, body):
    p = fake.projects.get(m["p"])
    if p is None or m["p"] in fake.forbidden_policy_read:
        return _err(403, "The caller does not have permission", "PERMISSION_DENIED")
    return 200, copy.deepcopy(p["policy"])


def _project_iam_set(fake, m, q, body):
    p = fake.projects.get(m["p"])
    if p is None:
        return _err(403, "The caller does not have permission", "PERMISSION_DENIED")
    policy = body.get("policy", {})
    res = f"projects/{m['p']}"
    _interfere(fake, res, p["policy"])
    if policy.get("etag") != p["policy"]["etag"]:
        fake.conflicts[res] = fake.conflicts.get(res, 0) + 1
        return _err(409, "There were concurrent policy changes. Please retry the whole read-modify-write "
                         "with exponential backoff.", "ABORTED")
    p["policy"] = {"version": policy.get("version", 1), "etag": fake._etag(),
                   "bindings": policy.get("bindings", [])}
    fake.set_calls[res] = fake.set_calls.get(res, 0) + 1
    if fake.lost_answers.get(res):
        fake.lost_answers[res] -= 1
        return _err(503, "The service is currently unavailable.", "UNAVAILABLE")
    return 200, copy.deepcopy(p["policy"])


# ---- serviceusage / cloudquotas ----
_AGENT_FORMATS = {"tpu.googleapis.com": "service-{n}@cloud-tpu.iam.gserviceaccount.com",
                  "aiplatform.googleapis.com": "service-{n}@gcp-sa-aiplatform-cc.iam.gserviceaccount.com"}


def _generate_identity(fake, m, q, body):
    p = fake.projects.get(m["p"]) or next((v for v in fake.projects.values() if v["number"] == m["p"]), None)
    if p is None:
        return _err(403, "Permission denied", "PERMISSION_DENIED")
    fake.identity_calls.append((m["p"], m["s"]))
    email = _AGENT_FORMATS.get(m["s"], "service-{n}@gcp-sa-x.iam.gserviceaccount.com").format(n=p["number"])
    return 200, {"name": f"operations/gsi.{len(fake.identity_calls)}", "done": True,
                 "response": {"@type": "type.googleapis.com/google.api.serviceusage.v1beta1.ServiceIdentity",
                              "email": email, "uniqueId": "1234"}}


def _services_batch_get(fake, m, q, body):
    enabled = fake.services.get(m["p"], set())
    names = q.get("names", [])
    return 200, {"services": [{"name": n, "parent": f"projects/{m['p']}",
                               "state": "ENABLED" if n.rsplit("/", 1)[-1] in enabled else "DISABLED"} for n in names]}


def _services_batch_enable(fake, m, q, body):
    ids = body.get("serviceIds", [])
    fake.enable_calls.append((m["p"], ids))
    fake.services.setdefault(m["p"], set()).update(ids)
    return 200, {"name": "operations/enable.1", "done": True,
                 "response": {"@type": "type.googleapis.com/google.api.serviceusage.v1.BatchEnableServicesResponse",
                              "services": [{"name": f"projects/{m['p']}/services/{s}", "state": "ENABLED"} for s in ids]}}


def _quota_prefs(fake, m, q, body):
    return 200, {"quotaPreferences": fake.quota_preferences.get(m["p"], [])}


def _quota_infos(fake, m, q, body):
    fake.quota_info_calls.append((m["p"], m["s"]))
    return 200, {"quotaInfos": fake.quota_infos.get(m["s"], [])}


def quota_info(service: str, metric: str, quota_id: str, limits: dict[str, int], default: int | None = None,
               dimension: str = "region") -> dict:
    """A per-region (or per-zone) QuotaInfo as the Cloud Quotas REST API spells it: ``limits`` location -> value."""
    infos = [{"dimensions": {dimension: r}, "details": {"value": str(v)}, "applicableLocations": [r]}
             for r, v in limits.items()]
    if default is not None:
        infos.append({"dimensions": {}, "details": {"value": str(default)}, "applicableLocations": []})
    return {"name": f"projects/123/locations/global/services/{service}/quotaInfos/{quota_id}",
            "quotaId": quota_id, "metric": metric, "service": service, "dimensions": [dimension],
            "isPrecise": True, "containerType": "PROJECT", "dimensionsInfos": infos}


@contextlib.contextmanager
def quotas_endpoint(monkeypatch, tmp_path, infos: dict[str, list[dict]]):
    """A FakeGoogle serving ``infos`` (service -> QuotaInfos) as this process's Cloud Quotas endpoint, with no
    ambient credentials to fall back on."""
    server = FakeGoogle().start()
    monkeypatch.setenv("TPUCTL_CLOUDQUOTAS_ENDPOINT", server.url)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "none.json"))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    server.quota_infos.update(infos)
    try:
        yield server
    finally:
        server.stop()


# ---- Cloud TPU v2 ----
def _tpu_identity(fake, m, q, body):
    p = fake.projects.get(m["p"]) or next((v for v in fake.projects.values() if v["number"] == m["p"]), None)
    if p is None:
        return _err(403, "Permission denied", "PERMISSION_DENIED")
    fake.tpu_identity_calls.append((m["p"], m["l"]))
    return 200, {"identity": {"email": f"service-{p['number']}@gcp-sa-tpu.iam.gserviceaccount.com",
                              "uniqueId": "4321"}}


def _object_media(fake, m, q, body):
    b = fake.buckets.get(m["b"])
    obj = next((o for o in (b or {}).get("objects", []) if o["name"] == m["o"]), None)
    if obj is None or "data" not in obj:
        return _err(404, f"No such object: {m['b']}/{m['o']}", "NOT_FOUND")
    return 200, obj["data"]


ROUTES = [
    (r"/download/storage/v1/b/(?P<b>[^/]+)/o/(?P<o>.+)", "GET", _object_media),
    (r"/storage/v1/b/(?P<b>[^/]+)", "GET", _bucket_get),
    (r"/storage/v1/b/(?P<b>[^/]+)/iam", "GET", _bucket_iam_get),
    (r"/storage/v1/b/(?P<b>[^/]+)/iam", "PUT", _bucket_iam_set),
    (r"/storage/v1/b/(?P<b>[^/]+)/o", "GET", _objects_list),
    (r"/v3/projects/(?P<p>[^/:]+)", "GET", _project_get),
    (r"/v3/projects/(?P<p>[^/:]+):getIamPolicy", "POST", _project_iam_get),
    (r"/v3/projects/(?P<p>[^/:]+):setIamPolicy", "POST", _project_iam_set),
    (r"/v1beta1/projects/(?P<p>[^/]+)/services/(?P<s>[^/:]+):generateServiceIdentity", "POST", _generate_identity),
    (r"/v1/projects/(?P<p>[^/]+)/services:batchGet", "GET", _services_batch_get),
    (r"/v1/projects/(?P<p>[^/]+)/services:batchEnable", "POST", _services_batch_enable),
    (r"/v1/projects/(?P<p>[^/]+)/locations/global/quotaPreferences", "GET", _quota_prefs),
    (r"/v1/projects/(?P<p>[^/]+)/locations/global/services/(?P<s>[^/]+)/quotaInfos", "GET", _quota_infos),
    (r"/v2/projects/(?P<p>[^/]+)/locations/(?P<l>[^/:]+):generateServiceIdentity", "POST", _tpu_identity),
]


class FakeIamAdmin:
    """IAM admin v1 over gRPC (google-cloud-iam's IAMClient has no REST transport): service
    accounts get/create and roles get, served with the library's own message types."""

    SERVICE = "google.iam.admin.v1.IAM"

    def __init__(self) -> None:
        self.accounts: dict[str, dict] = {}   # email -> {"project":..., "display_name":...}
        self.roles: set[str] = set()
        self.created: list[str] = []
        self.deny_create = False               # answer creates with PERMISSION_DENIED, as for a caller without the role
        self.server = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeIamAdmin:
        from concurrent import futures

        import grpc
        from google.cloud.iam_admin_v1 import types

        def get_sa(request, context):
            email = request.name.rsplit("/", 1)[-1]
            if email not in self.accounts:
                context.abort(grpc.StatusCode.NOT_FOUND, f"Unknown service account {email}")
            return types.ServiceAccount(name=request.name, email=email, project_id=self.accounts[email]["project"])

        def create_sa(request, context):
            project = request.name.split("/", 1)[1]
            email = f"{request.account_id}@{project}.iam.gserviceaccount.com"
            if self.deny_create:
                context.abort(grpc.StatusCode.PERMISSION_DENIED, "Permission 'iam.serviceAccounts.create' denied")
            if email in self.accounts:
                context.abort(grpc.StatusCode.ALREADY_EXISTS, f"{email} already exists")
            self.accounts[email] = {"project": project, "display_name": request.service_account.display_name}
            self.created.append(email)
            return types.ServiceAccount(name=f"projects/{project}/serviceAccounts/{email}", email=email,
                                        project_id=project)

        def get_role(request, context):
            if request.name not in self.roles:
                context.abort(grpc.StatusCode.NOT_FOUND, f"role {request.name} not found")
            return types.Role(name=request.name, title="custom", included_permissions=["storage.objects.get"])

        def unary(fn, req_type, resp_type):
            return grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=req_type.deserialize, response_serializer=resp_type.serialize)

        handlers = {
            "GetServiceAccount": unary(get_sa, types.GetServiceAccountRequest, types.ServiceAccount),
            "CreateServiceAccount": unary(create_sa, types.CreateServiceAccountRequest, types.ServiceAccount),
            "GetRole": unary(get_role, types.GetRoleRequest, types.Role),
        }
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(self.SERVICE, handlers),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(grace=None)
