"""The stack rule on hand-built stacks: effective permissions from the role table, per principal and bucket."""

from __future__ import annotations

from ground import domain
from ground import resources as r
from ground import tokens as T
from ground.access import AccessModel, StackResource, build_model, check_training_access, check_training_logs
from ground.settings import StackSettings
from policy.stack_rules import check_hub_models_complete

SA = "serviceAccount:trainer@proj-123456.iam.gserviceaccount.com"
AGENT = "serviceAccount:service-123@gcp-sa-tpu.iam.gserviceaccount.com"
NAMES = {p: f"tb-{p}" for p in domain.BUCKET_PURPOSES}


def urn(rtype: str, name: str) -> str:
    return f"urn:pulumi:dev::tpuctl::{rtype}::{name}"


def buckets(purposes=domain.BUCKET_PURPOSES):
    return [StackResource(T.BUCKET, p, urn(T.BUCKET, p),
                          {"name": NAMES[p], "labels": {domain.PURPOSE_LABEL: p}}) for p in purposes]


def member(bucket: str, role: str, who: str = SA, **extra) -> StackResource:
    name = f"{bucket}-{role}-{who}"
    return StackResource(T.BUCKET_IAM_MEMBER, name, urn(T.BUCKET_IAM_MEMBER, name),
                         {"bucket": bucket, "role": role, "member": who, **extra})


def project_member(role: str, who: str = SA) -> StackResource:
    name = f"project-{role}-{who}"
    return StackResource(T.PROJECT_IAM_MEMBER, name, urn(T.PROJECT_IAM_MEMBER, name),
                         {"project": "proj-123456", "role": role, "member": who})


def least_privilege(who: str = SA) -> list[StackResource]:
    out = []
    for purpose in domain.BUCKET_PURPOSES:
        for role in domain.roles_for("bucket", purpose):
            out.append(member(NAMES[purpose], role, who))
    return out


def test_least_privilege_bucket_grants_pass():
    assert check_training_access(buckets() + least_privilege() + least_privilege(AGENT), StackSettings()) == []


def test_legacy_bucket_roles_only_fail_for_missing_objects_get():
    stack = buckets()
    for purpose in domain.READ_BUCKETS:
        stack.append(member(NAMES[purpose], "roles/storage.legacyBucketReader"))
    for purpose in domain.WRITE_BUCKETS:
        stack.append(member(NAMES[purpose], "roles/storage.legacyBucketWriter"))
    problems = check_training_access(stack, StackSettings())
    assert len(problems) == 4  # one per bucket: none of them gives storage.objects.get
    assert all("storage.objects.get" in msg for msg, _ in problems)
    assert all("objects.list" not in msg.split(":")[0] for msg, _ in problems)
    data = next(msg for msg, _ in problems if "data bucket" in msg)
    assert "roles/storage.legacyBucketReader" in data and "grant roles/storage.objectViewer" in data
    urns = {u for _, u in problems}
    assert urns == {res.urn for res in buckets()}


def test_object_creator_is_not_enough_to_write():
    stack = buckets() + [g for g in least_privilege() if g.props["bucket"] != NAMES["artifacts"]]
    stack.append(member(NAMES["artifacts"], "roles/storage.objectCreator"))
    problems = check_training_access(stack, StackSettings())
    assert len(problems) == 1
    assert "storage.objects.delete, storage.objects.get" in problems[0][0]
    assert "artifacts bucket tb-artifacts" in problems[0][0]


def test_principal_with_some_access_must_have_all_of_it():
    stack = buckets() + least_privilege() + [member(NAMES["data"], "roles/storage.objectViewer", AGENT)]
    problems = check_training_access(stack, StackSettings())
    assert {msg.split(" lacks")[0] for msg, _ in problems} == {AGENT}
    assert len(problems) == 3


def test_project_level_roles_count_for_every_bucket():
    stack = buckets() + [project_member("roles/storage.admin"), project_member("roles/viewer")]
    assert check_training_access(stack, StackSettings(access_mode="project")) == []
    only_viewer = buckets() + [project_member("roles/viewer"), member(NAMES["data"], "roles/storage.objectViewer")]
    problems = check_training_access(only_viewer, StackSettings())
    # roles/viewer reads the stack's buckets through their projectViewer convenience bindings
    # (legacyBucketReader + legacyObjectReader), so only the two write buckets fail
    assert sorted(msg.split(" on the ")[1].split(" bucket")[0] for msg, _ in problems) == ["artifacts", "staging"]


