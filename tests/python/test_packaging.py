"""Packaging: configure-time checks of the build dependencies, one version
number, and the C CLI's choice of Python for `convert`.

The wheel itself (sdist, wheel, fresh venv) is checked by
scripts/check_wheel.sh; the README's C program by scripts/check_readme_c.sh.
"""

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

import hurray

REPO = Path(__file__).resolve().parents[2]
MESON = Path(sys.executable).parent / "meson"
CLI = Path(os.environ.get("HURRAY_CLI", REPO / "build" / "hurray"))

# Not under make test-python-asan: the preloaded ASan runtime would follow
# meson into the compilers it runs.
needs_meson = pytest.mark.skipif(
    not MESON.exists() or "asan" in os.environ.get("LD_PRELOAD", ""),
    reason="no meson beside this Python, or ASan preloaded",
)
needs_cli = pytest.mark.skipif(not CLI.exists(), reason="no build/hurray (make build)")

# pyproject's meson-python setup arguments: what `pip install .` configures.
PIP_ARGS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["meson-python"]["args"][
    "setup"
]


def hiding_compiler(tmp_path, headers):
    """A C compiler that behaves as if `headers` were not installed."""
    cc = tmp_path / "cc-without"
    names = "|".join(re.escape(h) for h in headers)
    cc.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do\n'
        '  case "$a" in *.c)\n'
        f'    if grep -Eq "({names})" "$a" 2>/dev/null; then\n'
        '      echo "fatal error: header hidden by the test" >&2; exit 1\n'
        "    fi;;\n"
        "  esac\n"
        "done\n"
        f'exec {shutil.which("cc")} "$@"\n'
    )
    cc.chmod(0o755)
    return cc


