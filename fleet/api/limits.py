"""The bounds on every number and size a user controls (docs/architecture.md, invariant 7).

The API models put them in the CRD schemas (``maximum``, ``maxItems``, ``maxLength``,
``maxProperties``) and in CEL rules where a bound spans fields; the hub and the agents check
the same numbers again before they allocate from them, because an object may have been stored
under an older CRD. The README's "Validation" table lists them.
"""

from __future__ import annotations

# Replicas. Kubernetes caps an Indexed Job at 100,000 completions; the largest training jobs
# run some 100,000 GPUs at 8 per pod, about 12,500 pods. Per role and per job the same cap:
# it bounds what the hub's division and an agent's reconcile expand replica by replica.
MAX_REPLICAS = 10_000
MAX_JOB_REPLICAS = 10_000
# Replica types in a Kubeflow map: more than a kind has, so that an unknown type meets the CEL
# rule naming the allowed ones rather than a bare size error, while CEL cost stays bounded.
MAX_REPLICA_TYPES = 8

# Time in seconds (deadlines, TTLs, tolerations, grace periods, timeouts): ten years. Beyond
# that a date computed from it overflows (Python's datetime ends in year 9999).
MAX_SECONDS = 10 * 365 * 24 * 3600

MAX_BACKOFF_LIMIT = 10_000  # re-created replicas per job
MAX_SLOTS_PER_WORKER = 1_024  # MPI slots per worker (cores or GPUs of one pod)
MAX_PRIORITY = 1_000_000_000  # as a Kubernetes PriorityClass value
MAX_WEIGHT = 1_000_000  # a static cluster weight
MAX_GROUPS = 1_000  # spread constraints' min/max groups (clusters, regions...)

# Lists and maps.
MAX_CLUSTER_NAMES = 1_000  # clusterAffinity.clusterNames and exclude
MAX_SELECTORS = 256  # resourceSelectors
MAX_TOLERATIONS = 64  # clusterTolerations
MAX_SPREAD_CONSTRAINTS = 4  # one per spreadByField value
MAX_WEIGHTS = 1_000  # staticWeightList entries
MAX_LABEL_TERMS = 64  # matchLabels entries, matchExpressions
MAX_LABEL_VALUES = 256  # values of one matchExpression
MAX_ARGS = 1_024  # cmd, extraMPIArgs, debug/resume command and args
MAX_MCA = 256  # --mca key value pairs
MAX_MODE_SPECS = 8  # debug replicaSpecs, resumeSpecs
MAX_RESOURCES = 32  # resource names in one requests/limits/min/max map
MAX_LOG_FILESETS = 64  # T9k TensorBoard trainingLogFilesets
MAX_METADATA_ENTRIES = 256  # labels, and annotations, of a pod template; other maps in it
MAX_POD_LIST = 1_024  # any other list in a pod template (env, volumes, tolerations, ports)

# Quota trees: depth is cut by the schema (fleet.api.schema.MAX_NESTING).
MAX_QUOTA_NODES = 1_000  # nodes in one tree (checked by the webhook)
MAX_QUOTA_NAMESPACES = 1_000  # namespaces of one leaf

# Strings.
MAX_NAME = 253  # a Kubernetes object name (DNS subdomain)
MAX_LABEL_VALUE = 63
MAX_KEY = 317  # a qualified label key: prefix (253) / name (63)
MAX_ARG_LENGTH = 32_768  # one command argument
MAX_POD_STRING = 131_072  # any other string in a pod template: Linux's bound on one argument
# or environment string (MAX_ARG_STRLEN), the longest a container could be handed
MAX_TEXT = 4_096  # other free-form strings (images, paths, queue names)
MAX_QUANTITY_LENGTH = 64  # a quantity written as a string
MAX_ANNOTATIONS_SIZE = 262_144  # one annotation value: Kubernetes' limit for all of them
# A whole object as JSON (fleet.api.size): a job is copied into the Work of each member that
# runs it, with fleet's annotations and the members' reports beside it, and all of that must
# stay well under etcd's default request limit (1.5 MiB), past which the API server answers
# a bare 500. Twice the largest annotation a pod template may hold.
MAX_OBJECT_BYTES = 2 * MAX_ANNOTATIONS_SIZE
# Nesting of a whole object (fleet.api.size): a pod template's deepest fields (affinity terms,
# projected volumes) sit some 20 levels down a job; what an API server accepts goes to 10,000.
MAX_DEPTH = 64

# Quantities: one exa (10^18) in the quantity's own unit, more than any cluster has of
# anything (memory in bytes included), and what keeps a sum of them within 64 bits' reach.
MAX_QUANTITY = 10**18
MAX_QUANTITY_TEXT = "1E"
