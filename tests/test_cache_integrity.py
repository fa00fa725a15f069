"""Cache entries you can trust (elsi_lib.common.cachefiles): a manifest refuses files it does not list,
a write killed before its rename leaves a temporary file the next write removes (saying so), and a
folder entry with a file in its place is named, not its temporary folder."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from elsi_lib.common import cachefiles as C

CACHEFILES = Path(C.__file__)

# cachefiles needs only the standard library: loaded by its path, the killed writer starts in a moment
KILLED_WRITE = """
import importlib.util, os, signal, sys
spec = importlib.util.spec_from_file_location("cachefiles", sys.argv[1])
cachefiles = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cachefiles)
os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)  # every byte written, killed before the rename
cachefiles.write_checked(sys.argv[2], b"x" * int(sys.argv[3]))
"""


def killed_write(path: Path, size: int = 100_000) -> Path:
    """Run `write_checked(path, size bytes)` in a process killed (SIGKILL) before its rename; returns
    the temporary file it left (asserting there is exactly one, of full size)."""
    done = subprocess.run([sys.executable, "-c", KILLED_WRITE, str(CACHEFILES), str(path), str(size)])
    assert done.returncode < 0  # killed
    [tmp] = [p for p in path.parent.iterdir() if p.name != path.name]
    assert tmp.name.startswith(f".{path.name}.") and tmp.name.endswith(".tmp")
    assert tmp.stat().st_size > size  # the full payload behind its header
    return tmp


def entry(folder: Path) -> dict:
    (folder / "sub").mkdir(parents=True)
    (folder / "a.bin").write_bytes(b"first file")
    (folder / "b.bin").write_bytes(b"second file")
    (folder / "sub" / "c.bin").write_bytes(b"third file")
    return C.write_manifest(folder, {"k": 1})


def test_a_file_the_manifest_does_not_list_is_refused(tmp_path):
    """A file in the entry that the manifest does not list is refused: a check of the listed files alone
    would pass a file taken off the list and then altered."""
    folder = tmp_path / "entry"
    manifest = entry(folder)
    assert C.verify_manifest(folder, {"k": 1}) is None
    del manifest["files"]["b.bin"]
    (folder / C.MANIFEST).write_text(json.dumps(manifest))
    (folder / "b.bin").write_bytes(b"altered file")
    assert C.verify_manifest(folder, {"k": 1}) == "a file the manifest does not list: b.bin"
    (folder / "b.bin").unlink()
    assert C.verify_manifest(folder, {"k": 1}) is None
    (folder / "sub" / "d.bin").write_bytes(b"added later")
    assert C.verify_manifest(folder, {"k": 1}, check_hashes=False) == "a file the manifest does not list: sub/d.bin"


def test_a_folder_entry_that_is_a_file_is_said_so(tmp_path):
    (tmp_path / "entry").write_text("not a folder")
    assert C.verify_manifest(tmp_path / "entry", {"k": 1}) == "not a folder"


def test_a_write_killed_before_its_rename_leaves_a_tmp_the_next_write_removes(tmp_path):
    path = tmp_path / "drafts" / "run.pt"
    path.parent.mkdir()
    tmp = killed_write(path)
    assert not path.exists()
    said = rf"removed {re.escape(tmp.name)} \(\d+ bytes\).*interrupted write of {re.escape(path.name)}"
    with pytest.warns(UserWarning, match=said):
        C.write_checked(path, b"whole")
    assert not tmp.exists() and C.read_checked(path) == b"whole"
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_a_read_removes_a_stale_tmp_too(tmp_path):
    path = tmp_path / "entry.bin"
    C.write_checked(path, b"whole")
    tmp = killed_write(path)
    with pytest.warns(UserWarning, match=re.escape(tmp.name)):
        assert C.read_checked(path) == b"whole"
    assert not tmp.exists()


def test_a_tmp_still_being_written_is_left_alone(tmp_path):
    """Only a temporary file no live writer holds is stale: a second write of the same path while
    the first streams (here: from inside its chunks) removes nothing, and both complete."""
    path = tmp_path / "entry.bin"

    def chunks():
        yield b"outer "
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            C.atomic_write_bytes(path, b"inner")
        assert path.read_bytes() == b"inner"
        yield b"write"

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        C.atomic_write_chunks(path, chunks())
    assert path.read_bytes() == b"outer write"
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_replace_folder_names_the_real_path_when_a_file_is_in_its_place(tmp_path):
    """A folder entry replaced by a file is refused naming the entry's own path, with nothing moved: an
    error naming the temporary folder, raised after the exchange has moved the new folder in, points the
    user at the wrong path."""
    final, tmp = tmp_path / "shard_00001", tmp_path / ".shard_00001.tmp"
    final.write_text("a file")
    tmp.mkdir()
    (tmp / "a.bin").write_bytes(b"new")
    with pytest.raises(NotADirectoryError, match=re.escape(str(final))) as raised:
        C.replace_folder(tmp, final)
    assert ".tmp" not in str(raised.value)
    assert final.read_text() == "a file" and (tmp / "a.bin").is_file()  # nothing moved


@pytest.mark.parametrize(
    "manifest, reason",
    [
        ([1], "malformed manifest"),
        ({"key": {"k": 1}, "files": ["a.bin"]}, "malformed manifest"),
        ({"key": {"k": 1}, "files": {"a.bin": {"sha256": "0" * 64}}}, "'a.bin' is not a path inside the entry"),
        ({"key": {"k": 1}, "files": {"../a.bin": {"size": 1, "sha256": "0" * 64}}}, "not a path inside the entry"),
        ("[" * 100_000, "unreadable manifest"),
    ],
)
def test_a_malformed_manifest_is_a_reason_not_an_exception(tmp_path, manifest, reason):
    """verify_manifest answers with why an entry cannot be used, whatever its manifest holds: a caller
    then rebuilds it, where an exception would end the run."""
    folder = tmp_path / "entry"
    entry(folder)
    (folder / C.MANIFEST).write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    assert reason in C.verify_manifest(folder, {"k": 1})
