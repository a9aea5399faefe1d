"""Sundial's worker (`python -m sundial worker`): runs the container jobs of ScheduledJobs
on temporal (spec.job). The Temporal Schedule starts Sundial's RunJob workflow
(`workflows.py`, deterministic, no I/O) on Sundial's task queue; its activities
(`activities.py`) read the ScheduledJob, make the Job, wait for it and delete it when the
run is cancelled; `main.py` serves them."""
