"""Pure quota decisions: the ElasticQuotaTree model, usage accounting, admission and ordering."""
