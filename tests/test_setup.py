"""Set-up on a machine where we are not root: the Makefile skips what it cannot install, with
one line, instead of stopping at a sudo password prompt."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from conftest import ROOT


def fake_tools(folder, **scripts) -> dict:
    """An environment whose PATH puts these shell scripts first."""
    for name, body in scripts.items():
        path = folder / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}"}


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_without_root_or_sudo_the_system_packages_are_skipped_with_one_line(tmp_path):
    env = fake_tools(
        tmp_path,
        id="echo 1000",
        dpkg="exit 1",
        sudo='echo "sudo: a password is required" >&2; exit 1',
    )
    done = subprocess.run(
        ["make", "-s", "system-packages"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("make: skipping system packages"), done.stdout
    assert "password" not in done.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_a_failed_install_is_one_line_and_set_up_goes_on(tmp_path):
    env = fake_tools(
        tmp_path, id="echo 0", dpkg="exit 1", **{"apt-get": "echo 'E: no network' >&2; exit 100"}
    )
    done = subprocess.run(
        ["make", "-s", "system-packages"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith("make: could not install"), done.stdout
