"""CLI commands fed what a careless or hostile user gives them: corrupt state files, the wrong
URL, nonsense numbers, manifests of any shape. Each is a one-line `error:` and an exit code,
never a traceback (real files, real HTTP servers; nothing of the command is stubbed)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from lorafleet_cli.main import main
from lorafleet_loadtest.probe.markers import markers_from_manifests, parse_canary_markers


class _Html(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html><body>not metrics {{{</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def html_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Html)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def test_usage_with_a_corrupt_up_json_fails_clearly(tmp_path: Path, capsys) -> None:
    (tmp_path / "up.json").write_text('{"gateway": {"internalUrl": ')
    assert main(["usage", "--state-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: "), err
    assert "up.json is unreadable" in err, err


def test_usage_pointed_at_something_that_is_not_metrics_fails_clearly(
    html_server: str, capsys
) -> None:
    assert main(["usage", "--gateway-metrics", html_server]) == 1
    err = capsys.readouterr().err
    assert "does not serve Prometheus metrics" in err, err


@pytest.mark.parametrize(
    "argv",
    [
        ["--interval", "nan"],
        ["--interval", "inf"],
        ["--timeout", "0"],
        ["--max-tokens", "0"],
        ["--max-error-rate", "1.5"],
    ],
)
def test_canary_refuses_nonsense_numbers(tmp_path: Path, argv, capsys) -> None:
    key = tmp_path / "key"
    key.write_text("sk-test\n")
    rc = main(["canary", "--key-file", str(key), "--markers", "a/b:c=M", *argv])
    assert rc == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_canary_with_a_missing_manifests_folder_is_a_usage_error(tmp_path: Path, capsys) -> None:
    key = tmp_path / "key"
    key.write_text("sk-test\n")
    assert main(["canary", "--key-file", str(key), "--manifests", str(tmp_path / "nope")]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_markers_survive_manifests_of_any_shape(tmp_path: Path) -> None:
    docs = [
        {"kind": "AdapterAlias", "metadata": ["not", "a", "map"], "spec": "nope"},
        {"kind": "LoRAAdapter", "metadata": {"name": "x", "annotations": "nope"}, "spec": 3},
        {"kind": "AdapterAlias", "metadata": {"name": "ok"}, "spec": {"model": 5}},
        {
            "kind": "LoRAAdapter",
            "metadata": {"name": "good", "annotations": {"lorafleet.dev/canary-marker": "G-1"}},
        },
        {
            "kind": "AdapterAlias",
            "metadata": {"name": "g"},
            "spec": {"model": "a/g:p", "adapter": "good"},
        },
    ]
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(docs))
    (tmp_path / "broken.yaml").write_text("kind: [unclosed\n")
    (tmp_path / ".lorafleet").mkdir()
    (tmp_path / ".lorafleet" / "alias-status.json").write_text('{"g": "not a status"}')
    assert markers_from_manifests(tmp_path) == {"a/g:p": "G-1"}


@pytest.mark.parametrize(
    ("markers", "error"),
    [
        (["a/b:c"], "wants ALIAS=MARKER or ALIAS@VERSION=MARKER, got 'a/b:c'"),
        (["a/b:c@v1="], "wants ALIAS=MARKER or ALIAS@VERSION=MARKER, got 'a/b:c@v1='"),
        (["a/b:c@=M"], "wants an alias and an adapter name"),
        (["@v1=M"], "wants an alias and an adapter name"),
        (["a/b:c@V1_x=M"], "wants an alias and an adapter name"),
        (["a/b:c=M", "a/b:c@v1=M"], "a/b:c already has one marker for any version"),
        (["a/b:c@v1=M", "a/b:c=M"], "a/b:c already has per-version markers"),
        (["a/b:c@v1=M", "a/b:c@v1=N"], "a/b:c@v1 has two markers"),
    ],
)
def test_canary_refuses_malformed_per_version_markers(tmp_path: Path, markers, error, capsys):
    key = tmp_path / "key"
    key.write_text("sk-test\n")
    assert main(["canary", "--key-file", str(key), "--markers", *markers]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --markers "), err
    assert error in err, err


def test_canary_reads_per_version_markers_beside_plain_ones() -> None:
    assert parse_canary_markers(["a/b:c=M=1", "x/y:z@v1=A", "x/y:z@v2.0=B", "x/y:z@v1=A"]) == {
        "a/b:c": "M=1",
        "x/y:z": {"v1": "A", "v2.0": "B"},
    }