def meson_setup(tmp_path, cc, *args):
    env = dict(os.environ, CC=str(cc))
    return subprocess.run(
        [str(MESON), "setup", str(tmp_path / "b"), str(REPO), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def error_lines(r):
    return [line for line in (r.stdout + r.stderr).splitlines() if "ERROR:" in line]


def build_dependencies():
    """(header, Debian package, setup arguments) of every entry of meson.build's
    build_dep_specs table, so that an entry added there is tested here."""
    text = (REPO / "meson.build").read_text()
    table = text[text.index("build_dep_specs = {") : text.index("build_deps = {}")]
    out = []
    for entry in re.findall(r"^  '\w+' : \{.*?\},?$", table, re.S | re.M):
        header = re.search(r"'header' : '([^']+)'", entry).group(1)
        package = re.search(r"'deb' : '([^']+)'", entry).group(1)
        out.append(
            (header, package, ["-Dtests=true"] if "get_option('tests')" in entry else PIP_ARGS)
        )
    return out


def test_the_table_is_read():
    assert ("xxhash.h", "libxxhash-dev", PIP_ARGS) in build_dependencies()


@needs_meson
@pytest.mark.parametrize(
    "header, package, args",
    build_dependencies()
    + [
        ("xxhash.h", "libxxhash-dev", []),  # a plain `meson setup build` too
    ],
)
def test_missing_build_dependency_stops_configure_naming_the_debian_package(
    tmp_path, header, package, args
):
    r = meson_setup(tmp_path, hiding_compiler(tmp_path, [header]), *args)
    assert r.returncode != 0
    errors = error_lines(r)
    assert len(errors) == 1, r.stdout + r.stderr
    assert header in errors[0].split(" not found: ")[0]
    assert (
        f" not found: install the Debian package {package} (apt-get install {package})" in errors[0]
    )


@pytest.mark.slow
@needs_meson
def test_pip_configuration_needs_no_cmocka(tmp_path):
    # pip install . configures with -Dtests=false: cmocka is test-only.
    r = meson_setup(tmp_path, hiding_compiler(tmp_path, ["cmocka.h"]), *PIP_ARGS)
    assert r.returncode == 0, r.stdout + r.stderr


def test_one_version_number():
    meson = re.search(
        r"project\('hurray'.*?version : '([^']+)'", (REPO / "meson.build").read_text(), re.S
    ).group(1)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "version" not in project and project["dynamic"] == ["version"]
    assert hurray.__version__ == meson
    header = REPO / "build" / "include" / "hurray" / "version.h"
    if header.exists():
        assert f'#define HURRAY_VERSION_STRING "{meson}"' in header.read_text()
    assert (
        "HURRAY_VERSION_STRING"
        not in (REPO / "include/hurray/common.h")
        .read_text()
        .split("#include <hurray/version.h>")[0]
    )


def test_requires_python_is_true():
    # The extension calls PyType_GetModuleByDef, public from 3.11.
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.11"
    assert "PyType_GetModuleByDef" in (REPO / "python/hurray/_hy_module.c").read_text()
    assert (REPO / "LICENSE").read_text().lstrip().startswith("Apache License")


# ---------------------------------------------------- the CLI's Python for convert


@pytest.fixture
def npz(tmp_path):
    path = tmp_path / "a.npz"
    np.savez(path, x=np.arange(6, dtype=np.float32))
    return path


def cli(*args, env_update=None, drop=("HURRAY_PYTHON",), cwd=None):
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(env_update or {})
    return subprocess.run(
        [str(CLI), *map(str, args)], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )


@needs_cli
def test_convert_uses_the_configured_python_not_path(npz, tmp_path):
    # From an ordinary shell: no venv on PATH, HURRAY_PYTHON unset. The build
    # was configured with this venv's Python, which has the package.
    r = cli("convert", npz, tmp_path / "a.hurray", "-q", env_update={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    with hurray.open(tmp_path / "a.hurray") as f:
        assert np.array_equal(np.asarray(f["x"]), np.arange(6, dtype=np.float32))


@needs_cli
def test_convert_with_a_python_without_the_package_says_what_to_do(npz, tmp_path):
    fake = tmp_path / "python-without-hurray"
    fake.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')  # -S: no site-packages
    fake.chmod(0o755)
    r = cli("convert", npz, tmp_path / "b.hurray", env_update={"HURRAY_PYTHON": str(fake)})
    assert r.returncode == 1
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "cannot import the hurray Python package" in r.stderr
    assert "HURRAY_PYTHON" in r.stderr
    assert not (tmp_path / "b.hurray").exists()


@needs_cli
def test_convert_with_a_missing_python_says_what_to_do(npz, tmp_path):
    r = cli(
        "convert",
        npz,
        tmp_path / "c.hurray",
        env_update={"HURRAY_PYTHON": str(tmp_path / "no-such-python")},
    )
    assert r.returncode == 1
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "cannot run the Python interpreter" in r.stderr and "HURRAY_PYTHON" in r.stderr


@needs_cli
def test_convert_ignores_a_hurray_folder_in_the_current_directory(npz, tmp_path):
    evil = tmp_path / "hurray"
    evil.mkdir()
    (evil / "__init__.py").write_text("raise SystemExit('the current directory ran')\n")
    (evil / "__main__.py").write_text("raise SystemExit('the current directory ran')\n")
    r = cli("convert", npz, tmp_path / "d.hurray", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "d.hurray").exists()


# ---------------------------------------------------- installed artifacts


def test_extension_modules_export_only_their_init():
    # libhurray and yajl are linked in statically; exported from a module,
    # their symbols bound to (or were taken by) another copy in the process.
    nm = shutil.which("nm")
    if nm is None or "asan" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("no nm, or ASan preloaded")
    folder = Path(hurray.__file__).parent
    modules = sorted(folder.glob("_*.so"))
    assert {m.name.split(".")[0] for m in modules} >= {"_hurray", "_formats"}
    for module in modules:
        out = subprocess.run(
            [nm, "-D", "--defined-only", str(module)], capture_output=True, text=True, check=True
        )
        names = [line.split()[-1] for line in out.stdout.splitlines() if line.strip()]
        assert names == [f"PyInit_{module.name.split('.')[0]}"], (module.name, names[:10])


def test_licences_of_the_compiled_in_code_are_declared():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0 AND BSD-2-Clause AND ISC"
    assert "LICENSES/*.txt" in project["license-files"]
    assert "BSD 2-Clause" in (REPO / "LICENSES/xxHash.txt").read_text()
    assert "ISC" in (REPO / "LICENSES/yajl.txt").read_text()


def test_an_ml_dtypes_without_the_narrow_types_is_named(tmp_path):
    # The floor was 0.4, which lacks float8_e8m0fnu, float6 and float4:
    # every bfloat16 save then died of an AttributeError.
    code = f"""
import sys, types
import ml_dtypes as real
old = types.ModuleType("ml_dtypes")
old.__version__ = "0.4.0"
for name in ("bfloat16", "float8_e4m3fn", "float8_e5m2", "int4", "uint4"):
    setattr(old, name, getattr(real, name))
sys.modules["ml_dtypes"] = old
import numpy as np, hurray
try:
    hurray.save({str(tmp_path / "a.hurray")!r}, {{"a": np.zeros(2, old.bfloat16)}})
except ImportError as e:
    print("ImportError", e)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "ImportError hurray needs ml_dtypes 0.5 or later" in out.stdout, out.stderr
    floor = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "ml_dtypes>=0.5" in floor


def test_an_urllib3_without_read1_is_named(monkeypatch):
    urllib3 = pytest.importorskip("urllib3")
    for cls in urllib3.response.HTTPResponse.__mro__:  # urllib3 2.1 has none
        if "read1" in cls.__dict__:
            monkeypatch.delattr(cls, "read1")
    with pytest.raises(hurray.RemoteError, match="urllib3 2.2 or later"):
        hurray.open("http://127.0.0.1:9/a.hurray")
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert extras["optional-dependencies"]["remote"] == ["urllib3>=2.2"]


def test_every_module_of_the_package_is_installed():
    """hurray/_publish.py was added beside the others but not to
    python/meson.build's install list: the tree's tests passed, and every
    `pip install .` failed at `import hurray`."""
    build = (REPO / "python" / "meson.build").read_text()
    listed = set(re.findall(r"'(hurray/[^']+\.pyi?|hurray/py\.typed)'", build))
    folders = re.findall(r"install_subdir\('(hurray/[^']+)'", build)  # installed whole
    package = REPO / "python" / "hurray"
    present = {
        p.relative_to(REPO / "python").as_posix()
        for p in package.rglob("*")
        if p.suffix in (".py", ".pyi") or p.name == "py.typed"
    }
    missing = {p for p in present - listed if not any(p.startswith(f + "/") for f in folders)}
    assert missing == set(), "not installed by python/meson.build"
    assert listed - present == set(), "listed in python/meson.build but absent"


@needs_cli
def test_ls_and_info_name_the_file_of_a_damaged_tensor(tmp_path):
    """`hurray ls DIR` and `info` printed a tensor's error as "hurray: NAME:
    MESSAGE": with two files holding the same names, nothing said which
    one was damaged. Names are quoted as the library quotes them, as they
    are."""
    from _file_edits import descriptor_at, reseal

    name = 'w"1'
    values = {name: np.arange(2, dtype=np.float32)}
    hurray.save(tmp_path / "a.hurray", values)
    hurray.save(tmp_path / "b.hurray", values)
    blob = bytearray((tmp_path / "b.hurray").read_bytes())
    encoded = hurray.open(tmp_path / "a.hurray")[name].descriptor.encode()
    ready = hurray.Descriptor.decode(encoded)
    b = ready.buffers[0]
    moved = hurray.Buffer(b.role, b.byte_size, b.alignment, sync_mode="stream")
    stream = ready.replace(buffers=[moved]).encode()
    (at,) = [i for i in range(len(encoded)) if encoded[i] != stream[i]]  # the sync mode's byte
    start, _ = descriptor_at(blob, name)
    blob[start + at] = 8  # no such mode
    reseal(blob)
    (tmp_path / "b.hurray").write_bytes(bytes(blob))
    bad = str(tmp_path / "b.hurray")
    for args in (
        ["ls", str(tmp_path)],
        ["info", bad],
        ["cat", bad, name],
        ["cat", "--no-verify", bad, name],
    ):
        r = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 1, args
        assert f'hurray: {bad}: tensor "w"1": ' in r.stderr, r.stderr
        assert "unknown mode 8" in r.stderr


@needs_cli
def test_the_native_converter_names_the_source_it_cannot_read(tmp_path):
    """ "hurray convert: file of 5 bytes is shorter than header and trailer"
    said nothing of which file; the Python converter says "cannot read X"."""
    junk = tmp_path / "junk.hurray"
    junk.write_bytes(b"junk\n")
    r = subprocess.run(
        [CLI, "convert", junk, tmp_path / "o.safetensors"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1
    assert r.stderr.startswith(f"hurray convert: {junk} -> {tmp_path / 'o.safetensors'}: ")
    # A refusal of the target's: both files named, the source not blamed.
    src = tmp_path / "m.hurray"
    hurray.save(src, {"__metadata__": np.zeros(1, np.float32)})
    r = subprocess.run(
        [CLI, "convert", src, tmp_path / "m.safetensors"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and "cannot read" not in r.stderr, r.stderr
    assert str(src) in r.stderr and "__metadata__" in r.stderr
