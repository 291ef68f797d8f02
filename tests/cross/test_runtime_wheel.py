"""The runtime-only wheel (tessera/cross/runtime_wheel.py): pip installs it, and a Python that
sees only it and numpy (no compiler, no onnx, no llvmlite) loads an artifact built here and runs
it, matching ONNX Runtime; compiler modules are not there to import."""

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

import tessera
from tessera.cross.runtime_wheel import build_runtime_wheel, runtime_sources
from tessera.cross.testing import conv_dense_model
from tessera.frontend import from_onnx
from tessera.frontend.testing import run_ort

BOARD = """
import json, sys
import numpy as np
import tessera.runtime as rt

lib, x_path, out_path = sys.argv[1:4]
m = rt.GraphModule(rt.load_module(lib)["default"](rt.cpu(0)))
m.set_input("x", np.load(x_path))
m.run()
np.save(out_path, m.get_output(1).numpy())
roots = ("tessera", "onnx", "llvmlite")
loaded = sorted(name for name in sys.modules if name.split(".")[0] in roots)
try:
    import tessera.driver  # noqa: F401
    compiler = True
except ImportError:
    compiler = False
print(json.dumps({"modules": loaded, "compiler": compiler, "file": rt.__file__}))
"""


def test_wheel_runs_a_model_with_numpy_alone(tmp_path):
    wheel = build_runtime_wheel(tmp_path / "dist")
    assert build_runtime_wheel(tmp_path / "again").read_bytes() == wheel.read_bytes()
    names = zipfile.ZipFile(wheel).namelist()
    assert "tessera/runtime/native/tessera_rt.c" in names and "tessera/driver.py" not in names
    assert len([n for n in names if n.startswith("tessera/")]) == len(runtime_sources())
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet"]
    subprocess.run([*pip, "--target", str(site), str(wheel)], check=True)

    model, feeds = conv_dense_model()
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target="llvm", params=params).export_library(tmp_path / "m.so")
    np.save(tmp_path / "x.npy", feeds["x"])
    numpy_site = Path(np.__file__).resolve().parents[1]
    # -S: no site-packages processing, so the editable install of the full tessera is not seen
    env = {"PYTHONPATH": f"{site}:{numpy_site}", "PATH": "/usr/bin:/bin",
           "TESSERA_CACHE_DIR": str(tmp_path / "cache")}  # fmt: skip
    script = tmp_path / "board.py"
    script.write_text(BOARD)
    out = subprocess.run(
        [sys.executable, "-S", str(script), str(lib), str(tmp_path / "x.npy"), str(tmp_path / "y")],
        check=True, capture_output=True, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["file"].startswith(str(site))
    assert not report["compiler"]
    assert all(m == "tessera" or m.startswith(("tessera.runtime", "tessera.logging"))
               for m in report["modules"]), report["modules"]  # fmt: skip
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), run_ort(model, feeds)[1], atol=1e-5)
