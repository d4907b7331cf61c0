"""Small holes of the gate's kind (issue 13, item 7): a store that keeps nothing passed where a
durable one is promised, and an --input file too big to read whole."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from flowctl.cli.commands._common import parse_json_arg
from flowctl.errors import StoreError, UsageError
from flowctl.store.sql import open_store
from support.helpers import FLOWCTL_EXE, write_project

PROJECT = {"states/done.yaml": "id: done\ntype: succeed\n", "transitions/f.yaml": "flow: f\nstart: done\ntransitions: []\n"}


@pytest.mark.parametrize("url", ["sqlite:///", "sqlite:///:memory:", "sqlite:///file::memory:?cache=shared",
                                 "sqlite:///x.db?mode=memory"])
def test_in_memory_sqlite_is_refused_where_a_durable_store_is_promised(tmp_path, url, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a store that is not refused would be created
    with pytest.raises(StoreError, match="keeps nothing"):
        open_store(url, tmp_path)
    root = write_project(tmp_path / "p", PROJECT)
    for argv in (["run", "f", "--db", url], ["recover", "--db", url], ["submit", "f", "--db", url]):
        result = subprocess.run([FLOWCTL_EXE, *argv], cwd=root, capture_output=True, text=True, timeout=60)
        assert result.returncode == 2, (argv, result.stdout + result.stderr)
        assert "keeps nothing" in result.stderr and "--db memory" in result.stderr and "Traceback" not in result.stderr


def test_db_memory_still_says_it_keeps_nothing(tmp_path):
    root = write_project(tmp_path / "p", PROJECT)
    result = subprocess.run([FLOWCTL_EXE, "run", "f", "--db", "memory"], cwd=root, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr


def test_oversized_input_file_is_refused_by_size_before_it_is_read(tmp_path, monkeypatch):
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:  # 100 MB, sparse: costs no disk
        fh.truncate(100 * 1024 * 1024)

    def no_read(self):
        raise AssertionError("the file was read")

    monkeypatch.setattr(Path, "read_bytes", no_read)
    monkeypatch.setattr(Path, "open", no_read)
    with pytest.raises(UsageError, match="is 104857600 bytes; the limit is 4194304"):
        parse_json_arg(f"@{big}", "--input")


def test_input_from_standard_input_a_device_or_a_pipe(tmp_path, monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b'{"order_id": "A-1"}')))
    assert parse_json_arg("@-", "--input") == {"order_id": "A-1"}
    with pytest.raises(UsageError, match="--input: /dev/null is empty"):
        parse_json_arg("@/dev/null", "--input")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b" " * (4 * 1024 * 1024 + 1))))
    with pytest.raises(UsageError, match="standard input holds more than 4194304 bytes"):  # a pipe has no size
        parse_json_arg("@-", "--input")


def test_oversized_input_file_is_refused_by_the_cli(tmp_path):
    root = write_project(tmp_path / "p", PROJECT)
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(100 * 1024 * 1024)
    result = subprocess.run([FLOWCTL_EXE, "run", "f", "--db", "memory", "--input", f"@{big}"], cwd=root,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "104857600 bytes; the limit is" in result.stderr
