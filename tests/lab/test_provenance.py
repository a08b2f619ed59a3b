"""Every recording names the code it measured, and says so when that code has changed.

``test_the_stale_recordings`` prints which shipped recordings measured files that changed
since (``pytest -s``); it does not fail on them, since a session without GPUs must still be
able to change the code. `book/data/README.md` lists each recording's commit and machine.
"""

import json
import re
import subprocess

import pytest

from learn_parallel.lab import provenance, records

REQUIRED = ("commit", "date", "machine", "torch_version", "cuda_version", "command", "measured")


def test_a_stamp_names_the_commit_the_machine_and_the_hash_of_every_measured_file(monkeypatch):
    monkeypatch.setenv(provenance.COMMIT_ENV, "a" * 40)
    stamped = provenance.stamp({"meta": {"command": "python -m experiments.bench"}}, "bench.json")
    assert all(key in stamped for key in REQUIRED)
    assert stamped["command"] == "python -m experiments.bench"
    assert stamped["commit"] == provenance.commit()[0] and stamped["commit_source"]
    assert set(stamped["measured"]) == set(provenance.MEASURED["bench.json"])
    assert "missing" not in stamped["measured"].values()  # every listed file exists here
    assert provenance.changed_since(stamped) == []
    assert provenance.staleness_line(stamped) is None


def _git(folder, *args):
    subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True)


