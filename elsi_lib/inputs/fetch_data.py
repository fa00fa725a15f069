"""`make data`: check the pinned prompt sets against their git blob ids (`SOURCES`, which
`readers.verify_pinned` also checks before a loader parses a file) and refetch any that fail from
their public repositories at the pinned commits. The copies ship inside the package (PACKAGED,
`data/prompts` in a checkout), each folder with its source's licence; their README is the sources table.

    python -m elsi_lib.inputs.fetch_data [DEST]      # default: $ELSI_DATA_DIR, else the package's copies
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from ..common.cachefiles import atomic_write_bytes

PACKAGED = Path(__file__).resolve().parent / "prompt_sets"  # the pinned copies, licences and sources table


@dataclass(frozen=True)
class SourceFile:
    local: str  # path inside the data folder
    repo: str
    commit: str
    path: str  # path inside the source repository
    blob: str  # git blob sha1 (what `git hash-object` prints)


_ARENA = ("lmarena/arena-hard-auto", "196f6b826783b3da7310e361a805fa36f0be83f3")
_OASST = ("LAION-AI/Open-Assistant", "f1e6ed9526f5817531f3ab85441a40b3671ddccb")
_SELF = ("yizhongw/self-instruct", "0b26ccaa415992100fa32df62d41b994cf928e23")
_GPTEACHER = ("teknium1/GPTeacher", "481075123c29854bddb82655badeef6a438f2436")
_APACHE = "261eeb9e9f8b2b4b0d119366dda99c6fd7d35c64"

SOURCES = (
    SourceFile(
        "spec_bench/question.jsonl",
        "hemingkx/Spec-Bench",
        "fd2c1cd7d2201ef71db4c5f4e455008f017967bf",
        "data/spec_bench/question.jsonl",
        "2498d09719b92937c9408f9d7e6efbeaaceb0413",
    ),
    SourceFile(
        "spec_bench/LICENSE",
        "hemingkx/Spec-Bench",
        "fd2c1cd7d2201ef71db4c5f4e455008f017967bf",
        "LICENSE",
        "b09cd7856d58590578ee1a4f3ad45d1310a97f87",
    ),
    SourceFile(
        "arena-hard-auto/arena-hard-v0.1/question.jsonl",
        *_ARENA,
        "data/arena-hard-v0.1/question.jsonl",
        "a0ab23b91e2d66b07e300f111a319ec4fbcbc0d3",
    ),
    SourceFile(
        "arena-hard-auto/arena-hard-v2.0/question.jsonl",
        *_ARENA,
        "data/arena-hard-v2.0/question.jsonl",
        "d0f2eaa1f57865106498af9b45187618c1b9d404",
    ),
    SourceFile("arena-hard-auto/LICENSE", *_ARENA, "LICENSE", _APACHE),
    SourceFile(
        "oasst/prompt_lottery_en_250_text.jsonl",
        *_OASST,
        "model/model_eval/manual/data/prompt_lottery_en_250_text.jsonl",
        "af992dd76724d37966f5c2439671294b0c632e2c",
    ),
    SourceFile(
        "oasst/en_100_tree.jsonl",
        *_OASST,
        "model/model_eval/manual/data/en_100_tree.jsonl",
        "7bbdb57f24f3a2dc6ebc5616df319bf09006b801",
    ),
    SourceFile("oasst/LICENSE", *_OASST, "LICENSE", _APACHE),
    SourceFile(
        "ultrachat/ultra_eval.json",
        "thunlp/UltraChat",
        "1f613e1b8dfc6d1e3a02efb6905de608ed06645b",
        "data/ultra_eval.json",
        "a0ecd995ba35150ea16d5e864d737ecc19fd252b",
    ),
    SourceFile(
        "ultrachat/LICENSE",
        "thunlp/UltraChat",
        "1f613e1b8dfc6d1e3a02efb6905de608ed06645b",
        "LICENSE",
        "92b1563d103d228d01dd998fddcc6916e47ef98b",
    ),
    SourceFile(
        "self-instruct/user_oriented_instructions.jsonl",
        *_SELF,
        "human_eval/user_oriented_instructions.jsonl",
        "ed6d5d986e3f4c65ff64d70328a2e1dab146f914",
    ),
    SourceFile(
        "self-instruct/seed_tasks.jsonl", *_SELF, "data/seed_tasks.jsonl", "c97d40d76abd45cd7456f2d0d58459bb4df3cad5"
    ),
    SourceFile("self-instruct/LICENSE", *_SELF, "LICENSE", _APACHE),
    SourceFile(
        "ifeval/input_data.jsonl",
        "Podtech-AI/IFEval",
        "5bdf377eb9cc20f16d377dc5c38413cee22550a6",
        "data/input_data.jsonl",
        "cbe52f6eecf3986fdac745b4acba4da1408eb146",
    ),
    SourceFile(
        "gsm8k/train.jsonl",
        "openai/grade-school-math",
        "3101c7d5072418e28b9008a6636bde82a006892c",
        "grade_school_math/data/train.jsonl",
        "7d97154b91aef28d01c3301741c81ce90039a4b1",
    ),
    SourceFile(
        "gsm8k/LICENSE",
        "openai/grade-school-math",
        "3101c7d5072418e28b9008a6636bde82a006892c",
        "LICENSE",
        "9e84fcbc4d81a1f433c90caf9f1cef373c12edae",
    ),
    SourceFile(
        "gpteacher/codegen-instruct.json",
        *_GPTEACHER,
        "Codegen/codegen-instruct.json",
        "83c30caecc5bb9899cd2cc501842b6c2672f8626",
    ),
    SourceFile(
        "gpteacher/roleplay-simple-deduped-roleplay-instruct.json",
        *_GPTEACHER,
        "Roleplay/roleplay-simple-deduped-roleplay-instruct.json",
        "20a44bd7553e4874384db7ae3d9a86d785818a90",
    ),
    SourceFile("gpteacher/LICENSE", *_GPTEACHER, "LICENSE", "f2a5be6c5cd141faebc16bd3e43e0982db131308"),
)
# ifeval/LICENSE is the standard Apache-2.0 text; the mirror has none at the pinned commit, so
# `fetch` writes it from the arena-hard copy after checking that copy's blob id.


def git_blob_sha1(payload: bytes) -> str:
    """The id git gives a file's content: sha1 of b"blob <size>\\0" + content."""
    return hashlib.sha1(b"blob %d\0" % len(payload) + payload).hexdigest()


