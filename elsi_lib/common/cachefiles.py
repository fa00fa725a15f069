"""Atomic writes and content checksums for everything elsi caches.

A cache entry is either a file or a folder with a `manifest.json` that lists every file with its
size and sha256. Entries are written under a temporary name and renamed into place, so a reader
never sees half of one; `verify_manifest` tells a complete entry from a corrupt or stale one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType


fcntl: ModuleType | None  # the module, or None where there is none
try:
    import fcntl
except ImportError:  # Windows has no flock: there, no temporary file is judged stale
    fcntl = None

MANIFEST = "manifest.json"
REPO_ROOT = Path(__file__).resolve().parents[2]


def default_cache_dir() -> Path:
    """`elsi` under the user's cache folder ($XDG_CACHE_HOME, else ~/.cache): outside the checkout, so
    a fresh clone on the same machine (a new session, CI) finds the caches of the last one."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "elsi"


def cache_dir() -> Path:
    """Root of elsi's caches: $ELSI_CACHE_DIR, else `default_cache_dir()`."""
    return Path(os.environ.get("ELSI_CACHE_DIR") or default_cache_dir())


def key_digest(key: dict, digits: int = 24) -> str:
    """The first `digits` hex digits of the sha256 of `key` as sorted JSON: a cache entry's name."""
    return sha256_text(json.dumps(key, sort_keys=True))[:digits]


def keyed_path(kind: str, key: dict, *, prefix: str = "", suffix: str = "", digits: int = 24) -> Path:
    """Where the cache entry of `kind` for `key` lives: cache_dir()/kind/[prefix-]digest[suffix]."""
    return cache_dir() / kind / f"{prefix + '-' if prefix else ''}{key_digest(key, digits)}{suffix}"


def per_question_cache(kind: str, key: dict):
    """(path, {question index: result}) of a per-question JSON cache under cache_dir()/kind keyed by
    `key` (JSON-normalised); a corrupt, stale or foreign file gives no results (they are recomputed)."""
    key = json.loads(json.dumps(key, sort_keys=True))
    path = keyed_path(kind, key, suffix=".json")
    check_writable(path.parent)
    done = {}
    if path.is_file():
        try:
            saved = json.loads(path.read_text())
            if saved.get("key") == key and saved.get("checksum") == sha256_text(json.dumps(saved["results"])):
                done = {int(i): v for i, v in saved["results"].items()}
        except (OSError, ValueError, KeyError):
            done = {}
    return path, done


def save_per_question(path, key: dict, done: dict) -> None:
    """Write `per_question_cache`'s file atomically, with a checksum over the results."""
    results = {str(k): v for k, v in sorted(done.items())}
    atomic_write_bytes(
        path,
        json.dumps(
            {
                "key": json.loads(json.dumps(key, sort_keys=True)),
                "results": results,
                "checksum": sha256_text(json.dumps(results)),
            }
        ).encode(),
    )


