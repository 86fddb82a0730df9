"""``kubectl fleet`` without an API server: flags, kubeconfig choice, output formats."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from fleet.cli import commands, completion, output
from fleet.cli.config import CliError, Target, kubeconfig_path, member_kubeconfigs
from fleet.cli.main import build_parser, main

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def _kubeconfig(path: Path, namespace: str | None = None) -> Path:
    context: dict[str, str] = {"cluster": "c", "user": "u"}
    if namespace:
        context["namespace"] = namespace
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "hub",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "hub", "context": context},
                     {"name": "member1", "context": {"cluster": "c", "user": "u",
                                                     "namespace": "team"}}],
    }))
    return path


def test_flags_work_before_and_after_the_command() -> None:
    parser = build_parser()
    before = parser.parse_args(["-n", "x", "--context", "c", "get", "ptj"])
    after = parser.parse_args(["get", "ptj", "-n", "x", "--context", "c", "-o", "wide", "-M"])
    assert (before.namespace, before.context) == ("x", "c")
    assert (after.namespace, after.context, after.output, after.multi_cluster) == \
        ("x", "c", "wide", True)
    mixed = parser.parse_args(["-n", "x", "get", "ptj", "-A"])
    assert mixed.namespace == "x"
    assert mixed.all_namespaces


@pytest.mark.parametrize("argv", [
    ["get", "ptj", "--bogus"], ["get"], [], ["get", "ptj", "-o", "table"],
    ["top", "nodes"], ["completion", "fish"], ["get", "frobs"], ["why", "a", "b", "c"],
    ["logs", "ptj/x", "--member-kubeconfig", "nofile"], ["describe", "frobs", "x"],
])
def test_bad_input_prints_one_error_line_and_exits_1(
        argv: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = [*argv, "--kubeconfig", str(_kubeconfig(tmp_path / "k"))] if argv else argv
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("error: ")


def test_an_unreachable_hub_is_one_line_too(capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path) -> None:
    assert main(["get", "ptj", "--kubeconfig", str(_kubeconfig(tmp_path / "k"))]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "Traceback" not in err
    assert err.startswith("error: the API server did not answer")


def test_kubeconfig_choice(tmp_path: Path) -> None:
    a, b = _kubeconfig(tmp_path / "a"), _kubeconfig(tmp_path / "b")
    assert kubeconfig_path(str(a), {}) == str(a)
    assert kubeconfig_path(None, {"KUBECONFIG": f"{tmp_path}/missing:{a}:{b}"}) == f"{a}:{b}"
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    _kubeconfig(home / ".kube" / "config")
    assert kubeconfig_path(None, {}, home) == str(home / ".kube" / "config")
    with pytest.raises(CliError, match="no kubeconfig"):
        kubeconfig_path(None, {}, tmp_path / "nobody")
    with pytest.raises(CliError, match="does not exist"):
        kubeconfig_path(str(tmp_path / "missing"), {})


def test_namespace_comes_from_the_flag_then_the_context_then_default(tmp_path: Path) -> None:
    plain = str(_kubeconfig(tmp_path / "plain"))
    assert Target(plain).namespace() == "default"
    assert Target(plain, context="member1").namespace() == "team"
    assert Target(plain, namespace_flag="x", context="member1").namespace() == "x"
    assert Target(plain, namespace_flag="x", all_namespaces=True).namespace() is None
    assert Target(str(_kubeconfig(tmp_path / "ns", namespace="ml"))).namespace() == "ml"
    with pytest.raises(CliError, match="context 'nope' not found"):
        Target(plain, context="nope").namespace()


def test_member_credentials(tmp_path: Path) -> None:
    config = str(_kubeconfig(tmp_path / "k"))
    assert member_kubeconfigs(["m1=/a", "m2=/b=c"]) == {"m1": "/a", "m2": "/b=c"}
    with pytest.raises(CliError, match="NAME=FILE"):
        member_kubeconfigs(["m1"])
    target = Target(config)
    assert target.member("member1").host == "https://127.0.0.1:1"
    with pytest.raises(CliError, match="no credentials for member member9"):
        target.member("member9")


def test_table_and_ages() -> None:
    assert output.table(["NAME", "AGE"], []) == "No resources found."
    assert output.table(["NAME", "AGE"], [["a-long-name", "1s"], ["b", "20m"]]).splitlines() == [
        "NAME          AGE", "a-long-name   1s", "b             20m"]
    assert output.age("2026-01-01T11:59:30Z", NOW) == "30s"
    assert output.age("2026-01-01T10:00:01Z", NOW) == "119m"
    assert output.age("2025-12-30T12:00:00Z", NOW) == "2d"
    assert output.age(None, NOW) == "<unknown>"
    assert output.age("garbage", NOW) == "<unknown>"


JOB = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
       "metadata": {"name": "train", "namespace": "ml", "uid": "u1",
                    "creationTimestamp": "2026-01-01T11:58:00Z"},
       "status": {"queue": {"name": "root-ml", "position": 2, "reason": "QuotaExceeded",
                            "message": "root/ml:\n gpu 8/8"}}}


def test_machine_formats() -> None:
    assert output.objects([JOB], "name") == "pytorchjob.kubeflow.org/train"
    assert output.name_of({"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": "p"}}) == "pod/p"
    listed = json.loads(output.objects([JOB], "json"))
    assert listed["kind"] == "List"
    assert listed["items"][0]["metadata"]["name"] == "train"
    assert yaml.safe_load(output.objects([JOB], "yaml", single=True))["kind"] == "PyTorchJob"


def test_why_a_job_waits_and_where_it_runs() -> None:
    assert commands.explain(JOB, [], NOW) == (
        "pytorchjob.kubeflow.org/train waits in queue root-ml at position 2 for 2m: "
        "QuotaExceeded: root/ml: gpu 8/8")
    work = {"metadata": {"name": "w"},
            "spec": {"placement": {"cluster": "member1", "replicas": {"Master": 1, "Worker": 2}}},
            "status": {"state": "Running", "pods": [{"name": "train-master-0",
                                                      "phase": "Running"}]}}
    assert "placed on member1 (Master=1,Worker=2; Running, 1/1 pods running)" in \
        commands.explain(JOB, [work], NOW)


def test_choosing_a_replica_for_logs() -> None:
    work = {"spec": {"placement": {"cluster": "member2"}},
            "status": {"pods": [{"name": "train-evaluator-0", "role": "evaluator"},
                                {"name": "train-master-0", "role": "master"},
                                {"name": "train-worker-10", "role": "worker"}]}}
    assert commands.choose_pod([work], None) == ("member2", work["status"]["pods"][1])
    assert commands.choose_pod([work], "Worker-10")[1]["name"] == "train-worker-10"
    with pytest.raises(CliError, match="no replica 'worker-1'"):
        commands.choose_pod([work], "worker-1")


def test_queue_positions_list_leaves_only_when_every_queue_is_shown() -> None:
    queues = [{"metadata": {"name": "root"}, "spec": {"path": ["root"]},
               "status": {"pendingJobs": ["ml/a", "ml/b"]}},
              {"metadata": {"name": "root-ml"}, "spec": {"path": ["root", "ml"]},
               "status": {"pendingJobs": ["ml/a", "ml/b"]}}]
    assert commands.pending_positions(queues, only_leaves=True) == [
        ["root-ml", "1", "ml/a"], ["root-ml", "2", "ml/b"]]
    assert len(commands.pending_positions(queues[:1], only_leaves=False)) == 2


def test_completion_scripts_name_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    for shell in ("bash", "zsh"):
        assert main(["completion", shell]) == 0
        text = capsys.readouterr().out
        for command in completion.COMMANDS:
            assert command in text
        assert "@" not in text.replace("$@", "")


def test_help_documents_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    for command in completion.COMMANDS:
        assert f"\n    {command} " in text or f"\n    {command}\n" in text


def test_log_lines_stream_as_the_member_sends_them(tmp_path: Path) -> None:
    """``logs -f`` reads the member's chunked response as it comes (a real local socket)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from fleet.clients.kube import Kube

    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for line in (b"epoch 1\n", b"epoch 2\n"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    config = tmp_path / "member"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "m",
        "clusters": [{"name": "m", "cluster": {"server": f"http://127.0.0.1:{httpd.server_port}"}}],
        "users": [{"name": "m", "user": {}}],
        "contexts": [{"name": "m", "context": {"cluster": "m", "user": "m"}}]}))
    try:
        chunks = list(commands._stream(Kube(str(config)), "train-worker-0", "ml",
                                       {"follow": "true", "container": None}))
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert "".join(chunks) == "epoch 1\nepoch 2\n"
    assert seen == ["/api/v1/namespaces/ml/pods/train-worker-0/log?follow=true"]


def test_kubectl_plugin_completion() -> None:
    assert completion.candidates([""]) == (list(completion.COMMANDS), 4)
    assert completion.candidates(["g"])[0] == ["get"]
    assert "ptj" in completion.candidates(["get", ""])[0]
    assert completion.candidates(["-n", "ml", "get", "py"])[0] == ["pytorchjob"]
    assert completion.candidates(["get", "ptj", "-o", "y"])[0] == ["yaml"]
    assert completion.candidates(["top", ""])[0] == ["clusters"]
    assert completion.candidates(["--kubeconfig", ""]) == ([], 0)
    assert "--context" in completion.candidates(["get", "--c"])[0]