def test_basic_roles_reach_objects_only_through_convenience_bindings():
    # roles/editor carries no storage.objects.* itself: on buckets the stack creates the default
    # projectEditor bindings (legacyBucketOwner + legacyObjectOwner) give read, list and write ...
    stack = buckets() + least_privilege() + [project_member("roles/editor", AGENT),
                                             member(NAMES["data"], "roles/storage.objectViewer", AGENT)]
    model = build_model(stack, StackSettings())
    assert not {p for p in domain.ROLE_STORAGE_PERMISSIONS["roles/editor"] if p.startswith("objects.")}
    assert model.via_convenience(AGENT, NAMES["artifacts"]) == {"roles/storage.legacyBucketOwner",
                                                                "roles/storage.legacyObjectOwner"}
    assert model.missing(AGENT, NAMES["artifacts"]) == frozenset()
    assert check_training_access(stack, StackSettings()) == []
    # ... on a bucket the stack does not create nothing is assumed ...
    existing = build_model(stack, StackSettings(existing_data_bucket="legacy-data"))
    assert existing.via_convenience(AGENT, "legacy-data") == set()
    # ... and an authoritative bucket policy replaces the defaults.
    policy = StackResource(T.BUCKET_IAM_POLICY, "pol", urn(T.BUCKET_IAM_POLICY, "pol"),
                           {"bucket": NAMES["artifacts"], "policyData": '{"bindings": []}'})
    assert build_model(stack + [policy], StackSettings()).via_convenience(AGENT, NAMES["artifacts"]) == set()


def test_live_convenience_members_apply_to_basic_role_holders():
    user = "user:ann@example.com"
    model = AccessModel.from_bindings(
        {"data": "live-data"},
        {"live-data": [{"role": "roles/storage.legacyObjectReader", "members": ["projectViewer:proj-123456"]},
                       {"role": "roles/storage.legacyBucketReader", "members": ["projectViewer:proj-123456"]}]},
        [{"role": "roles/viewer", "members": [user]}])
    assert model.permissions(user, "live-data") >= {"objects.get", "objects.list"}
    assert model.missing(user, "live-data") == frozenset()
    assert "projectViewer:proj-123456" not in model.principals


def test_service_agent_role_does_not_make_a_training_principal():
    stack = buckets() + least_privilege() + [project_member("roles/cloudtpu.serviceAgent", AGENT)]
    assert check_training_access(stack, StackSettings()) == []


def test_existing_bucket_via_acl_counts_acl_entries():
    settings = StackSettings(existing_data_bucket="legacy-data", existing_data_bucket_access="acl")
    stack = buckets(("staging", "artifacts", "hub-cache")) + [g for g in least_privilege()
                                                             if g.props["bucket"] != NAMES["data"]]
    entity = "user-" + SA.split(":", 1)[1]
    reader = StackResource(T.BUCKET_ACCESS_CONTROL, "acl", urn(T.BUCKET_ACCESS_CONTROL, "acl"),
                           {"bucket": "legacy-data", "role": "READER", "entity": entity})
    default_reader = StackResource(T.DEFAULT_OBJECT_ACCESS_CONTROL, "dacl", urn(T.DEFAULT_OBJECT_ACCESS_CONTROL, "dacl"),
                                   {"bucket": "legacy-data", "role": "READER", "entity": entity})
    assert check_training_access(stack + [reader, default_reader], settings) == []
    problems = check_training_access(stack + [reader], settings)
    assert len(problems) == 1
    assert "storage.objects.get" in problems[0][0] and "data bucket legacy-data" in problems[0][0], problems
    assert problems[0][1] is None  # the existing bucket is not a resource of the stack


def test_existing_bucket_with_no_grant_fails():
    settings = StackSettings(existing_data_bucket="legacy-data")
    stack = buckets(("staging", "artifacts", "hub-cache")) + [g for g in least_privilege()
                                                             if g.props["bucket"] != NAMES["data"]]
    problems = check_training_access(stack, settings)
    assert len(problems) == 1 and "holds no role there" in problems[0][0]


def test_conditional_grants_are_not_counted():
    stack = buckets() + [g for g in least_privilege() if g.props["bucket"] != NAMES["data"]]
    stack.append(member(NAMES["data"], "roles/storage.objectViewer",
                        condition={"title": "t", "expression": "request.time < timestamp('2030-01-01T00:00:00Z')"}))
    problems = check_training_access(stack, StackSettings())
    assert len(problems) == 1 and "conditional grants are not counted" in problems[0][0]


