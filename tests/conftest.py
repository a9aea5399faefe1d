from collections.abc import Iterator

import pytest

from localstack import LocalStack


@pytest.fixture(scope="session")
def stack() -> Iterator[LocalStack]:
    """One real etcd + kube-apiserver + kube-controller-manager + Temporal per test run."""
    with LocalStack() as local_stack:
        yield local_stack
