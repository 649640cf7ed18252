"""Pulumi type tokens (pulumi-gcp 10.2) of every resource type the program registers or the policy pack judges.

One table for the program's mocks, the policy rules, ``tpuctl plan`` and the tests. A token is
``<provider>:<module>/<lowerCamelType>:<Type>`` as pulumi-gcp's schema names it
(github.com/pulumi/pulumi-gcp provider/cmd/pulumi-resource-gcp/schema.json, 10.2.0, checked 2026-11).
"""

from __future__ import annotations

# Resources the program registers.
BUCKET = "gcp:storage/bucket:Bucket"
BUCKET_OBJECT = "gcp:storage/bucketObject:BucketObject"
BUCKET_IAM_MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
PROJECT_IAM_MEMBER = "gcp:projects/iAMMember:IAMMember"
BUCKET_ACCESS_CONTROL = "gcp:storage/bucketAccessControl:BucketAccessControl"
DEFAULT_OBJECT_ACCESS_CONTROL = "gcp:storage/defaultObjectAccessControl:DefaultObjectAccessControl"
SERVICE = "gcp:projects/service:Service"
SERVICE_IDENTITY = "gcp:projects/serviceIdentity:ServiceIdentity"
SERVICE_ACCOUNT = "gcp:serviceaccount/account:Account"
SA_IAM_MEMBER = "gcp:serviceaccount/iAMMember:IAMMember"
QUOTA_PREFERENCE = "gcp:cloudquota/sQuotaPreference:SQuotaPreference"
#: A Python dynamic resource registers as pulumi-python:dynamic/<module>:<name> (pulumi 3.x
#: sdk/python/lib/pulumi/dynamic/dynamic.py Resource.__init_subclass__, checked 2026-11): the TPU VM
#: agent created through the Cloud TPU v2 API (infra.identities.TpuServiceIdentity).
TPU_SERVICE_IDENTITY = "pulumi-python:dynamic/tpu:ServiceIdentity"
ARTIFACT_REPOSITORY = "gcp:artifactregistry/repository:Repository"
VERTEX_ENDPOINT = "gcp:vertex/aiEndpoint:AiEndpoint"
VERTEX_PERSISTENT_RESOURCE = "gcp:vertex/aiPersistentResource:AiPersistentResource"
ARTIFACT_REPOSITORY_IAM_MEMBER = "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember"

# Resources the program never registers but the policy pack must recognise (and mostly reject).
BUCKET_IAM_BINDING = "gcp:storage/bucketIAMBinding:BucketIAMBinding"
BUCKET_IAM_POLICY = "gcp:storage/bucketIAMPolicy:BucketIAMPolicy"
PROJECT_IAM_BINDING = "gcp:projects/iAMBinding:IAMBinding"
PROJECT_IAM_POLICY = "gcp:projects/iAMPolicy:IAMPolicy"
FOLDER_IAM_BINDING = "gcp:folder/iAMBinding:IAMBinding"
FOLDER_IAM_POLICY = "gcp:folder/iAMPolicy:IAMPolicy"
FOLDER_IAM_MEMBER = "gcp:folder/iAMMember:IAMMember"
ORG_IAM_BINDING = "gcp:organizations/iAMBinding:IAMBinding"
ORG_IAM_POLICY = "gcp:organizations/iAMPolicy:IAMPolicy"
ORG_IAM_MEMBER = "gcp:organizations/iAMMember:IAMMember"
SA_IAM_BINDING = "gcp:serviceaccount/iAMBinding:IAMBinding"
SA_IAM_POLICY = "gcp:serviceaccount/iAMPolicy:IAMPolicy"
BUCKET_ACL = "gcp:storage/bucketACL:BucketACL"
DEFAULT_OBJECT_ACL = "gcp:storage/defaultObjectACL:DefaultObjectACL"
OBJECT_ACL = "gcp:storage/objectACL:ObjectACL"
OBJECT_ACCESS_CONTROL = "gcp:storage/objectAccessControl:ObjectAccessControl"

# Invokes (data sources) the program calls.
GET_PROJECT = "gcp:organizations/getProject:getProject"
GET_BUCKET = "gcp:storage/getBucket:getBucket"
ARTIFACT_REPOSITORY_IAM_BINDING = "gcp:artifactregistry/repositoryIamBinding:RepositoryIamBinding"
ARTIFACT_REPOSITORY_IAM_POLICY = "gcp:artifactregistry/repositoryIamPolicy:RepositoryIamPolicy"

GET_QUOTA_INFOS = "gcp:cloudquota/getSQuotaInfos:getSQuotaInfos"

# The program's own component resources.
TRAINING_BUCKETS = "tpuctl:infra:TrainingBuckets"
SERVICE_IDENTITIES = "tpuctl:infra:ServiceIdentities"
ACCESS_GRANTS = "tpuctl:infra:AccessGrants"
GPU_QUOTA = "tpuctl:infra:GpuQuota"
HUB_MODEL_CACHE = "tpuctl:infra:HubModelCache"
TRAINER_IMAGE_REPOSITORY = "tpuctl:infra:TrainerImageRepository"
IMAGE_BUILDER = "tpuctl:infra:ImageBuilder"

BUCKET_IAM_TYPES = frozenset({BUCKET_IAM_MEMBER, BUCKET_IAM_BINDING, BUCKET_IAM_POLICY})
PROJECT_IAM_TYPES = frozenset({PROJECT_IAM_MEMBER, PROJECT_IAM_BINDING, PROJECT_IAM_POLICY})
HIERARCHY_IAM_TYPES = frozenset({FOLDER_IAM_MEMBER, FOLDER_IAM_BINDING, FOLDER_IAM_POLICY,
                                 ORG_IAM_MEMBER, ORG_IAM_BINDING, ORG_IAM_POLICY})
SA_IAM_TYPES = frozenset({SA_IAM_MEMBER, SA_IAM_BINDING, SA_IAM_POLICY})
REPOSITORY_IAM_TYPES = frozenset({ARTIFACT_REPOSITORY_IAM_MEMBER, ARTIFACT_REPOSITORY_IAM_BINDING,
                                  ARTIFACT_REPOSITORY_IAM_POLICY})
IAM_TYPES = BUCKET_IAM_TYPES | PROJECT_IAM_TYPES | HIERARCHY_IAM_TYPES | SA_IAM_TYPES | REPOSITORY_IAM_TYPES
#: Authoritative IAM above the bucket: replaces grants other tools (and people) made.
AUTHORITATIVE_PROJECT_IAM_TYPES = frozenset({PROJECT_IAM_BINDING, PROJECT_IAM_POLICY, FOLDER_IAM_BINDING,
                                             FOLDER_IAM_POLICY, ORG_IAM_BINDING, ORG_IAM_POLICY})
AUTHORITATIVE_BUCKET_IAM_TYPES = frozenset({BUCKET_IAM_BINDING, BUCKET_IAM_POLICY})
#: Authoritative ACL resources: they replace the whole ACL of a bucket or object.
AUTHORITATIVE_ACL_TYPES = frozenset({BUCKET_ACL, DEFAULT_OBJECT_ACL, OBJECT_ACL})
#: One fine-grained ACL entry each (additive).
ACL_ENTRY_TYPES = frozenset({BUCKET_ACCESS_CONTROL, DEFAULT_OBJECT_ACCESS_CONTROL, OBJECT_ACCESS_CONTROL})
ACL_TYPES = AUTHORITATIVE_ACL_TYPES | ACL_ENTRY_TYPES
#: Markers of authoritative IAM resource types (they replace what others granted): tpuctl registers none.
AUTHORITATIVE_IAM_MARKERS = ("IAMPolicy", "IAMBinding")
