"""The ways a ScheduledJob's job can run, one folder each: `kubernetes` (a CronJob the
cluster's controller fires) and `temporal` (a Schedule on a Temporal server, with its
client, the listing that stands in for a watch, its runs and its connections). reconcile
picks one by spec.backend and switches between them; nothing here imports the other."""
