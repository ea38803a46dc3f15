"""The PEP 517 backend's source distribution (cmake/wheel/kvtier_wheel.py,
build_sdist: what `python3 -m build --no-isolation` builds the wheel from).
The wheels themselves are built and tested by scripts/wheels."""

import importlib.util
import os
import re
import subprocess
import tarfile

from conftest import ROOT


def _backend(root, name):
    """The backend module of the source folder `root`."""
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(root, "cmake", "wheel", "kvtier_wheel.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _version():
    text = open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8").read()
    return re.search(r"project\(\s*kvtier\s+VERSION\s+([0-9.]+)", text).group(1)


def _tracked():
    """The files git tracks in ROOT that exist, or None outside a git work tree."""
    r = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], capture_output=True)
    if r.returncode != 0:
        return None
    names = [n.decode() for n in r.stdout.split(b"\0") if n]
    return {n for n in names if os.path.lexists(os.path.join(ROOT, n))}


def test_sdist_holds_the_source_and_its_metadata(tmp_path):
    backend = _backend(ROOT, "kvtier_wheel_src")
    base = "kvtier-" + _version()
    assert backend.get_requires_for_build_sdist() == []
    name = backend.build_sdist(str(tmp_path / "a"))
    assert name == base + ".tar.gz"
    path = tmp_path / "a" / name
    with tarfile.open(path) as tar:
        members = {m.name: m for m in tar.getmembers()}
        pkg_info = tar.extractfile(base + "/PKG-INFO").read().decode()
    names = {n[len(base) + 1:] for n in members}
    assert all(n.startswith(base + "/") for n in members)
    for must in ("PKG-INFO", "pyproject.toml", "CMakeLists.txt", "cmake/wheel/kvtier_wheel.py",
                 "src/python/kvtier/__init__.py", "include/kvtier/kvtier_c.h"):
        assert must in names, must
    tracked = _tracked()
    if tracked is not None:
        assert tracked - names == set()
    assert not any(n.startswith(("build/", ".git/")) or n.endswith(".pyc") for n in names)
    assert members[base + "/scripts/test"].mode == 0o755
    assert members[base + "/pyproject.toml"].mode == 0o644
    assert "Name: kvtier\n" in pkg_info
    assert "Version: %s\n" % _version() in pkg_info
    assert "Requires-Python: >=3.10\n" in pkg_info
    # The same tree packs to the same bytes.
    backend.build_sdist(str(tmp_path / "b"))
    assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_sdist_of_an_unpacked_sdist_is_the_same_files(tmp_path):
    """Outside a git work tree the backend walks the folder: an unpacked
    sdist packs to the same file list, with what the wheel needs."""
    base = "kvtier-" + _version()
    name = _backend(ROOT, "kvtier_wheel_src2").build_sdist(str(tmp_path / "a"))
    with tarfile.open(tmp_path / "a" / name) as tar:
        first = sorted(tar.getnames())
        tar.extractall(tmp_path / "unpacked")
    unpacked = str(tmp_path / "unpacked" / base)
    assert subprocess.run(["git", "-C", unpacked, "rev-parse"], capture_output=True).returncode != 0
    again = _backend(unpacked, "kvtier_wheel_unpacked")
    assert again.ROOT == unpacked
    name2 = again.build_sdist(str(tmp_path / "b"))
    assert name2 == name
    with tarfile.open(tmp_path / "b" / name2) as tar:
        assert sorted(tar.getnames()) == first
    meta = tmp_path / "meta"
    meta.mkdir()
    dist_info = again.prepare_metadata_for_build_wheel(str(meta))
    assert dist_info == "kvtier-%s.dist-info" % _version()
    assert "Version: %s\n" % _version() in (meta / dist_info / "METADATA").read_text()
