"""`kubectl sundial import helm-values` end to end (it reads a file, no cluster): the
documents it prints apply as they are, files land where --dir says, and a refused entry
sets the exit code without hiding the others."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sundial.api.models import ScheduledJob
from sundial.plugin import main

VALUES = """
Projects:
  billing:
    Image: billing:4.2.0
    Crons:
      nightly-invoices:
        Schedule: "0 2 * * *"
        Envs: {MODE: cron, CRON_JOB: invoices}
        TtlSecondsAfterFinished: 3600
      weekly-report:
        Schedule: "0 6 * * 1"
        Envs: {MODE: cron, CRON_JOB: report}
        Suspend: true
"""


def test_values_print_scheduledjobs_the_models_accept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(VALUES)
    code = main(["import", "helm-values", str(values), "--path", "Projects.billing.Crons",
                 "-n", "billing"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    documents = [d for d in yaml.safe_load_all(out) if d]
    assert [d["metadata"]["name"] for d in documents] == ["nightly-invoices", "weekly-report"]
    for document in documents:
        sj = ScheduledJob.model_validate(document)
        assert sj.spec.job is not None
        assert sj.spec.job.image == "billing:4.2.0"  # read beside the Crons map
    assert "# Projects.billing.Crons.nightly-invoices as a ScheduledJob" in out


def test_dir_writes_a_file_per_object_and_a_refusal_sets_the_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(VALUES + "      broken:\n        Envs: {}\n")
    code = main(["import", "helm-values", str(values), "--path", "Projects.billing.Crons",
                 "-n", "billing", "--dir", str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1
    assert "1 of 3 entries were not imported: billing/broken" in err
    assert "Crons.broken.Schedule is missing" in err
    written = sorted(p.name for p in (tmp_path / "out" / "billing").iterdir())
    assert written == ["nightly-invoices.yaml", "weekly-report.yaml"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nightly", "--all"], "name one CronJob"),
        (["-l", "team=a", "--all"], "name one CronJob"),
        ([], "name one CronJob"),
        (["nightly", "-A"], "-n, not -A"),
    ],
)
def test_import_cronjob_says_which_selection_is_wrong_before_reading_anything(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A cluster nothing listens at: the refusal comes before any request.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "none",
        "clusters": [{"name": "none", "cluster": {"server": "https://127.0.0.1:9"}}],
        "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}],
        "users": [{"name": "none", "user": {"token": "x"}}],
    }))  # fmt: skip
    code = main(["import", "cronjob", *args, "--kubeconfig", str(kubeconfig)])
    assert code == 2
    assert message in capsys.readouterr().err
