"""The test tree mirrors the package: ``mxnet_amp/<folder>/<module>.py`` is tested in
``tests/<folder>/test_<module>.py``, so a reader who opens a module finds its tests by its
name (issue 36). More files per module are fine (``test_<module>_<aspect>.py``); end-to-end
stories live in tests/stories/, the source rules in tests/house/, shared builders in
tests/support/."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "mxnet_amp"
TESTS = ROOT / "tests"

# __init__ holds re-exports and the package's story, __main__ calls cli.main: both are run by
# every test that imports the package or runs the CLI, and test no behaviour of their own
NOT_MODULES = frozenset({"__init__.py", "__main__.py"})

# Modules still without a test file of their name, as paths under mxnet_amp/. An entry goes
# when its file lands (the test fails on an entry whose file exists or that names no module),
# so the list only shrinks.
MISSING: frozenset[str] = frozenset()


def mirrored_test(module: Path) -> Path:
    """``tests/<folder>/test_<name>.py`` for ``mxnet_amp/<folder>/<name>.py``."""
    rel = module.relative_to(PACKAGE)
    return TESTS / rel.parent / f"test_{rel.name}"


def package_modules() -> list[Path]:
    """Every module of the package that holds code of its own, sorted."""
    return sorted(p for p in PACKAGE.rglob("*.py")
                  if p.name not in NOT_MODULES and "__pycache__" not in p.parts)


def test_every_module_has_a_test_file_of_its_name():
    missing = [m for m in package_modules() if not mirrored_test(m).exists()
               and m.relative_to(PACKAGE).as_posix() not in MISSING]
    assert not missing, "modules without a test file at the mirrored path:\n" + "\n".join(
        f"  mxnet_amp/{m.relative_to(PACKAGE).as_posix()} -> "
        f"{mirrored_test(m).relative_to(ROOT).as_posix()}" for m in missing)


def test_the_list_of_missing_test_files_is_current():
    modules = {m.relative_to(PACKAGE).as_posix(): m for m in package_modules()}
    gone = sorted(name for name in MISSING if name not in modules)
    covered = sorted(name for name in MISSING if name in modules
                     and mirrored_test(modules[name]).exists())
    assert not gone, f"MISSING names modules that no longer exist, remove them: {gone}"
    assert not covered, f"MISSING names modules that have their test file now, remove them: {covered}"


def test_the_mirror_is_computed_from_the_module_path():
    """The rule itself, on known pairs (a wrong mapping would pass the tests above vacuously
    only if it pointed at files that happen to exist)."""
    assert mirrored_test(PACKAGE / "convert.py") == TESTS / "test_convert.py"
    assert mirrored_test(PACKAGE / "passes" / "kernel.py") == TESTS / "passes" / "test_kernel.py"
    assert mirrored_test(PACKAGE / "auto" / "search.py") == TESTS / "auto" / "test_search.py"
    found = {m.relative_to(PACKAGE).as_posix() for m in package_modules()}
    assert "convert.py" in found and "passes/kernel.py" in found
    assert not any(name.endswith(tuple(NOT_MODULES)) for name in found)


# issue 43: the top level is a listing of rank folders (ir/, files/, mx/, tune/, ...) and few modules
MAX_TOP_LEVEL = 15


def test_the_top_level_holds_at_most_15_modules():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert "__init__.py" in top and len(top) <= MAX_TOP_LEVEL, top
