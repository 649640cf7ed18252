"""Pulumi type tokens of every resource type the program registers (for plans, policies, tests)."""

BUCKET = "gcp:storage/bucket:Bucket"
BUCKET_IAM_MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
PROJECT_IAM_MEMBER = "gcp:projects/iAMMember:IAMMember"
BUCKET_ACL = "gcp:storage/bucketAccessControl:BucketAccessControl"
DEFAULT_OBJECT_ACL = "gcp:storage/defaultObjectAccessControl:DefaultObjectAccessControl"
SERVICE = "gcp:projects/service:Service"
SERVICE_IDENTITY = "gcp:projects/serviceIdentity:ServiceIdentity"
ACCOUNT = "gcp:serviceaccount/account:Account"
QUOTA_PREFERENCE = "gcp:cloudquota/sQuotaPreference:SQuotaPreference"
BUCKET_OBJECT = "gcp:storage/bucketObject:BucketObject"

TRAINING_BUCKETS = "tpuctl:infra:TrainingBuckets"
SERVICE_IDENTITIES = "tpuctl:infra:ServiceIdentities"
ACCESS_GRANTS = "tpuctl:infra:AccessGrants"
GPU_QUOTA = "tpuctl:infra:GpuQuota"
HUB_MODEL_CACHE = "tpuctl:infra:HubModelCache"

#: Authoritative IAM resources: tpuctl never registers any of them (they replace what others granted).
AUTHORITATIVE_IAM_MARKERS = ("IAMPolicy", "IAMBinding")