def check_writable(folder: str | os.PathLike) -> None:
    """Fail before any work when results could not be cached in `folder` (created if missing):
    a read-only cache would otherwise lose a long computation at its end."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-check-"):
            pass
    except OSError as err:
        raise PermissionError(
            f"cannot write to the cache folder {folder} ({err.strerror or err}): set "
            "ELSI_CACHE_DIR to a writable folder (in Python, the functions that cache also take cache=False)"
        ) from err


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def content_checksum(header: dict[str, str], arrays: dict) -> str:
    """sha256 over a saved file's header fields (all but "checksum") and every array's name, dtype,
    shape and bytes: everything a reader uses. arrays: numpy arrays (or anything np.asarray takes)."""
    import numpy as np  # the one numpy user here: cachefiles otherwise needs the standard library alone

    fields = json.dumps({k: v for k, v in header.items() if k != "checksum"}, sort_keys=True)
    parts = [fields]
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        parts.append(f"{name}:{array.dtype}:{array.shape}:{hashlib.sha256(array.tobytes()).hexdigest()}")
    return sha256_text("|".join(parts))


def atomic_write_bytes(path: str | os.PathLike, payload: bytes) -> None:
    """Write `payload` to `path` through a temporary file in the same folder and a rename."""
    atomic_write_chunks(path, [payload])


def atomic_write_chunks(path: str | os.PathLike, chunks) -> None:
    """Stream `chunks` (bytes) to `path` through a temporary file and a rename; if the iterable
    raises (e.g. a failed checksum at its end), nothing is written and the error propagates. The
    temporary file is locked while it is written: one a killed writer left is removed (with a
    warning) by the next write or read of `path` (`remove_stale_tmp`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_tmp(path)
    fd, tmp = _locked_tmp(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
            if hasattr(os, "fchmod"):  # the mode a plain write gives (mkstemp's is 0600: others could not read it)
                umask = os.umask(0)
                os.umask(umask)
                os.fchmod(handle.fileno(), 0o666 & ~umask)
            if fcntl is not None:
                os.replace(tmp, path)  # still open, so still locked: never taken for a stale file
        if fcntl is None:
            os.replace(tmp, path)  # Windows renames no open file
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def building(entry: Path) -> Iterator[None]:
    """An exclusive lock on `entry`'s lock file (`.name.lock` beside it) while the body builds it: a
    second process building the same entry waits, then finds it complete, instead of rewriting (or
    removing as unfinished) what the first is writing or reading. No lock where there is no flock."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    with open(entry.parent / f".{entry.name}.lock", "a") as lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(lock, fcntl.LOCK_UN)


def _locked_tmp(path: Path) -> tuple[int, str]:
    """(fd, name) of a new temporary file beside `path` (`.name.XXXXXXXX.tmp`), locked for writing."""
    while True:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        if fcntl is None:
            return fd, tmp
        fcntl.flock(fd, fcntl.LOCK_EX)
        if os.fstat(fd).st_nlink:  # not removed as stale in the moment before the lock
            return fd, tmp
        os.close(fd)


def remove_stale_tmp(path: str | os.PathLike) -> list[Path]:
    """Remove the temporary files of `path`'s writes that no live writer holds (a writer killed before
    its rename leaves one, as large as the entry), each with a warning naming it; returns them."""
    path = Path(path)
    if fcntl is None or not path.parent.is_dir():
        return []
    pattern = re.compile(rf"\.{re.escape(path.name)}\.[a-z0-9_]{{8}}\.tmp")  # tempfile.mkstemp's names
    found = [p for p in path.parent.iterdir() if pattern.fullmatch(p.name) and p.is_file() and not p.is_symlink()]
    return [tmp for tmp in found if _unlink_if_unlocked(tmp, path.name)]


def _unlink_if_unlocked(tmp: Path, of: str) -> bool:
    """Remove `tmp`, a temporary file of a write of `of`, when no process holds its lock (its writer
    is gone), with a warning."""
    try:
        fd = os.open(tmp, os.O_RDONLY)
    except OSError:
        return False  # gone already, or not ours to read
    try:
        try:
            if fcntl is None:  # no lock to test (`remove_stale_tmp` does not call it then)
                return False
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # a live writer holds it
        size = os.fstat(fd).st_size
        try:
            tmp.unlink()
        except FileNotFoundError:
            return False  # renamed into place by its writer meanwhile
    finally:
        os.close(fd)
    warnings.warn(
        f"removed {tmp.name} ({size} bytes) in {tmp.parent}: a temporary file left by an interrupted write of {of}"
    )
    return True


CHECKED_MAGIC = b"elsi-checked-1\n"


def write_checked(path: str | os.PathLike, payload: bytes) -> None:
    """Write `payload` atomically behind a header holding its sha256 (`read_checked` verifies it)."""
    digest = hashlib.sha256(payload).hexdigest().encode()
    atomic_write_chunks(path, [CHECKED_MAGIC, digest, b"\n", payload])


def read_checked(path: str | os.PathLike) -> bytes:
    """The payload `write_checked` wrote; ValueError (saying why) for a truncated, altered or foreign file.
    A temporary file an interrupted write of `path` left is removed first (`remove_stale_tmp`)."""
    remove_stale_tmp(path)
    data = Path(path).read_bytes()
    head = len(CHECKED_MAGIC)
    if not data.startswith(CHECKED_MAGIC) or data[head + 64 : head + 65] != b"\n":
        raise ValueError("no checksum header (a foreign or older file)")
    payload = data[head + 65 :]
    if hashlib.sha256(payload).hexdigest().encode() != data[head : head + 64]:
        raise ValueError("checksum mismatch (truncated or altered)")
    return payload


def entry_files(folder: Path) -> list[str]:
    """Every file in the entry `folder` but its manifest, as sorted relative posix paths."""
    return [p.relative_to(folder).as_posix() for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MANIFEST]


def write_manifest(folder: str | os.PathLike, key: dict) -> dict:
    """Record `key` (what produced the entry) and the size and sha256 of every file in `folder`."""
    folder = Path(folder)
    files = {
        name: {"size": (folder / name).stat().st_size, "sha256": sha256_file(folder / name)}
        for name in entry_files(folder)
    }
    manifest = {"key": key, "files": files}
    atomic_write_bytes(folder / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())
    return manifest


def verify_manifest(folder: str | os.PathLike, key: dict, check_hashes: bool = True) -> str | None:
    """Return None when `folder` is a complete entry produced by `key`, else why it is not: a file
    listed but missing or different, or a file in it that the manifest does not list."""
    folder = Path(folder)
    path = folder / MANIFEST
    if folder.exists() and not folder.is_dir():
        return "not a folder"
    if not path.is_file():
        return "no manifest (incomplete or foreign folder)"
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as err:
        return f"unreadable manifest: {err}"
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        return "malformed manifest: not a mapping with a 'files' mapping"
    if manifest.get("key") != key:
        return "stale: produced from different inputs"
    for name, meta in manifest["files"].items():
        if not (
            isinstance(meta, dict)
            and isinstance(meta.get("size"), int)
            and isinstance(meta.get("sha256"), str)
            and not Path(name).is_absolute()
            and ".." not in Path(name).parts
        ):
            return f"malformed manifest: file {name!r} is not a path inside the entry with a size and a sha256"
    unlisted = [name for name in entry_files(folder) if name not in manifest["files"]]
    if unlisted:
        return f"a file the manifest does not list: {', '.join(unlisted)}"
    for name, meta in manifest["files"].items():
        file = folder / name
        if not file.is_file():
            return f"missing file {name}"
        if file.stat().st_size != meta["size"]:
            return f"size mismatch in {name}"
        if check_hashes and sha256_file(file) != meta["sha256"]:
            return f"checksum mismatch in {name}"
    return None


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where not supported."""
    import ctypes

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    AT_FDCWD, RENAME_EXCHANGE = -100, 2
    return renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0


def replace_folder(tmp: str | os.PathLike, final: str | os.PathLike) -> None:
    """Move the finished folder `tmp` to `final`, replacing an earlier one in one atomic step
    (an exchange, then the old folder is removed); where the exchange is not supported, the old
    folder is renamed aside first, so an interruption leaves it whole beside `final`.
    NotADirectoryError, naming `final`, when a file is in its place (nothing is moved)."""
    tmp, final = Path(tmp), Path(final)
    check_folder_slot(final)
    if not final.exists():
        os.replace(tmp, final)
    elif _exchange(tmp, final):
        shutil.rmtree(tmp)  # now the earlier folder
    else:  # aside under a fresh name of its own: never a folder of the user's
        aside = Path(tempfile.mkdtemp(prefix=f".{final.name}.old.", dir=final.parent))
        os.replace(final, aside)  # a folder onto an empty folder
        os.replace(tmp, final)
        shutil.rmtree(aside)


def check_folder_slot(final: str | os.PathLike) -> None:
    """NotADirectoryError naming `final` when something other than a folder is where a folder entry goes."""
    final = Path(final)
    if final.exists() and not final.is_dir():
        raise NotADirectoryError(f"{final} is a file, not a folder (elsi writes a folder there): remove it and rerun")


def check_parents(path: str | os.PathLike) -> None:
    """A folder an output replaces must have a name of its own ('.', '..' or a path ending in them would
    replace the folder a user stands in, or its parent: ValueError), and no parent of it may be a file
    (NotADirectoryError naming it: mkdir would say only "[Errno 17] File exists")."""
    if os.path.basename(os.path.normpath(os.fspath(path))) in ("", ".", "..") or Path(path).name in ("", ".", ".."):
        raise ValueError(f"{os.fspath(path)!r}: name the folder to write (not '.' or '..')")
    for parent in Path(path).absolute().parents:
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                raise NotADirectoryError(f"{parent} is a file, not a folder: {path} cannot be written under it")
            return