def test_a_commit_is_stamped_only_from_the_packages_own_checkout(tmp_path, monkeypatch):
    monkeypatch.delenv(provenance.COMMIT_ENV, raising=False)
    own = tmp_path / "own"
    (own / "learn_parallel").mkdir(parents=True)
    (own / "learn_parallel" / "x.py").write_text("")
    _git(own, "init", "-q")
    _git(own, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x", "--allow-empty")
    monkeypatch.setattr(provenance, "package_dir", lambda: own / "learn_parallel")
    sha, source = provenance.commit()
    assert len(sha) == 40 and source == "git: the package's own checkout"
    # A copy of the package inside another repository: that repository's HEAD is not ours.
    vendored = own / "vendor" / "learn_parallel"
    vendored.mkdir(parents=True)
    monkeypatch.setattr(provenance, "package_dir", lambda: vendored)
    assert provenance.commit() == (
        None,
        "unknown: not a git checkout of the package, and $LEARN_PARALLEL_COMMIT is not set",
    )
    monkeypatch.setenv(provenance.COMMIT_ENV, "b" * 40)
    assert provenance.commit() == ("b" * 40, "$LEARN_PARALLEL_COMMIT")
    # A commit the caller names wins over a checkout's own HEAD: the copy a GPU host gets may
    # be a git snapshot of its own (it was, for the recordings of 2026-11-28).
    monkeypatch.setattr(provenance, "package_dir", lambda: own / "learn_parallel")
    assert provenance.commit() == ("b" * 40, "$LEARN_PARALLEL_COMMIT")


def test_a_recording_names_the_parts_that_ran_beside_it(tmp_path, monkeypatch):
    log = tmp_path / "run-log.jsonl"
    events = [
        ("ladder@h-1", "ladder", "start", "2,3", 100.0),
        ("clone@h-2", "clone", "start", "0,1", 110.0),
        ("clone@h-2", "clone", "end", "0,1", 130.0),
        ("old@h-0", "measure", "start", "all", 10.0),
        ("old@h-0", "measure", "end", "all", 90.0),  # over before the ladder began
        ("workers@h-3", "workers", "start", "0,1", 135.0),  # still running
    ]
    lines = [dict(zip(("id", "part", "event", "gpus", "time"), e)) for e in events]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert provenance.ran_beside() is None  # outside the recording script: not known
    monkeypatch.setenv(provenance.RUN_LOG_ENV, str(log))
    monkeypatch.setenv(provenance.PART_ENV, "ladder@h-1")
    assert provenance.ran_beside(now=140.0) == [
        {"part": "clone", "gpus": "0,1", "start": 110.0, "end": 130.0},
        {"part": "workers", "gpus": "0,1", "start": 135.0},
    ]
    monkeypatch.setenv(provenance.PART_ENV, "old@h-0")
    assert provenance.ran_beside(now=90.0) == []
    said = provenance.beside_line({"ran_beside": [{"part": "clone", "gpus": "0,1", "start": 1.0}]})
    assert "on the same host: clone (the host's GPUs 0,1); each lane numbers" in said
    assert "nothing else" in provenance.beside_line({"ran_beside": []})
    assert "not in this file" in provenance.beside_line({})


def test_a_changed_file_makes_a_recording_stale_and_a_driver_a_wheel_lacks_does_not():
    record = provenance.stamp({}, "ladder.json")
    # Bytes that differ but code that does not (a comment edited): not stale.
    record["measured_bytes"]["learn_parallel/replicate.py"] = "3" * 64
    record["measured"]["learn_parallel/scatter_gather.py"] = "0" * 64  # changed since
    record["measured_bytes"]["learn_parallel/scatter_gather.py"] = "0" * 64
    record["measured"]["experiments/not_shipped.py"] = "1" * 64  # not here: unknown
    record["measured"]["learn_parallel/removed_since.py"] = "2" * 64  # package file gone
    assert provenance.changed_since(record) == [
        "learn_parallel/scatter_gather.py",
        "learn_parallel/removed_since.py",
    ]
    record["commit"] = "abc1234def"
    line = provenance.staleness_line(record)
    assert line.startswith("recorded from abc1234; learn_parallel/scatter_gather.py")
    assert provenance.staleness_line({"commit": None}).endswith("named the code they measured")


BUCKETS = "learn_parallel/ladder/buckets.py"


def _shipped(name):
    return next(json.loads(p.read_text()) for p in provenance.recordings() if p.name == name)


SOURCE = '''"""A module."""

import torch  # the one import


class Split:
    """Cuts a batch."""

    def pieces(self, batch, n):
        """Rows per piece."""
        return batch.chunk(n)  # as torch's scatter does
'''


@pytest.mark.parametrize(
    "edit, changes",
    [
        (lambda s: s.replace("Cuts a batch.", "Cuts a batch in rows."), False),
        (lambda s: s.replace("# as torch's scatter does", "# like comm.scatter"), False),
        (lambda s: s.replace('        """Rows per piece."""\n', ""), False),
        (lambda s: s.replace("\n\n\nclass", "\n\nclass").replace("n)  #", "n)   #"), False),
        (lambda s: s.replace("chunk(n)", "chunk(n, dim=0)"), True),
        (lambda s: s.replace("import torch", "import torch.nn"), True),
        (
            lambda s: s.replace('"""Rows per piece."""', '"""Rows per piece."""\n        n = 2'),
            True,
        ),
        (
            lambda s: s.replace("chunk(n)", "chunk(n)  # or '#'").replace("n)  #", "'#' + n)  #"),
            True,
        ),
    ],
    ids=[
        "docstring",
        "comment",
        "docstring removed",
        "blank lines",
        "code",
        "import",
        "statement added",
        "a '#' in a string",
    ],
)
def test_the_code_digest_ignores_comments_and_docstrings_but_not_code(edit, changes):
    assert (provenance.code_digest(edit(SOURCE)) != provenance.code_digest(SOURCE)) is changes


def test_each_shipped_recording_names_the_bytes_it_measured_where_its_digest_was_redone():
    # Re-expressed digests (raw sha256 -> code digest) keep the raw ones the recording wrote.
    for path in provenance.recordings():
        record = json.loads(path.read_text())
        if "measured_bytes" in record:
            assert set(record["measured_bytes"]) == set(record["measured"])
            assert all(v.startswith("code:") or v == "missing" for v in record["measured"].values())


def test_the_shipped_recordings_measured_one_code():
    # Recordings from several runs (and commits) may ship together only where each file they
    # measured has one code digest in all of them: the numbers then come from the same code.
    seen: dict[str, dict[str, list[str]]] = {}
    for path in provenance.recordings():
        for name, digest in json.loads(path.read_text())["measured"].items():
            seen.setdefault(name, {}).setdefault(digest, []).append(
                path.parent.name + "/" + path.name
            )
    differ = {name: by for name, by in seen.items() if len(by) > 1}
    assert not differ, f"measured files with different code in different recordings: {differ}"


def test_every_recording_the_chapters_read_names_its_commit_machine_and_code():
    missing = {}
    for path in provenance.recordings():
        record = json.loads(path.read_text())
        lacking = [key for key in REQUIRED if not record.get(key) and key != "cuda_version"]
        if lacking:
            missing[str(path.relative_to(records.recorded_root()))] = lacking
    assert not missing, f"recordings without their provenance: {missing}"


def test_the_stale_recordings(capsys):
    stale = provenance.stale_recordings()
    with capsys.disabled():
        print(f"\n{len(stale)} stale recording(s)")
        for path, line in stale:
            print(f"  {path.relative_to(records.recorded_root())}: {line}")
    assert all(line.startswith("recorded from") for _, line in stale)


@pytest.mark.parametrize(
    "path", provenance.recordings(), ids=lambda p: p.parent.name + "/" + p.name
)
def test_the_data_readme_lists_each_recording_with_its_commit(path):
    from _book import ROOT

    readme = (ROOT / "book" / "data" / "README.md").read_text()
    record = json.loads(path.read_text())
    name = str(path.relative_to(records.recorded_root()))
    assert name in readme, f"book/data/README.md does not list {name}"
    assert (record.get("commit") or "")[:7] in readme


ABSOLUTE = re.compile(r"(?<![\w:.])/(?:tmp|root|home|work|opt|usr|var|mnt)/")


def test_only_recordings_ship_and_none_names_a_folder_of_the_machine_that_made_it():
    root = records.recorded_root()
    shipped = [p for p in root.rglob("*") if p.is_file()]
    assert shipped, "no recordings ship with the package"
    kept = (".json", ".json.gz")
    other = [str(p.relative_to(root)) for p in shipped if not p.name.endswith(kept)]
    assert not other, f"logs and other files belong in book/data/logs, not the package: {other}"
    deep = [str(p.relative_to(root)) for p in shipped if len(p.relative_to(root).parts) != 2]
    assert not deep, f"recordings lie directly in their machine's folder: {deep}"
    for path in root.rglob("*.json"):
        found = ABSOLUTE.findall(path.read_text())
        assert not found, f"{path.relative_to(root)} names absolute paths: {found[:3]}"
