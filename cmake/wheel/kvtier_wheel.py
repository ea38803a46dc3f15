"""kvtier's PEP 517 build backend (pyproject.toml), plain Python, offline.

`pip wheel --no-build-isolation .` (or `pip install --no-build-isolation .`)
with any CPython 3.10+ calls build_wheel() in that interpreter, which

1. configures one CMake build folder (default build/wheel: RelWithDebInfo,
   no tests, no benches) whose KVTIER_PYTHON_MODULES lists every interpreter that has
   built a wheel there (cmake/KvtierPython.cmake), this one added;
2. builds kvtier_python_cpXY (the extension for this interpreter), kvtier_cli
   and kvtier_c: a second interpreter recompiles only its extension;
3. zips the wheel: the kvtier package with its extension, .pyi stubs and
   py.typed; kvtier/lib/libkvtier_c.so.0 (with a linker script
   libkvtier_c.so, so `-L <pkg>/lib -lkvtier_c` links it) and
   kvtier/include/kvtier/kvtier_c.h; the kvtier command as a script (pip puts
   it in the environment's bin/).

build_sdist() (`python3 -m build --no-isolation`, which builds the wheel
from the sdist it made) packs the source files: git's tracked and untracked
but not ignored ones in a git work tree, else every file but build/ and
.git; with PKG-INFO.

config_settings (pip: --config-settings key=value): build-dir (relative to the source
folder or absolute), jobs (parallel compile jobs; default: all CPUs).
No network, no build dependencies beyond CMake, Ninja, a C++20 compiler,
pybind11-dev and the interpreter's Python.h.
"""

import base64
import gzip
import hashlib
import io
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAME = "kvtier"
SUMMARY = "KV-cache tiers (RAM, disk, Redis) for LLM inference engines"
TARGETS = ("kvtier_cli", "kvtier_c")
# Fixed times make the same build give the same wheel bytes.
ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def _version():
    text = open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8").read()
    match = re.search(r"project\(\s*kvtier\s+VERSION\s+([0-9.]+)", text)
    if not match:
        raise RuntimeError("kvtier_wheel: no `project(kvtier VERSION x.y.z)` in CMakeLists.txt")
    return match.group(1)


def _python_tag():
    return "cp%d%d" % sys.version_info[:2]


def _wheel_tag():
    if sys.implementation.name != "cpython":
        raise RuntimeError("kvtier_wheel: kvtier's wheels are for CPython, not " +
                           sys.implementation.name)
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return "%s-%s%s-%s" % (_python_tag(), _python_tag(), sys.abiflags, platform)


def _dist_info():
    return "%s-%s.dist-info" % (NAME, _version())


def _metadata():
    return "\n".join([
        "Metadata-Version: 2.1",
        "Name: " + NAME,
        "Version: " + _version(),
        "Summary: " + SUMMARY,
        "Requires-Python: >=3.10",
        "Provides-Extra: numpy",
        "Requires-Dist: numpy; extra == \"numpy\"",
        "",
        "kvtier caches LLM KV blocks across RAM, a disk folder and Redis. "
        "See docs/python.md in the source.",
        ""])


def _wheel_file():
    return ("Wheel-Version: 1.0\nGenerator: kvtier_wheel %s\nRoot-Is-Purelib: false\nTag: %s\n"
            % (_version(), _wheel_tag()))


def _settings(config_settings):
    config_settings = config_settings or {}
    build_dir = config_settings.get("build-dir") or os.path.join("build", "wheel")
    if not os.path.isabs(build_dir):
        build_dir = os.path.join(ROOT, build_dir)
    jobs = str(config_settings.get("jobs") or os.cpu_count() or 1)
    if not jobs.isdigit() or int(jobs) < 1:
        raise ValueError("kvtier_wheel: jobs must be a positive number, got %r" % jobs)
    return build_dir, jobs


def _run(cmd):
    print("kvtier_wheel:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, stdout=sys.stderr)


def _cached_pythons(build_dir):
    """KVTIER_PYTHON_MODULES of an existing build folder, minus interpreters
    gone or of this one's version (CMake refuses two of one version)."""
    cache = os.path.join(build_dir, "CMakeCache.txt")
    if not os.path.exists(cache):
        return []
    kept = []
    for line in open(cache, encoding="utf-8"):
        if line.startswith("KVTIER_PYTHON_MODULES:"):
            for python in filter(None, line.split("=", 1)[1].strip().split(";")):
                try:
                    tag = subprocess.run(
                        [python, "-c", "import sys; print('cp%d%d' % sys.version_info[:2])"],
                        capture_output=True, text=True, check=True).stdout.strip()
                except (OSError, subprocess.CalledProcessError):
                    continue
                if tag != _python_tag():
                    kept.append(python)
    return kept


def _build(build_dir, jobs):
    """Builds this interpreter's extension, the CLI and libkvtier_c; returns
    the package folder."""
    pythons = _cached_pythons(build_dir) + [sys.executable]
    # The release preset's flags (-O2 -g; the wheel's binaries are stripped),
    # so that a compiler cache a release build filled serves this one too.
    configure = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                 "-DKVTIER_BUILD_TESTS=OFF", "-DKVTIER_BUILD_BENCH=OFF",
                 "-DKVTIER_PYTHON=" + sys.executable,  # the folder's kvtier_python (not built)
                 "-DKVTIER_PYTHON_MODULES=" + ";".join(pythons)]
    if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
        configure += ["-G", "Ninja"]
    _run(configure)
    module = "kvtier_python_" + _python_tag()
    _run(["cmake", "--build", build_dir, "-j", jobs, "--target", module, *TARGETS])
    return os.path.join(build_dir, "python-" + _python_tag(), "kvtier")


