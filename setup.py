"""The wheel carries what the classroom tools read from a checkout (see pyproject.toml).

``pip install`` of a clone, or of ``git+URL``, runs this: it adds to the built package
the chapters without their outputs, the track's tests and the grading workflow, under
``learn_parallel/classroom/shipped/``, laid out as in the repository. A checkout keeps
using its own files (``learn_parallel.classroom.files``).
"""

import json
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
FILES = ["tests/classroom/track/test_tasks.py", ".github/classroom/autograde.yml", "pyproject.toml"]


def without_outputs(text: str) -> str:
    """A notebook with its outputs and execution counts cleared (the wheel stays small)."""
    notebook = json.loads(text)
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    return json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"


class BuildWithChapters(build_py):
    def run(self) -> None:
        super().run()
        shipped = Path(self.build_lib) / "learn_parallel" / "classroom" / "shipped"
        for path in sorted((HERE / "book").glob("*.ipynb")):
            target = shipped / "book" / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(without_outputs(path.read_text(encoding="utf-8")), encoding="utf-8")
        for name in FILES:
            if (HERE / name).is_file():
                target = shipped / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes((HERE / name).read_bytes())


setup(cmdclass={"build_py": BuildWithChapters})
