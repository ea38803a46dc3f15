"""kvtier without numpy (a fresh virtual environment, as scripts/wheels
tests): the import and every buffer call work; the two calls that make numpy
arrays raise ImportError naming the call and numpy. numpy is hidden from a
child process (sys.modules["numpy"] = None), so this runs with or without it."""

import os
import subprocess
import sys
import textwrap

import kvtier
import kvtier._kvtier as ext

CHILD = textwrap.dedent("""
    import sys
    sys.modules["numpy"] = None  # as if not installed: `import numpy` fails
    import kvtier

    layout = kvtier.Layout("tiny")
    chain = kvtier.KeyChain("no-numpy", layout)
    keys = chain.keys(list(range(2 * layout.block_tokens)))
    tensors = [bytearray([i % 251]) * t.nbytes for i, t in enumerate(layout.tensors())]
    block = kvtier.encode_block(layout, keys[0], chain.namespace, chain.namespace, tensors,
                                created_at=1_700_000_000)
    with kvtier.Cache("tiny", host_bytes=1 << 20, disk_dir=sys.argv[1]) as cache:
        cache.store(keys[0], block)
        out = bytearray(len(block))
        assert cache.match(keys) == 1
        assert cache.load_into(keys[0], out) == len(block) and bytes(out) == block
        outs = [bytearray(t.nbytes) for t in layout.tensors()]
        assert cache.load_tensors(keys[0], outs) and outs == tensors
    for call in (lambda: kvtier.decode_block(block, layout, keys[0]),
                 lambda: layout.tensors()[0].numpy_dtype):
        try:
            call()
        except ImportError as e:
            print("%s|%s" % (e.name, e))
        else:
            print("no error")
    """)


def test_buffer_calls_work_and_numpy_calls_name_numpy(tmp_path):
    out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "kv")],
                         capture_output=True, text=True, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 2, out.stdout
    for line, call in zip(lines, ("kvtier.decode_block", "kvtier.TensorInfo.numpy_dtype")):
        name, message = line.split("|", 1)
        assert name == "numpy"
        assert message.startswith(call + " makes numpy arrays and needs numpy, which this "
                                  "Python does not have (pip install numpy)"), message


def test_with_numpy_the_calls_are_the_extension_s_own():
    # The wrappers exist only where numpy is missing: nothing changes here.
    import importlib.util
    if importlib.util.find_spec("numpy") is None:
        assert kvtier.decode_block is not ext.decode_block
    else:
        assert kvtier.decode_block is ext.decode_block
        assert kvtier.TensorInfo.numpy_dtype is ext.TensorInfo.__dict__["numpy_dtype"]


def test_python_m_kvtier_version(cli, tmp_path):
    env = dict(os.environ, KVTIER_CLI=cli)
    out = subprocess.run([sys.executable, "-m", "kvtier", "--version"], capture_output=True,
                         text=True, env=env, cwd="/", check=True)
    direct = subprocess.run([cli, "--version"], capture_output=True, text=True, check=True)
    assert out.stdout == direct.stdout
    assert out.stdout.startswith("kvtier %s " % kvtier.__version__)
    # A copy of the package alone, no command anywhere: the module's version.
    import shutil
    shutil.copytree(os.path.dirname(kvtier.__file__), tmp_path / "site" / "kvtier")
    env = dict(os.environ, KVTIER_CLI="", PATH="/nonexistent", PYTHONPATH=str(tmp_path / "site"))
    out = subprocess.run([sys.executable, "-m", "kvtier", "--version"], capture_output=True,
                         text=True, env=env, cwd=str(tmp_path), check=True)
    assert out.stdout == "kvtier %s\n" % kvtier.__version__
