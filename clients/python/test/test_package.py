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


def test_readme_venv_steps_with_another_python_first_on_path(tmp_path):
    """README's venv commands, run as written (less apt-get) in a shell
    whose PATH finds another python3 first (pyenv's 3.11, which has no
    wheel: "invalid command 'bdist_wheel'"), install the client."""
    readme = (PACKAGE / "README.md").read_text()
    block = readme.split("**Into a virtual environment**", 1)[1].split("```sh\n", 1)[1]
    commands = [c for c in block.split("```", 1)[0].splitlines()
                if c.strip() and not c.startswith("apt-get")]
    src = tmp_path / "src" / "clients" / "python"
    shutil.copytree(PACKAGE, src, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", ".mypy_cache"))
    script = "set -e\n" + "\n".join(c.split("#")[0].replace("/opt/app/venv", str(tmp_path / "venv"))
                                    for c in commands)
    other = [p for p in ("/root/.pyenv/versions/3.11.7/bin",) if Path(p, "python3").exists()]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = ":".join(other + [env.get("PATH", "/usr/bin:/bin")])
    run = subprocess.run(["bash", "-c", script], cwd=tmp_path / "src", capture_output=True,
                         text=True, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    probe = subprocess.run([str(tmp_path / "venv/bin/python"), "-c", "import tokenbucket"],
                           cwd=tmp_path, capture_output=True, text=True, env=env)
    assert probe.returncode == 0, probe.stderr
