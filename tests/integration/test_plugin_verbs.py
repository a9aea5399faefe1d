"""kubectl sundial status and list against the real apiserver: the timeline drawn from the
status as the server holds it, colour only when asked, and -o json|yaml the object as it
is. The object is in a shard no test operator serves, so its status is the test's own."""

from __future__ import annotations

import json

import pytest
import yaml

from plugin_samples import with_runs
from support import Kubectl, in_shard, kubectl_sundial

pytestmark = pytest.mark.cluster


def plugin(kubectl: Kubectl, namespace: str, *args: str) -> str:
    """`kubectl sundial ...`, as a user runs it (kubectl finds the installed plugin)."""
    done = kubectl_sundial(kubectl, *args, "-n", namespace)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_status_and_list_draw_the_timeline_and_output_the_object_unchanged(
    kubectl: Kubectl, namespace: str, crd_installed: None
) -> None:
    manifest = with_runs("nightly", namespace)
    status = manifest.pop("status")
    in_shard(manifest, "plugin-verbs-unserved")  # no operator writes its status but the test
    kubectl.apply(manifest)
    kubectl.run("patch", "scheduledjob", "nightly", "-n", namespace, "--subresource=status",
                "--type=merge", "-p", json.dumps({"status": status}))  # fmt: skip
    on_server = kubectl.get("scheduledjob", "nightly", namespace)
    assert on_server is not None

    assert "  Timeline:  +Cx|" in plugin(kubectl, namespace, "status", "nightly", "--color",
                                         "never")  # fmt: skip
    listed = plugin(kubectl, namespace, "list", "--color", "always")
    assert "\x1b[1;31mx\x1b[0m" in listed
    assert listed.count("oldest to newest") == 1

    for output in ("json", "yaml"):
        printed = plugin(kubectl, namespace, "status", "nightly", "-o", output, "--color",
                         "always")  # fmt: skip
        loaded = json.loads(printed) if output == "json" else yaml.safe_load(printed)
        assert loaded["status"] == on_server["status"]
        assert loaded["spec"] == on_server["spec"]
        assert "\x1b[" not in printed
        printed = plugin(kubectl, namespace, "list", "-o", output, "--color", "always")
        loaded = json.loads(printed) if output == "json" else yaml.safe_load(printed)
        assert loaded["kind"] == "List"
        assert [item["metadata"]["uid"] for item in loaded["items"]] == [
            on_server["metadata"]["uid"]]  # fmt: skip
