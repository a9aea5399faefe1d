"""`sundial-cron check`: the ScheduledJobs that run an image against its registry, read from a
folder, a file or standard input (`kubectl kustomize`, `helm template`), with the library's
own YAML reader (standard library only), which reads what PyYAML reads in this repository."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from sundial_cron import Registry
from sundial_cron.check import check
from sundial_cron.yamlish import YamlError, load_all

from images import REPO


def jobs() -> Registry:
    registry = Registry()
    registry.add("send-invoices", print, schedule="*/5 * * * *")
    registry.add("report", print, schedule="0 3 * * *")
    registry.add("cleanup", print)  # no schedule: nothing to compare
    return registry


def scheduledjob(name: str, cron_job: str | None, schedule: str = "0 3 * * *") -> str:
    job = f"cronJob: {cron_job}" if cron_job else "command: [run]"
    return f"""
apiVersion: sundial.dev/v1alpha1
kind: ScheduledJob
metadata:
  name: {name}
  namespace: billing   # a comment
spec:
  schedule: "{schedule}"
  job:
    image: registry.example/billing:1.4   # the image checked
    {job}
"""


def checked(*paths: str, stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = check(jobs(), paths, out, err, stdin=io.StringIO(stdin))
    return code, out.getvalue(), err.getvalue()


def test_every_job_known_and_every_schedule_the_manifests_passes(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        scheduledjob("invoices", "send-invoices", "*/5   * * * *")
        + "---\n"
        + scheduledjob("nightly", "report")
    )
    (tmp_path / "nested").mkdir()
    (tmp_path / "nested" / "b.yml").write_text(
        scheduledjob("tidy", "cleanup", "@hourly") + "---\nkind: ConfigMap\n"
    )
    (tmp_path / "notes.txt").write_text("kind: ScheduledJob\n: not yaml at all")
    code, out, err = checked(str(tmp_path))
    assert (code, err) == (0, "")
    assert "check: 3 ScheduledJob(s), 3 naming a job" in out


def test_an_unknown_job_and_a_drifted_schedule_fail_the_check(tmp_path: Path) -> None:
    manifest = tmp_path / "jobs.yaml"
    manifest.write_text(
        scheduledjob("invoices", "send-invoice")
        + "---\n"
        + scheduledjob("nightly", "report", "30 2 * * *")
        + "---\n"
        + scheduledjob("custom", None)
    )
    code, out, _ = checked(str(manifest))
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == (
        f"{manifest}#1: ScheduledJob billing/invoices: job.cronJob 'send-invoice' is not in the "
        "image's registry (known jobs: cleanup, report, send-invoices)"
    )
    assert lines[1] == (
        f"{manifest}#2: ScheduledJob billing/nightly: the registry's schedule for 'report' is "
        "'0 3 * * *', the manifest's '30 2 * * *' (the manifest's runs: correct the registry)"
    )
    assert lines[2] == "check: 2 problem(s) in 3 ScheduledJob(s)"


def test_a_render_on_standard_input_and_an_interval(tmp_path: Path) -> None:
    rendered = """\
# Source: billing/templates/cron.yaml
apiVersion: v1
kind: List
items:
- apiVersion: sundial.dev/v1alpha1
  kind: ScheduledJob
  metadata: {name: invoices}
  spec:
    backend: temporal
    interval: {every: 5m}
    job: {image: "registry.example/billing:1.4", cronJob: send-invoices}
"""
    code, out, _ = checked("-", stdin=rendered)
    assert code == 1
    assert "<stdin>#1: ScheduledJob invoices: the registry's schedule for 'send-invoices'" in out
    assert "every {'every': '5m'}" in out


@pytest.mark.parametrize(
    ("files", "said"),
    [
        ({"x.yaml": "kind: ConfigMap\n"}, "no ScheduledJob (sundial.dev)"),
        ({"x.yaml": "a: [unclosed\n"}, "a flow collection is not closed"),
    ],
)
def test_nothing_to_check_or_unreadable_manifests_exit_2(
    tmp_path: Path, files: dict[str, str], said: str
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    code, _, err = checked(str(tmp_path))
    assert code == 2
    assert said in err
    assert checked(str(tmp_path / "missing"))[0] == 2


def test_the_command_line_check_of_the_example_services_image() -> None:
    """The example service's registry against its own ScheduledJob manifests."""
    service = REPO / "examples" / "service"
    done = subprocess.run([sys.executable, "-m", "service", "check", "manifests"], cwd=service,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every job known" in done.stdout


# ---- the YAML reader ------------------------------------------------------------------------


def repository_yaml() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "*.yaml", "*.yml"], cwd=REPO, text=True,
                            capture_output=True, check=True).stdout.split()  # fmt: skip
    # A Helm chart's templates are Go templates that render YAML, not YAML themselves.
    return [REPO / path for path in listed if "/templates/" not in path]


def test_it_reads_every_yaml_file_of_the_repository_as_pyyaml_does() -> None:
    files = repository_yaml()
    assert len(files) > 20
    for path in files:
        text = path.read_text()
        expected = [document for document in yaml.safe_load_all(text) if document is not None]
        assert load_all(text) == expected, path


TRICKY = """
%YAML 1.2
---
a: &x {b: [1, 'two', "th\\"ree\\u00e9"], c: null}
d: *x
e: |
  line one
    indented
  last

f: >-
  folded
  text

  para
g:
- x
- - nested
  - n2
- k: v
  k2: 'it''s'
h: "multi
  line"
plain: a long
  plain scalar
j: http://example.com:80/x # comment
k: !!str 123
l: [a, {m: n}]
"o p": ~
q:
  - r
list:
  - name: a
    value: "1"
  -   name: b
      value: |-
        kept
s: 1.5
t: -3
u: true
--- # second
- just: a list
...
"""


def test_it_reads_the_yaml_that_helm_and_hand_written_manifests_use() -> None:
    expected: list[Any] = list(yaml.safe_load_all(TRICKY))
    assert load_all(TRICKY) == expected


@pytest.mark.parametrize(
    "text", ["a: b\n  c: d\n", "a: *nowhere\n", "a: 'open\n", "- a\nb: c\n", "a: [1] x\n"]
)
def test_what_it_cannot_read_is_an_error_with_the_line(text: str) -> None:
    with pytest.raises(YamlError, match="line"):
        load_all(text)
