"""Path confinement fuzzed: random workspace layouts (directories, files, symlinks to
anywhere) and random request paths, through both resolvers.

Whatever the layout and the path, resolving either refuses (``Rejected``) or fails as a
tool (``ToolFailure``), or yields a descriptor whose real location is the workspace or
beneath it; ``parent_of`` (what writes go through) yields a directory beneath the
workspace and a plain name. The kernel is the oracle: ``/proc/self/fd`` says where a
descriptor really points. A file outside the workspace is planted so an escape has
something to reach. (NUL never gets this far: the wire protocol refuses it.)
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remote_env.server.errors import Rejected, ToolFailure
from remote_env.server.paths import Confinement, openat2_available

NAMES = ["a", "b", "f", "link", "secret"]
# Path pieces: names from the layout, navigation, and the way out of the workspace.
PIECE = st.sampled_from([*NAMES, "..", ".", "", "../outside", "..."])
RELATIVE = st.lists(PIECE, min_size=1, max_size=7).map("/".join)
LINK_TARGET = st.one_of(
    RELATIVE.filter(bool),
    st.sampled_from(["/", "/etc", "OUTSIDE", "OUTSIDE/secret", "ROOT", "ROOT/a", "ROOT/.."]),
)


@st.composite
def layouts(draw: st.DrawFn) -> list[tuple[str, str, str]]:
    """(kind, relative path, link target) entries, parents before children."""
    entries: list[tuple[str, str, str]] = []
    dirs = [""]
    for _ in range(draw(st.integers(1, 10))):
        parent = draw(st.sampled_from(dirs))
        name = draw(st.sampled_from(NAMES))
        path = f"{parent}/{name}".lstrip("/")
        if any(path == p for _, p, _ in entries):
            continue
        kind = draw(st.sampled_from(["dir", "file", "link"]))
        entries.append((kind, path, draw(LINK_TARGET) if kind == "link" else ""))
        if kind == "dir":
            dirs.append(path)
    return entries


def _build(base: Path, layout: list[tuple[str, str, str]]) -> Path:
    ws = base / "ws"
    ws.mkdir()
    (base / "outside").mkdir()
    (base / "outside" / "secret").write_text("outside")
    for kind, rel, target in layout:
        where = ws / rel
        if kind == "dir":
            where.mkdir()
        elif kind == "file":
            where.write_text("inside")
        else:
            target = target.replace("OUTSIDE", str(base / "outside")).replace("ROOT", str(ws))
            where.symlink_to(target)
    return ws


def _inside(fd: int, ws: str) -> bool:
    real = os.readlink(f"/proc/self/fd/{fd}")
    return real == ws or real.startswith(ws + "/")


RESOLVERS = [pytest.param(False, id="walk")]
if openat2_available(tempfile.gettempdir()):
    RESOLVERS.insert(0, pytest.param(True, id="openat2"))


@pytest.mark.parametrize("use_openat2", RESOLVERS)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=layouts(), path=st.one_of(RELATIVE, RELATIVE.map(lambda p: "ROOT/" + p)))
def test_no_layout_and_no_path_resolves_outside_the_workspace(
    use_openat2: bool, layout: list[tuple[str, str, str]], path: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ws = _build(Path(tmp).resolve(), layout)
        request = path.replace("ROOT", str(ws)) or "."
        root_fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
        try:
            conf = Confinement(root_fd, str(ws), use_openat2=use_openat2)
            try:
                fd = conf.resolve(request, os.O_RDONLY | os.O_NONBLOCK)
            except (Rejected, ToolFailure):
                pass
            else:
                try:
                    assert _inside(fd, str(ws)), (
                        request,
                        layout,
                        os.readlink(f"/proc/self/fd/{fd}"),
                    )
                finally:
                    os.close(fd)
            try:
                with conf.parent_of(request, create=False) as (dir_fd, name):
                    assert _inside(dir_fd, str(ws)), (request, layout)
                    assert name not in ("", ".", "..") and "/" not in name, (request, name)
            except (Rejected, ToolFailure):
                pass
        finally:
            os.close(root_fd)
