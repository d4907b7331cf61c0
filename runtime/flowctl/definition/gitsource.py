"""Reading an ``orchestration/`` tree from a git revision, without touching the working tree.

:func:`read_revision` lists the definition files of a commit with ``git ls-tree`` and reads all
their blobs through one ``git cat-file --batch`` process; the result, ``{path relative to the
project root: bytes}``, is what :func:`flowctl.definition.loader.load_files` takes. :func:`default_base`
finds the merge base with the default branch (``origin/HEAD``, else ``main``/``master``).

Errors: :class:`~flowctl.errors.UsageError` (with a hint) when git is missing, the folder is not
in a repository, or a revision does not name a commit.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from flowctl.errors import UsageError
from flowctl.definition.loader import EXTENSIONS, FOLDERS

DEFAULT_BRANCHES = ("main", "master", "origin/main", "origin/master")


def git(repo: Path, *args: str, stdin: bytes | None = None) -> bytes:
    """Run ``git -C repo args…`` and return stdout. Raises :class:`UsageError` on failure."""
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    try:
        proc = subprocess.run(["git", "-C", str(repo), *args], input=stdin, capture_output=True, env=env, check=False)
    except FileNotFoundError:
        raise UsageError("git is not installed", hint="install git, or compare two folders: flowctl diff OLD_DIR NEW_DIR") from None
    if proc.returncode != 0:
        message = proc.stderr.decode(errors="replace").strip().splitlines()
        raise UsageError(f"git {args[0]} failed: {message[-1] if message else 'exit ' + str(proc.returncode)}")
    return proc.stdout


def toplevel(path: Path) -> Path:
    """The working-tree root of the repository holding ``path``."""
    try:
        out = git(path, "rev-parse", "--show-toplevel")
    except UsageError:
        raise UsageError(f"{path} is not inside a git repository",
                         hint="pass two folders to compare instead: flowctl diff OLD_DIR NEW_DIR") from None
    return Path(out.decode().strip())


def resolve(repo: Path, rev: str) -> str:
    """The full commit id ``rev`` names. Raises :class:`UsageError` naming the revision."""
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}").decode().strip()
    except UsageError:
        raise UsageError(f"'{rev}' is neither a git revision nor a folder",
                         hint="use a branch, tag or commit (git log --oneline), or a folder holding orchestration/") from None


def default_base(repo: Path) -> tuple[str, str]:
    """(commit, label) of the merge base of HEAD with the default branch: ``origin/HEAD``, else
    the first of :data:`DEFAULT_BRANCHES` that exists. Raises :class:`UsageError` when none does."""
    candidates = []
    try:
        ref = git(repo, "symbolic-ref", "--quiet", "refs/remotes/origin/HEAD").decode().strip()
        candidates.append(ref.removeprefix("refs/remotes/"))
    except UsageError:
        pass
    candidates += DEFAULT_BRANCHES
    for branch in candidates:
        try:
            git(repo, "rev-parse", "--verify", "--quiet", f"{branch}^{{commit}}")
        except UsageError:
            continue
        try:
            base = git(repo, "merge-base", "HEAD", branch).decode().strip()
        except UsageError:
            continue
        return base, f"merge-base with {branch}"
    raise UsageError("cannot tell the default branch to diff against",
                     hint="name the base: flowctl diff origin/main (or any revision, or two folders)")


def read_revision(repo: Path, rev: str, prefix: str = "") -> dict[str, bytes]:
    """``{"orchestration/states/x.yaml": b"…", …}`` of commit ``rev``.

    ``repo`` is any folder inside the repository; ``prefix`` is the project root's path inside
    the repository (``""`` when orchestration/ sits at the top, else e.g. ``"services/shop/"``).
    Keys are relative to the project root. A revision without an orchestration/ folder gives ``{}``.
    """
    commit = resolve(repo, rev)
    base = f"{prefix}orchestration/"
    listing = git(repo, "ls-tree", "-r", "-z", "--full-tree", commit, "--", base)
    wanted: list[tuple[str, str]] = []
    for entry in listing.split(b"\0"):
        if not entry:
            continue
        meta, _, path_bytes = entry.partition(b"\t")
        mode, kind, sha = meta.decode().split()
        path = path_bytes.decode("utf-8", errors="surrogateescape")
        rel = path[len(prefix):]
        parts = rel.split("/")
        if kind == "blob" and len(parts) == 3 and parts[1] in FOLDERS and rel.endswith(EXTENSIONS):
            wanted.append((rel, sha))
    if not wanted:
        return {}
    blobs = cat_blobs(repo, [sha for _, sha in wanted])
    return {rel: blobs[sha] for rel, sha in wanted}


def cat_blobs(repo: Path, shas: list[str]) -> dict[str, bytes]:
    """``{sha: content}`` of blobs, read through one ``git cat-file --batch``."""
    out = git(repo, "cat-file", "--batch", stdin=("\n".join(shas) + "\n").encode())
    blobs: dict[str, bytes] = {}
    pos = 0
    for _ in shas:
        header_end = out.index(b"\n", pos)
        header = out[pos:header_end].decode().split()
        if len(header) != 3:
            raise UsageError(f"git cat-file could not read object {header[0] if header else '?'}")
        sha, _kind, size = header
        start = header_end + 1
        blobs[sha] = out[start:start + int(size)]
        pos = start + int(size) + 1  # content is followed by a newline
    return blobs


def project_prefix(repo_root: Path, project_root: Path) -> str:
    """``project_root`` relative to ``repo_root`` as a git path prefix (``""`` or ``"a/b/"``)."""
    rel = Path(os.path.relpath(project_root.resolve(), repo_root.resolve())).as_posix()
    if rel.startswith(".."):
        raise UsageError(f"{project_root} is outside the git repository at {repo_root}")
    return "" if rel == "." else rel + "/"
