"""Fixtures of the kvtier Python tests (run by ctest as py_kvtier_module.<file>).

ctest sets PYTHONPATH to <build>/python, KVTIER_CLI to the kvtier command and
KVTIER_SOURCE_DIR to the repository; under a sanitizer build it also preloads
the sanitizer runtime (see cmake/KvtierPython.cmake). Run by hand:

    PYTHONPATH=build/dev/python KVTIER_CLI=build/dev/kvtier \\
      LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)" \\
      ASAN_OPTIONS=detect_leaks=0 /usr/bin/python3 -m pytest -q tests/python

scripts/wheels also runs them in virtual environments where a wheel is
installed and numpy and torch may be missing (it sets KVTIER_TEST_VENV=1; only then): a test file that imports a
package this Python lacks (itself or through a helper module of this folder),
the engine tests (test_vllm*, test_sglang*: torch) without torch, and those of
CHILD_NEEDS without what their child processes import, are not collected; the report's header names them. make_blocks() skips its test
without numpy.
"""

import ast
import importlib.util
import json
import os
import socket
import subprocess
import time

import pytest

import kvtier

ROOT = os.environ.get("KVTIER_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
ENGINE_TESTS = ("test_vllm", "test_sglang")
# Test files whose child processes import what the file itself does not.
CHILD_NEEDS = {"test_example.py": {"numpy"}, "test_readme.py": {"numpy"}}


def _installed(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _local(module):
    """The file of a helper module of tests/python or tests/, or None."""
    for folder in (HERE, os.path.dirname(HERE)):
        path = os.path.join(folder, module + ".py")
        if os.path.exists(path):
            return path
    return None


def _imports(module, seen):
    """Top packages that tests/python/<module>.py imports at module level, with those of the
    helper modules (of this folder or tests/) it imports."""
    if module in seen:
        return set()
    seen.add(module)
    tree = ast.parse(open(_local(module), encoding="utf-8").read())
    names = set()
    for node in tree.body:  # module-level imports: those in functions are the tests' own
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    found = set()
    for name in names:
        if _local(name):
            found |= _imports(name, seen)
        else:
            found.add(name)
    return found


def _missing_imports():
    """{test file: [packages it needs that this Python lacks]}."""
    missing = {}
    for name in sorted(os.listdir(HERE)):
        if not (name.startswith("test_") and name.endswith(".py")):
            continue
        needs = _imports(name[:-3], {"conftest"})
        if name.startswith(ENGINE_TESTS):
            needs |= {"numpy", "torch"}
        needs |= CHILD_NEEDS.get(name, set())
        lacking = sorted(n for n in needs if not _installed(n))
        if lacking:
            missing[name] = lacking
    return missing


# Only scripts/wheels' virtual environments (KVTIER_TEST_VENV=1) may lack packages: in
# ctest's run (Debian's python3, scripts/bootstrap's packages) a test file whose imports
# fail is an error, not a file left out.
_MISSING = _missing_imports() if os.environ.get("KVTIER_TEST_VENV") == "1" else {}
collect_ignore = sorted(_MISSING)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "fork: forks a child (no exec) of a multi-threaded process; a sanitizer's "
        "allocator is not fork-safe (GCC 12), so sanitized builds deselect these tests "
        "(cmake/KvtierPython.cmake) and the wheels' unsanitized module runs them")


def pytest_report_header(config):
    if not _MISSING:
        return None
    return ["not collected (packages missing here): " +
            ", ".join("%s (%s)" % (f, " ".join(p)) for f, p in _MISSING.items())]


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("KVTIER_CLI")
    if not path or not os.access(path, os.X_OK):
        pytest.fail("KVTIER_CLI must name the kvtier command (ctest sets it)")
    return path


@pytest.fixture(scope="session")
def source_dir():
    return ROOT


@pytest.fixture(scope="session")
def redis_url():
    """The Redis server scripts/test starts (scripts/redis-servers)."""
    url = os.environ.get("KVTIER_TEST_REDIS_URL")
    if not url:
        pytest.fail("KVTIER_TEST_REDIS_URL is not set: run through scripts/test, or start "
                    "servers with `eval \"$(scripts/redis-servers start DIR)\"` first")
    return url


@pytest.fixture(scope="session")
def tls_server():
    """The TLS server scripts/redis-servers starts, and its certificate
    folder: (rediss URL, folder)."""
    url = os.environ.get("KVTIER_TEST_REDIS_TLS_URL")
    folder = os.environ.get("KVTIER_TEST_TLS_DIR")
    if not url or not folder:
        pytest.fail("KVTIER_TEST_REDIS_TLS_URL / KVTIER_TEST_TLS_DIR are not set: run through "
                    "scripts/test, or start servers with "
                    "`eval \"$(scripts/redis-servers start DIR)\"` first")
    return url, folder


def run_cli(cli, *args):
    """Runs `kvtier ARGS --json` and returns its parsed stdout."""
    out = subprocess.run([cli, *args, "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def make_blocks(layout, model, tokens, seed=0, created_at=1_700_000_000):
    """Block files for the full blocks of `tokens`: (keys, blocks, tensors).

    Tensor content is a pure function of (seed, block index), so any reader
    can recompute what it must get back.
    """
    if os.environ.get("KVTIER_TEST_VENV") == "1":
        np = pytest.importorskip("numpy")  # a wheel's venv may lack it
    else:
        import numpy as np  # ctest's run: Debian's numpy must be there
    chain = kvtier.KeyChain(model, layout)
    keys = chain.keys(tokens)
    blocks, tensors = [], []
    parent = chain.namespace
    for i, key in enumerate(keys):
        rng = np.random.default_rng([seed, i])
        ts = []
        for t in layout.tensors():
            raw = rng.integers(0, 256, size=t.nbytes, dtype=np.uint8)
            ts.append(raw.view(t.numpy_dtype).reshape(t.shape))
        blocks.append(kvtier.encode_block(layout, key, parent, chain.namespace, ts,
                                          created_at=created_at))
        tensors.append(ts)
        parent = key
    return keys, blocks, tensors


def start_daemon(cli, sock, tmp_path, *extra, layout="tiny", host_bytes="4MiB"):
    """`kvtier serve` on the socket `sock` (a Popen, stdout a pipe), once it
    accepts connections; its stderr goes to tmp_path/daemon.err. `layout`: a
    preset or a layout JSON file."""
    err = open(tmp_path / "daemon.err", "w")
    proc = subprocess.Popen([cli, "serve", "--server", "unix:" + str(sock), "--layout",
                             str(layout), "--host-bytes", host_bytes, *extra],
                            stdout=subprocess.PIPE, stderr=err, text=True)
    deadline = time.monotonic() + 120  # ends a hung start on a busy machine
    while time.monotonic() < deadline:
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(str(sock))
            return proc
        except OSError:
            pass
        finally:
            s.close()
        assert proc.poll() is None, (tmp_path / "daemon.err").read_text()
        time.sleep(0.02)
    proc.kill()
    pytest.fail("kvtier serve did not listen: " + (tmp_path / "daemon.err").read_text())


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (mounted as root, unmounted after): fill it with
    fill_up() for a disk that is really full (ENOSPC from the file system)."""
    mount = tmp_path / "small"
    mount.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail("a full-disk test needs a 1 MiB tmpfs (mount, as root): " + r.stderr)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


def fill_up(folder):
    """Writes `folder`/filler until the file system has no block left."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"x" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    assert os.statvfs(folder).f_bavail == 0
