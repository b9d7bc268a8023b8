"""Path confinement, both resolvers: openat2(RESOLVE_BENEATH) and the O_NOFOLLOW walk."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_env.server.errors import Rejected, ToolFailure
from remote_env.server.paths import Confinement, lexical_relative, openat2_available
from remote_env.server.workspaces import Workspaces
from tests.remote_env.support import settings


@pytest.fixture(params=[True, False], ids=["openat2", "walk"])
def conf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Confinement]:
    ws = tmp_path / "ws"
    (ws / "a" / "b").mkdir(parents=True)
    (ws / "a" / "b" / "f.txt").write_text("inside")
    (tmp_path / "outside.txt").write_text("outside")
    (ws / "up").symlink_to("a/b/../b")  # relative, stays inside
    (ws / "chain").symlink_to("up")  # a symlink to a symlink
    (ws / "a" / "parent").symlink_to("..")  # climbs to the root: still inside
    (ws / "a" / "escape").symlink_to("../..")  # climbs above the root
    (ws / "abs_inside").symlink_to(ws / "a")  # absolute, even though it points inside
    (ws / "loop1").symlink_to("loop2")
    (ws / "loop2").symlink_to("loop1")
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield Confinement(fd, str(ws), use_openat2=request.param)
    finally:
        os.close(fd)


def _read(conf: Confinement, path: str) -> str:
    fd, _ = conf.open_regular(path)
    with os.fdopen(fd) as handle:
        return handle.read()


def test_server_picks_openat2_when_the_kernel_has_it(tmp_path: Path) -> None:
    # Both resolvers are tested explicitly above and below; by default the server probes.
    probed = openat2_available(str(tmp_path))
    assert Workspaces(settings(tmp_path / "r1")).use_openat2 is probed
    assert Workspaces(settings(tmp_path / "r2", use_openat2=True)).use_openat2 is probed
    assert Workspaces(settings(tmp_path / "r3", use_openat2=False)).use_openat2 is False


@pytest.mark.parametrize(
    "path",
    [
        "a/b/f.txt",
        "./a//b/f.txt",
        "a/../a/b/f.txt",
        "up/f.txt",
        "chain/f.txt",
        "a/parent/a/b/f.txt",
    ],
)
def test_paths_that_stay_inside_resolve(conf: Confinement, path: str) -> None:
    assert _read(conf, path) == "inside"


def test_absolute_path_inside_the_workspace_resolves(conf: Confinement) -> None:
    assert _read(conf, f"{conf.root_path}/a/b/f.txt") == "inside"


@pytest.mark.parametrize(
    "path",
    [
        "../outside.txt",
        "a/../../outside.txt",
        "a/escape/outside.txt",
        "abs_inside/b/f.txt",
        "/etc/passwd",
    ],
)
def test_escapes_are_refused(conf: Confinement, path: str) -> None:
    with pytest.raises(Rejected) as caught:
        conf.open_regular(path)
    assert caught.value.status == 403


def test_os_errors_become_tool_failures(conf: Confinement) -> None:
    for path, code in [
        ("missing", "not_found"),
        ("a/b/f.txt/x", "not_directory"),
        ("a", "is_directory"),
        ("loop1", "invalid"),
    ]:
        with pytest.raises(ToolFailure) as caught:
            conf.open_regular(path)
        assert caught.value.code == code, path


def test_parent_of_follows_inside_symlinks_and_creates_parents(conf: Confinement) -> None:
    with conf.parent_of("new/dir/file.txt", create=True) as (dir_fd, name):
        assert name == "file.txt"
        assert os.path.samestat(os.fstat(dir_fd), os.stat(Path(conf.root_path) / "new" / "dir"))
    os.symlink("a/b/f.txt", Path(conf.root_path) / "file_link")
    with conf.parent_of("file_link", create=False) as (dir_fd, name):
        assert name == "f.txt"
    with pytest.raises(Rejected), conf.parent_of("a/escape/x.txt", create=True):
        pass
    assert not (Path(conf.root_path).parent / "x.txt").exists()


def test_lexical_check() -> None:
    assert lexical_relative("a/./b", "/ws") == "a/./b"
    assert lexical_relative("/ws", "/ws") == "."
    assert lexical_relative("/ws/a", "/ws") == "a"
    for bad in ("/wsx/a", "..", "a/../..", "/etc"):
        with pytest.raises(Rejected):
            lexical_relative(bad, "/ws")
