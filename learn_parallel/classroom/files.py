"""Where the classroom tools find the repository's files: the checkout, or the wheel's copies.

The chapters (``book/*.ipynb``), the track's tests and the grading workflow live in the
repository. In a clone the package uses them in place; a wheel carries copies (the chapters
without outputs) under ``learn_parallel/classroom/shipped/``, laid out the same way (the
wheel's build puts them there), so the teacher's guide and the commands work after a plain
``pip install``.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # .../learn_parallel
SHIPPED = Path(__file__).resolve().parent / "shipped"
REPOSITORY_URL = "https://github.com/learn-parallel/learn-parallel"


def repository() -> Path:
    """The folder that holds ``book/``, ``tests/classroom/track/`` and ``.github/classroom/``."""
    checkout = PACKAGE.parent
    if (checkout / "book").is_dir() and (checkout / "tests" / "classroom" / "track").is_dir():
        return checkout
    if (SHIPPED / "book").is_dir():
        return SHIPPED
    raise FileNotFoundError(
        f"This copy of learn_parallel ({PACKAGE}) has no chapters: install it with "
        f"`pip install git+{REPOSITORY_URL}`, or clone {REPOSITORY_URL} and run from there."
    )


def book() -> Path:
    """The chapters: ``book/`` of the checkout, or the wheel's copies (no outputs)."""
    return repository() / "book"


def track_tests() -> Path:
    """The build-it-yourself track's tests (``tests/classroom/track/test_tasks.py``)."""
    return repository() / "tests" / "classroom" / "track" / "test_tasks.py"


def workflow() -> Path:
    """The GitHub Classroom workflow template (``.github/classroom/autograde.yml``)."""
    return repository() / ".github" / "classroom" / "autograde.yml"


def pyproject() -> Path:
    """The package's ``pyproject.toml``, copied into student repositories."""
    return repository() / "pyproject.toml"
