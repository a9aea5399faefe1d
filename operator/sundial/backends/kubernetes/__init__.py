"""backend: kubernetes. A native CronJob, kept in step by server-side apply; the cluster's
CronJob controller fires its Jobs, the watch cache sees them."""