def test_stack_without_any_grant_fails():
    problems = check_training_access(buckets(), StackSettings())
    assert len(problems) == 1 and "no principal is granted access" in problems[0][0]
    assert check_training_access([], StackSettings()) == []  # no training bucket, nothing to prove


def test_state_style_bucket_reference_and_unknown_member_resolve():
    account_urn = urn(T.SERVICE_ACCOUNT, "training-sa")

    def unknown_member_grants(skip: str | None = None) -> list[StackResource]:
        out = []
        for g in least_privilege():
            if g.props["bucket"] == skip:
                continue
            g.props["bucket"] = "b/" + g.props["bucket"]   # how the provider stores it in state
            g.props["member"] = r.UNKNOWN                 # computed from the account at preview
            g.sources = {"member": [account_urn]}
            out.append(g)
        return out

    stack = buckets() + unknown_member_grants()
    assert build_model(stack, StackSettings()).principals == ["<member of training-sa>"]
    assert check_training_access(stack, StackSettings()) == []
    problems = check_training_access(buckets() + unknown_member_grants(skip=NAMES["staging"]), StackSettings())
    assert len(problems) == 1 and problems[0][0].startswith("<member of training-sa> lacks")


HUB = domain.hub_cache_key("https://tfhub.dev/google/x/1")


def hub_object(name: str) -> StackResource:
    return StackResource(T.BUCKET_OBJECT, name, urn(T.BUCKET_OBJECT, name), {"bucket": NAMES["hub-cache"], "name": name})


def test_hub_model_with_saved_model_at_root_passes():
    objects = [hub_object(f"model-cache/{HUB}/saved_model.pb"), hub_object(f"model-cache/{HUB}/variables/variables.index")]
    assert check_hub_models_complete(objects, StackSettings()) == []
    assert check_hub_models_complete([], StackSettings()) == []


def test_hub_model_uploaded_one_folder_too_deep_fails():
    objects = [hub_object(f"model-cache/{HUB}/mobilenet/saved_model.pb"),
               hub_object(f"model-cache/{HUB}/mobilenet/variables/variables.index")]
    problems = check_hub_models_complete(objects, StackSettings())
    assert len(problems) == 1
    assert f"model-cache/{HUB}/ has no saved_model.pb" in problems[0][0]
    assert "it is at model-cache/" in problems[0][0] and problems[0][1] == objects[0].urn


def test_hub_model_folder_without_any_saved_model_fails_under_configured_prefix():
    settings = StackSettings(hub_cache_prefix="tfhub")
    assert check_hub_models_complete([hub_object(f"tfhub/{HUB}/variables/variables.index")], settings)
    # objects outside the configured prefix are the resource rule's business, not this one's
    assert check_hub_models_complete([hub_object(f"model-cache/{HUB}/variables/variables.index")], settings) == []


def training_account(email: str | None = "trainer@proj-123456.iam.gserviceaccount.com") -> StackResource:
    props = {"accountId": "trainer", "project": "proj-123456", **({"email": email} if email else {})}
    return StackResource(T.SERVICE_ACCOUNT, domain.TRAINING_SA_KEYWORD, urn(T.SERVICE_ACCOUNT, "training-sa"), props)


def test_the_training_account_must_be_able_to_write_logs():
    stack = buckets() + least_privilege() + [training_account()]
    [(message, where)] = check_training_logs(stack, StackSettings())
    assert message.startswith(f"the training service account {SA} lacks {domain.LOG_WRITE_PERMISSION} on the project")
    assert "roles/logging.logWriter" in message and where is None
    assert check_training_logs(stack + [project_member("roles/logging.logWriter")], StackSettings()) == []
    # a bucket-level grant of the role is no log writer, and another account's project grant is not the trainer's
    assert check_training_logs(stack + [member(NAMES["data"], "roles/logging.logWriter")], StackSettings())
    assert check_training_logs(stack + [project_member("roles/logging.logWriter", AGENT)], StackSettings())
    # e-mail unknown (a preview) and no grant at all: named by account id, still flagged
    [(message, _)] = check_training_logs(buckets() + [training_account(None)], StackSettings())
    assert SA in message


def test_no_training_account_in_the_stack_nothing_to_check():
    assert check_training_logs(buckets() + least_privilege(AGENT), StackSettings()) == []
