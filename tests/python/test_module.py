"""The package around the extension: version, errors, the .pyi stubs, and
`python3 -m kvtier` forwarding to the kvtier command."""

import ast
import os
import subprocess
import sys

import kvtier
import kvtier._kvtier as ext


def test_version_and_error_classes():
    assert kvtier.__version__.count(".") == 2
    names = ["NotFound", "Corruption", "InvalidArgument", "ResourceExhausted", "IOError",
             "Unavailable", "FailedPrecondition", "Internal"]
    for name in names:
        cls = getattr(kvtier, name)
        assert issubclass(cls, kvtier.Error) and cls.__name__ == name
        assert cls.__module__ == "kvtier"
    assert issubclass(kvtier.Error, Exception)
    assert set(kvtier.__all__) == {n for n in dir(ext) if not n.startswith("_")} | {"__version__"}


def stub_tree(source_dir):
    path = os.path.join(source_dir, "src", "python", "kvtier", "_kvtier.pyi")
    return ast.parse(open(path).read())


def test_stubs_name_what_the_module_has(source_dir):
    tree = stub_tree(source_dir)
    public = {n for n in dir(ext) if not n.startswith("_")}
    stubbed = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            stubbed[node.name] = {n.name for n in node.body
                                  if isinstance(n, ast.FunctionDef) and
                                  (not n.name.startswith("_") or n.name in ("__enter__", "__exit__",
                                                                            "__len__"))}
        elif isinstance(node, ast.FunctionDef):
            stubbed[node.name] = None
    assert public == set(stubbed), "stubs and module differ"
    for name, members in stubbed.items():
        if members is None:
            continue
        cls = getattr(ext, name)
        if issubclass(cls, BaseException):
            continue
        real = {m for m in dir(cls) if not m.startswith("_")} | \
               {m for m in ("__enter__", "__exit__", "__len__") if m in cls.__dict__}
        assert members == real, name


def every_routine(obj, seen=None):
    """(qualified name, docstring) of every function and method of the module."""
    for name in dir(obj):
        if name.startswith("__") and name != "__init__":
            continue
        member = getattr(obj, name)
        if isinstance(member, type) and member.__module__ in ("kvtier", "kvtier._kvtier"):
            if issubclass(member, BaseException):
                continue
            for sub, doc in every_routine(member):
                yield name + "." + sub, doc
        elif callable(member) and getattr(member, "__doc__", None):
            yield name, member.__doc__


def test_docstrings_show_python_types_not_handle():
    # pybind11 shows a py::handle parameter as `handle` and C++ types by
    # their C++ names; every signature help() prints names Python types.
    docs = dict(every_routine(ext))
    assert "Cache.__init__" in docs and "block_keys" in docs and "KeyChain.__init__" in docs
    bad = {name: doc.splitlines()[0] for name, doc in docs.items()
           if "handle" in doc.split("\n\n")[0] or "::" in doc.split("\n\n")[0]}
    assert bad == {}
    assert "layout: Layout | str | os.PathLike" in docs["Cache.__init__"]
    assert ("block_keys(model: str, signature: str | Layout, block_tokens: int, "
            "tokens: Sequence[int] | Buffer, *, salt: bytes | str") in docs["block_keys"]
    assert "block_tokens: int | None = None" in docs["KeyChain.__init__"]


def run_module(args, env_update):
    env = dict(os.environ)
    env.update(env_update)
    return subprocess.run([sys.executable, "-m", "kvtier", *args], capture_output=True, text=True,
                          env=env, cwd="/")


def test_python_m_kvtier_forwards_to_the_cli(cli):
    # Found next to the package in the build folder, with nothing on PATH.
    out = run_module(["--help"], {"KVTIER_CLI": "", "PATH": "/nonexistent"})
    assert out.returncode == 0, out.stderr
    for sub in ("key", "verify", "synth", "demo"):
        assert sub in out.stdout
    # Same bytes as the command itself.
    args = ["key", "--model", "m", "--layout", "tiny", "--tokens", "1,2,3", "--json"]
    direct = subprocess.run([cli, *args], capture_output=True, text=True, check=True)
    assert run_module(args, {"KVTIER_CLI": cli}).stdout == direct.stdout
    # Bad input keeps the command's exit status.
    assert run_module(["key", "--bogus"], {"KVTIER_CLI": cli}).returncode != 0


def test_python_m_kvtier_without_a_cli(tmp_path):
    # A copy of the package alone: nothing above it, nothing on PATH.
    import shutil
    pkg = tmp_path / "site" / "kvtier"
    shutil.copytree(os.path.dirname(kvtier.__file__), pkg)
    env = dict(os.environ, KVTIER_CLI="", PATH="/nonexistent", PYTHONPATH=str(tmp_path / "site"))
    out = subprocess.run([sys.executable, "-m", "kvtier", "--help"], capture_output=True,
                         text=True, env=env, cwd=str(tmp_path))
    assert out.returncode == 2
    assert "not installed" in out.stderr
