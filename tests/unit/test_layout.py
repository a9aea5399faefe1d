"""The repository's shape: things that break in surprising ways when they drift."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_operator_dir_is_a_source_root_not_a_package() -> None:
    """An operator/__init__.py would shadow Python's standard `operator` module."""
    assert not (ROOT / "operator" / "__init__.py").exists()
    assert (ROOT / "operator" / "sundial" / "__init__.py").exists()


def test_standard_operator_module_is_the_stdlib_one() -> None:
    import operator

    assert hasattr(operator, "itemgetter")


def test_every_test_module_has_a_name_of_its_own() -> None:
    """pytest imports test modules by basename (no packages under tests/): two of one name
    stop the whole run at collection, on a clean checkout."""
    tests = Path(__file__).resolve().parents[1]
    names = [path.name for path in tests.rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []
