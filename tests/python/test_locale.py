"""Numbers written as text (descriptor JSON, GGUF metadata arrays, float
metadata in safetensors headers) and read back from text are the same
whatever locale the process sets: under de_DE, printf writes 1.5 as "1,5"
and strtod stops at ".", which turned [1.5, 2.25] into [1, 5, 2, 25] and
wrote invalid JSON. Each case runs in a child process that sets the locale
(built here with localedef, since containers seldom have one installed)."""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

LOCALE = "de_DE.UTF-8"


@pytest.fixture(scope="module")
def locale_env(tmp_path_factory):
    localedef = shutil.which("localedef")
    if localedef is None or not os.path.exists("/usr/share/i18n/locales/de_DE"):
        pytest.skip("localedef or the de_DE locale source is missing (Debian package locales)")
    where = tmp_path_factory.mktemp("locales")
    run = subprocess.run(
        [localedef, "-i", "de_DE", "-f", "UTF-8", str(where / LOCALE)],
        capture_output=True,
        text=True,
    )
    if not (where / LOCALE).is_dir():
        pytest.skip(f"localedef could not build {LOCALE}: {run.stderr.strip()[:200]}")
    return {**os.environ, "LOCPATH": str(where)}


def run_in_locale(env, body: str, tmp_path) -> str:
    script = "import locale\nlocale.setlocale(locale.LC_ALL, %r)\n" % LOCALE
    script += "assert locale.localeconv()['decimal_point'] == ','\n"
    script += textwrap.dedent(body)
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_descriptor_json_is_json_under_a_comma_locale(locale_env, tmp_path):
    out = run_in_locale(
        locale_env,
        """
        import json, numpy as np, hurray
        t = hurray.quantize(np.linspace(-3, 3, 64, dtype=np.float32), "affine")
        print(json.loads(t.descriptor.to_json())["quantization"]["scale"])
        """,
        tmp_path,
    )
    assert float(out) > 0


def test_gguf_float_metadata_survives_a_comma_locale(locale_env, tmp_path):
    pytest.importorskip("gguf")  # writes the input and reads the output
    out = run_in_locale(
        locale_env,
        """
        import numpy as np, gguf, hurray
        w = gguf.GGUFWriter("a.gguf", "llama")
        w.add_array("x.farr", [1.5, 2.25, -0.125])
        w.add_float32("x.f", 0.5)
        w.add_tensor("t", np.ones(4, np.float32))
        w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
        hurray.convert("a.gguf", "a.hurray")
        with hurray.open("a.hurray") as f:
            print("R", f.metadata["gguf.x.farr"])
        hurray.convert("a.hurray", "b.gguf")
        r = gguf.GGUFReader("b.gguf")
        farr = r.fields["x.farr"]
        print("R", [float(farr.parts[i][0]) for i in farr.data])
        print("R", float(r.fields["x.f"].parts[-1][0]))
        """,
        tmp_path,
    )
    results = [line[2:] for line in out.splitlines() if line.startswith("R ")]
    assert results == ["[1.5, 2.25, -0.125]", "[1.5, 2.25, -0.125]", "0.5"]


def test_float_metadata_to_safetensors_under_a_comma_locale(locale_env, tmp_path):
    out = run_in_locale(
        locale_env,
        """
        import json, struct, numpy as np, hurray
        hurray.save("a.hurray", {"w": np.ones(2, np.float32)}, {"safetensors.lr": 0.001})
        hurray.convert("a.hurray", "a.safetensors")
        raw = open("a.safetensors", "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        print(json.loads(raw[8 : 8 + n])["__metadata__"]["lr"])
        """,
        tmp_path,
    )
    assert out.splitlines()[-1] == "0.001"
