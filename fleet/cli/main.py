"""Parsing ``kubectl fleet`` arguments and running the command; errors as one line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn

from fleet import deploy, helm, onboarding
from fleet.cli import commands, completion, dashboard, kinds, output
from fleet.cli.config import CliError, Target, kubeconfig_path, member_kubeconfigs
from fleet.clients import errors
from fleet.clients.kube import Kube, KubeconfigError

DESCRIPTION = """\
kubectl fleet: the multi-cluster view of the hub, and member onboarding.

Every command reads the hub; rows come from what the agents report in their Works, so they
show each member's truth even when the member is out of reach. Installed as kubectl-fleet,
kubectl finds it as a plugin (kubectl fleet ...); python -m fleet.cli works too.
"""

EPILOG = """\
commands:
  get KIND [NAME] [-M]     list jobs (pytorchjob|ptj, tfjob, mpijob,
                           mpijob.batch.tensorstack.dev|mj, tensorflowtrainingjob|tfj),
                           pods -M, queue (waiting jobs and positions), clusters, works
  describe JOB             placement per member, replicas and where each runs, conditions, events
  why JOB                  one line: where the job runs, or why it waits (queue, position, reason)
  logs JOB [-r ROLE-INDEX] [-f]  a replica's log, read from the member that runs it
  top clusters             free/total GPUs, cpu, memory per member, and heartbeat age
  dashboard [--port N]     the leading hub's web page (members, queues, jobs) on this
                           machine: forwards a local port to it and prints the URL
  join NAME --member-kubeconfig FILE [--helm]  register a member and install its agent
                           (with --helm, as a release of the fleet-agent chart)
  unjoin NAME [--member-kubeconfig FILE] remove it
  completion bash|zsh      a shell completion script

JOB is KIND/NAME, KIND NAME, or NAME alone (looked for among the five job kinds).
Members (for logs): --member-kubeconfig NAME=FILE, else the context named like the member in
the kubeconfig.

examples:
  kubectl fleet get ptj -A -o wide
  kubectl fleet get pytorchjob train -M
  kubectl fleet get queue
  kubectl fleet why train
  kubectl fleet logs pytorchjob/train -r worker-1 -f
  kubectl fleet top clusters --context hub
  kubectl fleet dashboard --port 8095