def check_file(path: str | Path, expected_blob: str) -> str | None:
    """None when `path` exists and has the expected blob id, else what is wrong."""
    path = Path(path)
    if not path.is_file():
        return f"{path}: missing"
    actual = git_blob_sha1(path.read_bytes())
    return None if actual == expected_blob else f"{path}: blob {actual[:12]} != expected {expected_blob[:12]}"


def check_data_dir(folder: str | Path) -> list[str]:
    """Problems found in a data folder (an empty list when every file matches its blob id)."""
    return [p for s in SOURCES if (p := check_file(Path(folder) / s.local, s.blob))]


def raw_url(source: SourceFile) -> str:
    return f"https://raw.githubusercontent.com/{source.repo}/{source.commit}/{source.path}"


def fetch(dest: str | Path, download=None) -> list[str]:
    """Fetch every missing or mismatched file into `dest`; return the files written.

    `download(url) -> bytes` is injectable for tests. A download whose blob id does not match is
    an error and is not written.
    """
    if download is None:
        import urllib.request  # only `make data` downloads; the loaders import this module for SOURCES

        def download(url):
            return urllib.request.urlopen(url, timeout=60).read()

    dest = Path(dest)
    written = []
    for source in SOURCES:
        target = dest / source.local
        if check_file(target, source.blob) is None:
            continue
        payload = download(raw_url(source))
        actual = git_blob_sha1(payload)
        if actual != source.blob:
            raise ValueError(f"{raw_url(source)}: blob {actual} does not match the pinned {source.blob}")
        atomic_write_bytes(target, payload)
        written.append(source.local)
    apache = dest / "arena-hard-auto" / "LICENSE"
    if check_file(dest / "ifeval" / "LICENSE", _APACHE) and check_file(apache, _APACHE) is None:
        atomic_write_bytes(dest / "ifeval" / "LICENSE", apache.read_bytes())
        written.append("ifeval/LICENSE")
    return written


def main(argv: list[str]) -> int:
    """`make data`: check DEST, else $ELSI_DATA_DIR, else the package's copies, against the pins, and
    fetch the files that are missing or fail (a network is needed only then)."""
    env = os.environ.get("ELSI_DATA_DIR")
    dest = Path(argv[0]) if argv else Path(env) if env else PACKAGED
    problems = check_data_dir(dest) if dest.is_dir() else ["the folder does not exist"]
    if not problems:
        print(f"{dest}: every pinned file matches its blob id")
        return 0
    print(f"{dest}: " + "; ".join(problems) + ": fetching")
    written = fetch(dest)
    print(
        f"{dest}: fetched {len(written)} file(s); every pinned file matches its blob id"
        + ("" if dest == PACKAGED or (env and not argv) else f"; set ELSI_DATA_DIR={dest} to use them")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
