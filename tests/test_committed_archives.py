"""The committed reply archives (data/replies/): every record passes its checks, and the replies are
the ones archived before the upgrade to format 2 (header naming the model, a checksum per record).

The fingerprints below are sha256 over the sorted [index, ids] pairs of each format-1 archive as it
stood at commit 0394665, computed before the upgrade; where git still holds that commit, the
format-1 archive itself is read again and compared reply for reply."""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess

import pytest

from elsi_lib.common.cachefiles import REPO_ROOT
from elsi_lib.hidden.reply_records import FORMAT, read_archive

BEFORE = "0394665"
FORMAT1_FINGERPRINTS = {  # archive name: (replies, sha256 of the sorted [index, ids] pairs)
    "266527db43019007565c25f8": (1000, "0e5cf3d82279e1ddcd4bd24ab7ddff44a94a5e7414cb45c3f84d44ef494ed365"),
    "6cb54af05bdf39dfa7d06106": (13312, "9732c06ca8c67c59dde682cd8a49863cfbb3443410ca7a94e0b98bdf96a32626"),
}
ARCHIVES = REPO_ROOT / "data" / "replies"


def fingerprint(replies: dict[int, list[int]]) -> str:
    return hashlib.sha256(json.dumps(sorted([i, ids] for i, ids in replies.items())).encode()).hexdigest()


@pytest.mark.parametrize("name", sorted(FORMAT1_FINGERPRINTS))
def test_a_committed_archive_is_checked_and_holds_the_replies_it_held(name):
    path = ARCHIVES / f"{name}.partial.jsonl.gz"
    header = json.loads(gzip.decompress(path.read_bytes()).split(b"\n", 1)[0])
    assert header["format"] == FORMAT and header["engine"]["name"] == "vllm"
    assert set(header) >= {"model", "tokenizer", "generation", "prompts", "request", "n_prompts", "vocab_size"}
    replies = read_archive(path, header)  # every record checked against the archive's own header
    assert (len(replies), fingerprint(replies)) == FORMAT1_FINGERPRINTS[name]


@pytest.mark.parametrize("name", sorted(FORMAT1_FINGERPRINTS))
def test_the_upgrade_kept_every_reply_of_the_format1_archive(name):
    relative = f"data/replies/{name}.partial.jsonl.gz"
    old = subprocess.run(["git", "show", f"{BEFORE}:{relative}"], cwd=REPO_ROOT, capture_output=True)
    if old.returncode != 0:
        pytest.skip(f"git does not hold {BEFORE} here (a shallow clone): the fingerprint test stands alone")
    lines = gzip.decompress(old.stdout).decode().splitlines()
    before = {e["i"]: e["ids"] for e in map(json.loads, lines[1:])}
    path = ARCHIVES / f"{name}.partial.jsonl.gz"
    header = json.loads(gzip.decompress(path.read_bytes()).split(b"\n", 1)[0])
    assert read_archive(path, header) == before
    assert json.loads(lines[0])["request without the model path"] == header["request"]
