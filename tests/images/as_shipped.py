"""Images as shipped, without Docker: each image's environment and the pods' processes.

- `shipped_venv`: a clean virtual environment installed by exactly the `pip install` line of an
  image's Dockerfile (read from the file, never copied), run in a copy of exactly what the
  build stage COPYs. Built once per hash of pyproject.toml, the install line and the
  interpreter, under .cache/as-shipped/ (git-ignored); lorafleet itself is reinstalled from the
  current sources (no dependencies) at every session, so a cached environment never runs stale
  code. `--no-cache-dir` is the one option dropped: it decides where pip keeps downloads, not
  what it installs, and keeping the cache makes the first build take about a minute.
- `pod_process`: a container of a rendered Deployment as a local process: its command and args,
  its env with `valueFrom.secretKeyRef` read from the given Secrets, its volumes as temporary
  folders (mountPath prefixes in env values point there), and its container ports mapped to
  free local ports (a pod has its own network namespace; here the operator and the gateway
  share one). The image's ENV (PATH first) comes from its Dockerfile, with the image's
  environment folder replaced by the venv; nothing of the test's own environment leaks in.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.images.dockerfile import Dockerfile, Stage

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "as-shipped"
# Dropped from the install line: where pip keeps downloads, not what it installs.
_CACHE_ONLY_OPTIONS = {"--no-cache-dir"}


@dataclass(frozen=True)
class InstallLine:
    stage: Stage
    pip: str  # the pip (or `python3 -m pip`) the image runs, as written
    args: list[str]  # after `install`

    @property
    def text(self) -> str:
        return shlex.join([self.pip, "install", *self.args])

    def requirement(self) -> str:
        """The one positional argument (what is installed): `.[extras]` or a wheel with extras."""
        (positional,) = [a for a in self.args if not a.startswith("-")]
        return positional


def install_line(dockerfile: Dockerfile) -> InstallLine:
    """The one `pip install` of the image (of any stage); AssertionError when there is none or
    several, so a changed Dockerfile fails the harness instead of being skipped."""
    found: list[InstallLine] = []
    for stage in dockerfile.stages:
        for run in stage.all("RUN"):
            for command in re.split(r"\s*&&\s*", run):
                words = shlex.split(command)
                words = [w for w in words if not re.match(r"^[A-Z_]+=", w)]  # VAR=x prefixes
                if "install" not in words:
                    continue
                at = words.index("install")
                head = words[:at]
                pip = head[-1:] == ["pip"] or head[-2:] == ["-m", "pip"]
                if pip or (bool(head) and head[-1].endswith("/pip")):
                    found.append(InstallLine(stage, " ".join(head), words[at + 1 :]))
    assert len(found) == 1, f"expected one pip install line, found {[f.text for f in found]}"
    return found[0]


def stage_sources(stage: Stage, dest: Path) -> Path:
    """Copy what the stage COPYs from the build context into dest; returns its WORKDIR there."""
    workdir = stage.last("WORKDIR") or "/"
    target = dest / workdir.lstrip("/")
    target.mkdir(parents=True, exist_ok=True)
    for copy in stage.all("COPY"):
        words = copy.split()
        if any(w.startswith("--from=") for w in words):
            continue
        *sources, to = [w for w in words if not w.startswith("--")]
        base = target / to if not to.startswith("/") else dest / to.lstrip("/")
        for src in sources:
            path = ROOT / src
            assert path.exists(), f"COPY {src}: not in the repository"
            if path.is_dir():
                into = base if len(sources) == 1 and not to.endswith("/") else base / path.name
                ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
                shutil.copytree(path, into, dirs_exist_ok=True, ignore=ignore)
            else:
                into = base / path.name if to.endswith("/") or base.is_dir() else base
                into.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, into)
    return target


def _key(line: InstallLine) -> str:
    h = hashlib.sha256()
    h.update((ROOT / "pyproject.toml").read_bytes())
    h.update(line.text.encode())
    h.update(sys.version.encode())
    return h.hexdigest()[:16]


def _pip(venv: Path, args: list[str], cwd: Path, log: Path) -> None:
    with log.open("ab") as out:
        done = subprocess.run(
            [str(venv / "bin" / "python3"), "-m", "pip", *args],
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_clean_env(),
            check=False,
        )
    assert done.returncode == 0, f"pip {shlex.join(args)} failed:\n{log.read_text()[-4000:]}"


def _clean_env() -> dict[str, str]:
    """What pip needs of this machine (its caches and index settings), not the dev venv."""
    keep = ("HOME", "PIP_", "XDG_", "LANG", "TMPDIR", "SSL_", "REQUESTS_CA", "NO_PROXY", "HTTP")
    env = {k: v for k, v in os.environ.items() if k.startswith(keep)}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    return env


_fresh: dict[str, Path] = {}


def shipped_venv(name: str, dockerfile: Dockerfile) -> Path:
    """The image's environment (see the module docstring); cached, with current sources."""
    if name in _fresh:
        return _fresh[name]
    line = install_line(dockerfile)
    assert line.requirement().startswith(".["), (
        f"{name}: the harness installs the project directory; the image installs "
        f"{line.requirement()!r}"
    )
    install_args = [a for a in line.args if a not in _CACHE_ONLY_OPTIONS]
    venv = CACHE / f"{name}-{_key(line)}"
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"as-shipped-{name}-") as tmp:
        src = stage_sources(line.stage, Path(tmp) / "context")
        log = CACHE / f"{name}.log"
        with (CACHE / f"{name}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # two sessions never build the same venv at once
            if not (venv / ".complete").exists():
                shutil.rmtree(venv, ignore_errors=True)
                log.write_text(f"# {line.text}\n")
                # The image's interpreter is python3 from the base; here the one running tests.
                subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
                _pip(venv, ["install", *install_args], src, log)
                (venv / ".complete").write_text(line.text + "\n")
            # The current sources, built as the image builds them (a wheel of the staged copy).
            _pip(venv, ["install", "--no-deps", "--force-reinstall", "."], src, log)
    _fresh[name] = venv
    return venv


# ---------------------------------------------------------------------------- pod processes


@dataclass
class Process:
    argv: list[str]
    env: dict[str, str]
    ports: dict[int, int]  # containerPort -> local port
    mounts: dict[str, Path]  # mountPath -> local folder


def _secret_value(secrets: dict[str, dict[str, Any]], name: str, key: str) -> str:
    secret = secrets[name]
    if key in secret.get("stringData", {}):
        return str(secret["stringData"][key])
    return base64.b64decode(secret["data"][key]).decode()


def _map_ports(value: str, ports: dict[int, int]) -> str:
    for inside, outside in ports.items():
        value = re.sub(rf"(?<!\d){inside}(?!\d)", str(outside), value)
    return value


def pod_process(
    pod: dict[str, Any],
    container: str,
    *,
    venv: Path,
    image_env: dict[str, str],
    image_prefix: str,
    secrets: dict[str, dict[str, Any]],
    tokens: dict[str, str],
    workdir: Path,
    free_port: Any,
) -> Process:
    """The container `container` of a pod spec as a local process (see the module docstring).

    `tokens`: projected ServiceAccount tokens by audience (what the kubelet would write)."""
    (c,) = [c for c in pod["containers"] if c["name"] == container]
    ports = {int(p["containerPort"]): free_port() for p in c.get("ports", [])}
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts: dict[str, Path] = {}
    for mount in c.get("volumeMounts", []):
        folder = workdir / "volumes" / mount["name"]
        folder.mkdir(parents=True, exist_ok=True)
        volume = volumes[mount["name"]]
        if "secret" in volume:
            name = volume["secret"]["secretName"]
            items = volume["secret"].get("items") or [
                {"key": k, "path": k}
                for k in {**secrets[name].get("data", {}), **secrets[name].get("stringData", {})}
            ]
            for item in items:
                (folder / item["path"]).write_text(_secret_value(secrets, name, item["key"]))
        elif "projected" in volume:
            for source in volume["projected"]["sources"]:
                sa = source["serviceAccountToken"]
                (folder / sa["path"]).write_text(tokens[sa["audience"]])
        else:
            raise AssertionError(f"volume kind of {volume} is not emulated")
        mounts[mount["mountPath"]] = folder
    env = {
        **image_env,
        "PATH": image_env["PATH"].replace(image_prefix, str(venv)),
        "HOME": str(workdir),
    }
    for var in c.get("env", []):
        if "valueFrom" in var:
            ref = var["valueFrom"]["secretKeyRef"]
            env[var["name"]] = _secret_value(secrets, ref["name"], ref["key"])
            continue
        value = _map_ports(str(var.get("value", "")), ports)
        for path, folder in sorted(mounts.items(), key=lambda m: -len(m[0])):
            if value.startswith(path + "/") or value == path:
                value = str(folder) + value[len(path) :]
        env[var["name"]] = value
    argv = [*c.get("command", []), *c.get("args", [])]
    return Process(argv, env, ports, mounts)
