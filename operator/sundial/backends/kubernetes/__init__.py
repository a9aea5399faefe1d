"""backend: kubernetes. A native CronJob, made by a create (create-first) and kept in step
by replacing it wholly; the cluster's CronJob controller fires its Jobs, the watch cache
sees them."""