def _stripped(path, stage):
    """A copy of the binary at `path` without its symbol table."""
    out = os.path.join(stage, os.path.basename(path))
    shutil.copyfile(path, out)
    strip = shutil.which("strip")
    if strip:
        subprocess.run([strip, "--strip-unneeded", out], check=True)
    return out


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arcname, digest, len(data))


class _Wheel:
    def __init__(self, path):
        self.zip = zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED)
        self.records = []

    def add(self, arcname, data, executable=False):
        info = zipfile.ZipInfo(arcname, ZIP_TIME)
        # A regular file's mode: pip keeps the x bits only with S_IFREG.
        info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        self.records.append(_record_line(arcname, data))

    def add_file(self, arcname, path, executable=False):
        with open(path, "rb") as f:
            self.add(arcname, f.read(), executable)

    def close(self, dist_info):
        record = dist_info + "/RECORD"
        text = "\n".join(self.records + [record + ",,"]) + "\n"
        info = zipfile.ZipInfo(record, ZIP_TIME)
        info.external_attr = (stat.S_IFREG | 0o644) << 16
        self.zip.writestr(info, text, zipfile.ZIP_DEFLATED)
        self.zip.close()


def _package_files(package):
    """(arcname, path) of the built package folder, sorted; no bytecode."""
    found = []
    for folder, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in files:
            if name.endswith(".pyc"):
                continue
            path = os.path.join(folder, name)
            found.append(("kvtier/" + os.path.relpath(path, package).replace(os.sep, "/"), path))
    return sorted(found)


def _source_files():
    """The source folder's files to pack, relative to it, sorted."""
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], capture_output=True, check=True).stdout
        names = {n.decode() for n in out.split(b"\0") if n}
    except (OSError, subprocess.CalledProcessError):  # no git, or not a work tree
        names = set()
        for folder, dirs, files in os.walk(ROOT):
            rel = os.path.relpath(folder, ROOT)
            dirs[:] = [d for d in dirs if not (rel == "." and d in ("build", ".git"))
                       and d != "__pycache__"]
            names |= {os.path.normpath(os.path.join(rel, f)) for f in files
                      if not f.endswith(".pyc")}
    # A tracked file deleted in the work tree is left out, as are links to folders.
    return sorted(n for n in names
                  if os.path.isfile(os.path.join(ROOT, n)) or os.path.islink(os.path.join(ROOT, n)))


def _tar_add(tar, arcname, data=None, path=None):
    if path is not None and os.path.islink(path):
        info = tarfile.TarInfo(arcname)
        info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
    else:
        if path is not None:
            with open(path, "rb") as f:
                data = f.read()
            mode = 0o755 if os.access(path, os.X_OK) else 0o644
        else:
            mode = 0o644
        info = tarfile.TarInfo(arcname)
        info.size, info.mode = len(data), mode
    info.mtime = 315532800  # ZIP_TIME: the same tree gives the same bytes
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, None if info.type == tarfile.SYMTYPE else io.BytesIO(data))


# --- PEP 517 hooks ---------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    dist_info = os.path.join(metadata_directory, _dist_info())
    os.makedirs(dist_info, exist_ok=True)
    with open(os.path.join(dist_info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    with open(os.path.join(dist_info, "WHEEL"), "w", encoding="utf-8") as f:
        f.write(_wheel_file())
    return _dist_info()


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, _version())
    name = base + ".tar.gz"
    os.makedirs(sdist_directory, exist_ok=True)
    path = os.path.join(sdist_directory, name)
    with open(path + ".part", "wb") as raw:
        # mtime=0 in the gzip header, for the same bytes again.
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                _tar_add(tar, base + "/PKG-INFO", data=_metadata().encode())
                for rel in _source_files():
                    if rel != "PKG-INFO":
                        _tar_add(tar, base + "/" + rel, path=os.path.join(ROOT, rel))
    os.replace(path + ".part", path)
    return name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    build_dir, jobs = _settings(config_settings)
    package = _build(build_dir, jobs)
    if not os.path.exists(os.path.join(package, "__init__.py")):
        raise RuntimeError("kvtier_wheel: the build made no package in " + package)
    name = "%s-%s-%s.whl" % (NAME, _version(), _wheel_tag())
    os.makedirs(wheel_directory, exist_ok=True)
    path = os.path.join(wheel_directory, name)
    dist_info = _dist_info()
    data = "%s-%s.data" % (NAME, _version())
    with tempfile.TemporaryDirectory() as stage:
        wheel = _Wheel(path + ".part")
        for arcname, file in _package_files(package):
            if file.endswith(".so"):
                file = _stripped(file, stage)
            wheel.add_file(arcname, file)
        # The C API: the real file under its soname, and a linker script for -lkvtier_c.
        libc = os.path.realpath(os.path.join(build_dir, "libkvtier_c.so"))
        wheel.add_file("kvtier/lib/libkvtier_c.so.0", _stripped(libc, stage))
        wheel.add("kvtier/lib/libkvtier_c.so", b"INPUT(libkvtier_c.so.0)\n")
        wheel.add_file("kvtier/include/kvtier/kvtier_c.h",
                       os.path.join(ROOT, "include", "kvtier", "kvtier_c.h"))
        wheel.add_file(data + "/scripts/kvtier", _stripped(os.path.join(build_dir, "kvtier"), stage),
                       executable=True)
        wheel.add(dist_info + "/METADATA", _metadata().encode())
        wheel.add(dist_info + "/WHEEL", _wheel_file().encode())
        wheel.close(dist_info)
    os.replace(path + ".part", path)
    return name
