"""backend: temporal. A Temporal Schedule: `backend` keeps it in step and owns the
finalizer, `client` talks to Temporal (request budget, per-connection limit, breaker),
`runs` observes its workflow executions and acts on requests, `watch` lists schedules in
place of a watch, `connections` resolves a ScheduledJob's connection and its Secrets."""
