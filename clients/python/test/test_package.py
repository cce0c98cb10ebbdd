"""The package as its users get it: its types check (mypy --strict, as
pyproject.toml sets it), and it installs offline from the checkout with
Debian's own tools, shipping py.typed, at the version it reports."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tokenbucket

PACKAGE = Path(__file__).resolve().parents[1]       # clients/python


def test_types_check_strict():
    try:
        import mypy  # noqa: F401
    except ImportError:
        pytest.fail("mypy is not installed (apt-get install python3-mypy)")
    run = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", os.devnull, "tokenbucket"],
                         cwd=PACKAGE, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Success: no issues found" in run.stdout


def test_installs_offline(tmp_path):
    """README's Installing, into a virtual environment: pip with Debian's
    setuptools (--no-build-isolation), never asking an index (--no-index)."""
    # a copy: a build writes build/ and tokenbucket.egg-info beside the sources
    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", ".mypy_cache"))
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, env=env)
    pip = subprocess.run([str(venv / "bin/pip"), "install", "--no-build-isolation", "--no-index",
                          str(src)], capture_output=True, text=True, env=env)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    probe = ("import importlib.metadata, pathlib, tokenbucket, tokenbucket.httpx\n"
             "where = pathlib.Path(tokenbucket.__file__).parent\n"
             "print(where)\n"
             "print(tokenbucket.__version__)\n"
             "print(importlib.metadata.version('tokenbucket'))\n"
             "print((where / 'py.typed').is_file())\n")
    run = subprocess.run([str(venv / "bin/python"), "-c", probe], cwd=tmp_path,
                         capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    where, version, installed, typed = run.stdout.split("\n")[:4]
    assert Path(where).is_relative_to(venv) and "site-packages" in where
    assert version == installed == tokenbucket.__version__
    assert typed == "True"


def test_checkout_root_imports_the_client():
    """From the checkout's root, where make leaves tokenbucket.so (the
    PostgreSQL library, which Python would take for an extension module),
    import tokenbucket and python -m tokenbucket.alerts load the client."""
    top = PACKAGE.parents[1]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = "import tokenbucket, tokenbucket.alerts; print(tokenbucket.__file__)"
    run = subprocess.run([sys.executable, "-c", probe], cwd=top, capture_output=True,
                         text=True, env=env)
    assert run.returncode == 0, run.stderr
    assert Path(run.stdout.strip()).resolve() == PACKAGE / "tokenbucket" / "__init__.py"
    run = subprocess.run([sys.executable, "-m", "tokenbucket.alerts", "--help"], cwd=top,
                         capture_output=True, text=True, env=env)
    assert run.returncode == 0 and "usage" in run.stdout, run.stderr
