# SPDX-License-Identifier: MIT
"""injector/ keeps its layers (issue 14): tests/layering.py passes on this tree and fails,
naming the file, on each kind of violation planted in a scratch tree."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("BUILD", "build")
CHECK = os.path.join(ROOT, "tests", "layering.py")


def run(root=None):
    env = dict(os.environ, BUILD=BUILD if root is None else "build")
    if root:
        env["LAYERING_ROOT"] = root
    return subprocess.run(["/usr/bin/python3", CHECK], capture_output=True, text=True, env=env)


def test_this_tree_keeps_its_layers():
    r = run()
    assert r.returncode == 0, r.stderr
    assert "OK" in r.stdout


@pytest.fixture
def scratch(tmp_path):
    """A tree of two layers (cli above model) with one object each, valid as it is."""
    def write(rel, text):
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    write("injector/model/a.h", "int model_a(void);\n")
    write("injector/model/a.c", '#include "a.h"\nint model_a(void) { return 1; }\n')
    write("injector/cli/b.c", '#include "model/a.h"\nint cli_b(void) { return model_a(); }\n')
    write("common/c.c", "int common_c(void) { return 2; }\n")

    def build():
        for src in ("injector/model/a.c", "injector/cli/b.c", "common/c.c"):
            obj = tmp_path / "build" / (src[:-2] + ".o")
            obj.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["gcc", "-c", "-I", str(tmp_path / "injector"), str(tmp_path / src),
                            "-o", str(obj)], check=True)
    build()
    return tmp_path, write, build


def test_scratch_tree_passes(scratch):
    root, _, _ = scratch
    r = run(str(root))
    assert r.returncode == 0, r.stderr


def test_include_from_a_lower_layer_fails(scratch):
    root, write, build = scratch
    write("injector/cli/b.h", "int cli_b(void);\n")
    write("injector/model/a.c", '#include "a.h"\n#include "cli/b.h"\nint model_a(void) { return 1; }\n')
    build()
    r = run(str(root))
    assert r.returncode == 1
    assert "injector/model/a.c: includes injector/cli/b.h (cli is above model)" in r.stderr


def test_call_into_a_higher_layer_fails(scratch):
    root, write, build = scratch
    # declared by hand, no include: only the objects show it
    write("injector/model/a.c", "int cli_b(void);\nint model_a(void) { return 1; }\n"
          "int model_x(void) { return cli_b(); }\n")
    build()
    r = run(str(root))
    assert r.returncode == 1
    assert "injector/model/a.c: uses cli_b of injector/cli/b.c (cli is above model)" in r.stderr


def test_cycle_inside_one_folder_fails(scratch):
    root, write, build = scratch
    write("injector/model/a.c", "int model_d(void);\nint model_a(void) { return model_d(); }\n")
    write("injector/model/d.c", "int model_a(void);\nint model_d(void) { return 0; }\n"
          "int model_e(void) { return model_a(); }\n")
    build()
    subprocess.run(["gcc", "-c", str(root / "injector/model/d.c"), "-o",
                    str(root / "build/injector/model/d.o")], check=True)
    r = run(str(root))
    assert r.returncode == 1
    assert "cycle:" in r.stderr and "injector/model/d.c" in r.stderr


def test_common_using_the_injector_fails(scratch):
    root, write, build = scratch
    write("common/c.c", "int model_a(void);\nint common_c(void) { return model_a(); }\n")
    build()
    r = run(str(root))
    assert r.returncode == 1
    assert "common/c.c: uses model_a of injector/model/a.c (model is above common)" in r.stderr