"""


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting: one line, as kubectl."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{message} (see '{self.prog} --help')")


def _globals(suppress: bool) -> Parser:
    """Flags accepted before or after the command, as kubectl's are. On subcommands they
    default to SUPPRESS so that they never overwrite a value given before the command."""
    default = argparse.SUPPRESS if suppress else None
    parent = Parser(add_help=False)
    parent.add_argument("--kubeconfig", default=default,
                        help="the hub's kubeconfig (default $KUBECONFIG, else ~/.kube/config)")
    parent.add_argument("--context", default=default, help="the kubeconfig context to use")
    parent.add_argument("-n", "--namespace", default=default,
                        help="namespace (default: the context's, else default)")
    parent.add_argument("-A", "--all-namespaces", action="store_true",
                        default=argparse.SUPPRESS if suppress else False,
                        help="every namespace")
    parent.add_argument("-l", "--selector", default=default,
                        help="label selector (key=value,key!=value,...)")
    parent.add_argument("-o", "--output", choices=output.FORMATS, default=default,
                        help="wide|json|yaml|name")
    return parent


def build_parser() -> Parser:
    parser = Parser(prog="kubectl fleet", description=DESCRIPTION, epilog=EPILOG,
                    formatter_class=argparse.RawDescriptionHelpFormatter,
                    parents=[_globals(False)])
    common = [_globals(True)]
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True

    get = sub.add_parser("get", parents=common, help="list jobs, pods, queues, clusters, works",
                         description="List jobs (one row each, or one per member with -M), "
                                     "pods (-M), queues with their waiting jobs in order, "
                                     "member clusters or Works.")
    get.add_argument("kind", help=f"one of {', '.join(kinds.PRIMARY)} (or a short name)")
    get.add_argument("name", nargs="?")
    get.add_argument("-M", "--multi-cluster", action="store_true",
                     help="one row per member cluster")

    for name, text in (("describe", "placement, replicas and where each runs, conditions, "
                                    "events and why the job waits"),
                       ("why", "where the job runs, or why it waits (queue, position, reason)")):
        command = sub.add_parser(name, parents=common, help=text, description=text)
        command.add_argument("job", nargs="+", metavar="JOB",
                             help="KIND/NAME, KIND NAME or NAME")

    logs = sub.add_parser("logs", parents=common, help="a replica's log, from its member",
                          description="Print a replica's log, read from the member that runs "
                                      "it (credentials: --member-kubeconfig NAME=FILE, else "
                                      "the kubeconfig context named like the member).")
    logs.add_argument("job", nargs="+", metavar="JOB", help="KIND/NAME, KIND NAME or NAME")
    logs.add_argument("-r", "--replica", metavar="ROLE-INDEX",
                      help="which replica, e.g. worker-1 (default: the leader)")
    logs.add_argument("-c", "--container", help="the container (default: the pod's only one)")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    logs.add_argument("--tail", type=int, default=None, help="only the last N lines")
    logs.add_argument("--member-kubeconfig", action="append", default=[],
                      metavar="NAME=FILE", help="a member's kubeconfig (repeatable)")

    top = sub.add_parser("top", parents=common, help="resource use of member clusters",
                         description="Free and total GPUs, cpu and memory of every member, "
                                     "and its heartbeat age.")
    top.add_argument("what", choices=["clusters", "cluster", "membercluster", "mc"])

    board = sub.add_parser(
        "dashboard", parents=common, help="open the leading hub's web page",
        description="Forward a local port to the leading hub's dashboard (through the API "
                    "server's pods/portforward, to whichever hub Pod leads when a connection "
                    "opens) and print its URL; for a hub running as a process on this host, "
                    "print its URL. Read-only: the page changes nothing.")
    board.add_argument("--port", type=int, default=8095,
                       help="the local port (0: any free one; default 8095)")
    board.add_argument("--address", default="127.0.0.1",
                       help="the local address to listen on (default 127.0.0.1; the page "
                            "answers only to loopback host names)")

    join = sub.add_parser("join", parents=common, help="register a member cluster",
                          description="Register the member on the hub (namespace, "
                                      "MemberCluster, a scoped token) and install its agent.")
    join.add_argument("name")
    join.add_argument("--member-kubeconfig", required=True)
    join.add_argument("--agent-kubeconfig-out", default=None,
                      help="also write the agent's hub kubeconfig to this file")
    join.add_argument("--agent-image", default=deploy.IMAGE)
    join.add_argument("--hub-server", default=None, metavar="URL",
                      help="the hub's API server as the member's agents reach it (default: the "
                           "server of --kubeconfig)")
    join.add_argument("--agent-node-selector", default="",
                      help="key=value[,key=value]: nodes the agent DaemonSet runs on")
    join.add_argument("--no-agent", action="store_true",
                      help="register only; run the agent yourself")
    join.add_argument("--helm", action="store_true",
                      help="install the agent as the Helm release fleet-agent (the fleet-agent "
                           "chart) instead of applying its manifests; needs helm")
    join.add_argument("--helm-chart", default=None, metavar="CHART",
                      help="with --helm: a chart directory, .tgz or oci:// reference "
                           "(default: deploy/helm/fleet-agent of this source tree)")
    join.add_argument("--helm-binary", default=None, metavar="PATH",
                      help="with --helm: the helm to run (default: $FLEET_HELM, else helm)")

    unjoin = sub.add_parser("unjoin", parents=common, help="remove a member cluster",
                            description="Remove the member from the hub (and its agent).")
    unjoin.add_argument("name")
    unjoin.add_argument("--member-kubeconfig", default=None,
                        help="also remove the agent from the member")
    unjoin.add_argument("--helm", action="store_true",
                        help="the agent is the Helm release fleet-agent: helm uninstall it")
    unjoin.add_argument("--helm-binary", default=None, metavar="PATH",
                        help="with --helm: the helm to run (default: $FLEET_HELM, else helm)")

    shell = sub.add_parser("completion", help="print a shell completion script",
                           description="Print a completion script: "
                                       "source <(kubectl fleet completion bash)")
    shell.add_argument("shell", choices=["bash", "zsh"])
    return parser


def run(args: argparse.Namespace) -> int:
    if args.command == "completion":
        print(completion.script(args.shell))
        return 0
    fmt = getattr(args, "output", None) or ""
    target = Target(kubeconfig=kubeconfig_path(getattr(args, "kubeconfig", None)),
                    context=getattr(args, "context", None),
                    namespace_flag=getattr(args, "namespace", None),
                    all_namespaces=bool(getattr(args, "all_namespaces", False)))
    selector = getattr(args, "selector", None)
    now = datetime.now(UTC)
    if args.command == "get":
        print(get(target, args, selector, fmt, now))
    elif args.command == "describe":
        print(commands.describe(target, args.job, now))
    elif args.command == "why":
        print(commands.why(target, args.job, now))
    elif args.command == "logs":
        target.members = member_kubeconfigs(args.member_kubeconfig)
        commands.logs(target, args.job, args.replica, args.container, args.follow, args.tail)
    elif args.command == "top":
        print(commands.top_clusters(target, now))
    elif args.command == "dashboard":
        if not 0 <= args.port <= 65535:
            raise CliError(f"--port: expected 0..65535, not {args.port}")
        dashboard.run(target.hub(), args.address, args.port,
                      lambda line: print(line, flush=True),
                      lambda line: print(f"warning: {line}", file=sys.stderr, flush=True))
    elif args.command == "join":
        join(target, args)
    elif args.command == "unjoin":
        if args.member_kubeconfig and args.helm:
            _member(args.member_kubeconfig)
            try:
                helm.uninstall(helm.binary(args.helm_binary), Path(args.member_kubeconfig),
                               helm.AGENT_RELEASE)
            except helm.HelmError as exc:
                raise CliError(str(exc)) from None
        elif args.member_kubeconfig:
            onboarding.uninstall_agent(_member(args.member_kubeconfig))
        onboarding.unjoin(target.hub(), args.name)
        print(f"member {args.name} removed")
    return 0


def get(target: Target, args: argparse.Namespace, selector: str | None, fmt: str,
        now: datetime) -> str:
    kind = kinds.check(args.kind)
    if kind in kinds.PODS:
        if args.name:
            raise CliError("get pod -M lists every pod; filter with -n or -l")
        return commands.get_pods(target, selector, fmt, now)
    if kind in kinds.QUEUES:
        return commands.get_queues(target, args.name, selector, fmt)
    if kind in kinds.CLUSTERS:
        return commands.get_clusters(target, args.name, selector, fmt, now)
    if kind in kinds.WORKS:
        return commands.get_works(target, args.name, selector, fmt, now)
    return commands.get_jobs(target, kinds.job_resource(kind), args.name, selector, fmt,
                             args.multi_cluster, now)


def join(target: Target, args: argparse.Namespace) -> None:
    member = _member(args.member_kubeconfig)
    with_helm = args.helm and not args.no_agent
    if with_helm:  # before anything changes on the hub: a missing helm is the user's to fix
        try:
            helm_binary = helm.binary(args.helm_binary)
            chart = helm.chart_path(args.helm_chart, helm.AGENT_CHART)
        except helm.HelmError as exc:
            raise CliError(str(exc)) from None
    hub_kubeconfig = Path(target.kubeconfig.split(os.pathsep)[0])
    if args.hub_server and not args.hub_server.startswith("https://"):
        raise CliError(f"--hub-server: expected an https:// URL, not {args.hub_server!r}")
    text = onboarding.join(target.hub(), member, args.name, hub_kubeconfig=hub_kubeconfig)
    if args.hub_server:
        text = onboarding.with_server(text, args.hub_server)
    if args.agent_kubeconfig_out:
        out = Path(args.agent_kubeconfig_out)
        out.write_text(text)
        out.chmod(0o600)
    if not args.no_agent:
        try:
            selector = dict(kv.split("=", 1) for kv in args.agent_node_selector.split(",") if kv)
        except ValueError:
            raise CliError("--agent-node-selector: expected key=value[,key=value]") from None
        if with_helm:
            values = helm.agent_values(args.name, text, args.agent_image, selector or None)
            try:
                helm.upgrade_install(helm_binary, Path(args.member_kubeconfig),
                                     helm.AGENT_RELEASE, chart, values)
            except helm.HelmError as exc:
                raise CliError(f"member {args.name} joined, but its agent was not installed: "
                               f"{exc}") from None
        else:
            onboarding.install_agent(member, args.name, text, image=args.agent_image,
                                     node_selector=selector or None)
    how = f" (Helm release {deploy.NAMESPACE}/{helm.AGENT_RELEASE})" if with_helm else ""
    print(f"member {args.name} joined" + ("" if args.no_agent else
                                          f"; agent DaemonSet {deploy.NAMESPACE}/fleet-agent "
                                          f"installed on it{how}"))


def _member(path: str) -> Kube:
    if not Path(path).exists():
        raise CliError(f"member kubeconfig {path} does not exist")
    try:
        return Kube(path)
    except KubeconfigError as exc:
        raise CliError(str(exc)) from None


def main(argv: Sequence[str] | None = None) -> int:
    """The entry point: 0 on success; on any failure one ``error: ...`` line on stderr and 1,
    never a traceback."""
    try:
        args = build_parser().parse_args(argv)
        return run(args)
    except CliError as exc:
        return _fail(str(exc))
    except errors.ApiError as exc:
        return _fail(_api_message(exc))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # | head closed the pipe: not an error
        sys.stderr.close()
        return 0
    except Exception as exc:  # the promise is one line, whatever went wrong
        return _fail(f"{type(exc).__name__}: {exc}")


def _api_message(exc: errors.ApiError) -> str:
    if isinstance(exc, errors.Unreachable) and exc.status == 0:
        return f"the API server did not answer: {exc.message}"
    return f"from server ({exc.reason or exc.status}): {exc.message}"


def _fail(message: str) -> int:
    print(f"error: {output.one_line(message)}", file=sys.stderr)
    return 1
