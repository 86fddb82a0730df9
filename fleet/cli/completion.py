"""Static shell completion: commands, kinds and flags (no server round trips).

``kubectl fleet completion bash|zsh`` prints a script completing ``kubectl-fleet``. kubectl
itself (1.26+) completes ``kubectl fleet <TAB>`` by running ``kubectl_complete-fleet ARGS...``
found on the PATH (installed with the package): it prints the candidates for the last
argument, one a line, then cobra's directive line (``:4``, no file completion).
"""

from __future__ import annotations

from fleet.cli import kinds

COMMANDS = ("get", "describe", "why", "logs", "top", "dashboard", "join", "unjoin",
            "completion")
FLAGS = ("--kubeconfig", "--context", "-n", "--namespace", "-A", "--all-namespaces", "-l",
         "--selector", "-o", "--output", "-M", "-r", "-f", "--member-kubeconfig", "--port",
         "--address", "--help")

_BASH = """\
# kubectl fleet completion for bash: source <(kubectl fleet completion bash)
_kubectl_fleet() {
    local cur prev words cword
    cur="${COMP_WORDS[COMP_CWORD]}"
    prev="${COMP_WORDS[COMP_CWORD-1]}"
    local command="" i
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${COMP_WORDS[i]}" in
            -*) ;;
            *) if [[ -z "$command" ]]; then command="${COMP_WORDS[i]}"; fi ;;
        esac
    done
    case "$prev" in
        -o|--output) COMPREPLY=($(compgen -W "wide json yaml name" -- "$cur")); return ;;
        --kubeconfig|--member-kubeconfig) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "@FLAGS@" -- "$cur")); return
    fi
    case "$command" in
        "") COMPREPLY=($(compgen -W "@COMMANDS@" -- "$cur")) ;;
        get) COMPREPLY=($(compgen -W "@KINDS@" -- "$cur")) ;;
        top) COMPREPLY=($(compgen -W "clusters" -- "$cur")) ;;
        completion) COMPREPLY=($(compgen -W "bash zsh" -- "$cur")) ;;
    esac
}
complete -F _kubectl_fleet kubectl-fleet
# `kubectl fleet <TAB>` needs no script: kubectl 1.26+ asks kubectl_complete-fleet.
"""

_ZSH = """\
#compdef kubectl-fleet
# kubectl fleet completion for zsh: source <(kubectl fleet completion zsh)
_kubectl_fleet() {
    local -a commands kinds
    commands=(@COMMANDS@)
    kinds=(@KINDS@)
    if (( CURRENT == 2 )); then
        _describe 'command' commands
    elif [[ ${words[2]} == get && CURRENT == 3 ]]; then
        _describe 'kind' kinds
    elif [[ ${words[2]} == top && CURRENT == 3 ]]; then
        compadd clusters
    elif [[ ${words[2]} == completion ]]; then
        compadd bash zsh
    else
        compadd -- @FLAGS@
    fi
}
compdef _kubectl_fleet kubectl-fleet
"""


def script(shell: str) -> str:
    text = _BASH if shell == "bash" else _ZSH
    return (text.replace("@COMMANDS@", " ".join(COMMANDS))
            .replace("@KINDS@", " ".join((*kinds.PRIMARY, "ptj", "mj", "tfj", "mc")))
            .replace("@FLAGS@", " ".join(FLAGS))).rstrip("\n")


FORMATS = ("wide", "json", "yaml", "name")
NO_FILE_COMPLETION = 4  # cobra's ShellCompDirectiveNoFileComp
DEFAULT_COMPLETION = 0


def candidates(args: list[str]) -> tuple[list[str], int]:
    """Words that may complete the last of ``args`` (the words after ``fleet``), and cobra's
    directive: files are offered only after a kubeconfig flag."""
    *before, current = args or [""]
    if before and before[-1] in ("-o", "--output"):
        words: tuple[str, ...] = FORMATS
    elif before and before[-1] in ("--kubeconfig", "--member-kubeconfig"):
        return [], DEFAULT_COMPLETION
    elif current.startswith("-"):
        words = FLAGS
    else:
        positional = [w for i, w in enumerate(before) if not w.startswith("-") and not (
            i and before[i - 1] in ("-n", "--namespace", "--context", "-l", "--selector",
                                    "-o", "--output", "--kubeconfig", "-r", "--replica"))]
        if not positional:
            words = COMMANDS
        elif positional[0] == "get" and len(positional) == 1:
            words = (*kinds.PRIMARY, "ptj", "mj", "tfj", "mc")
        elif positional[0] == "top" and len(positional) == 1:
            words = ("clusters",)
        elif positional[0] == "completion" and len(positional) == 1:
            words = ("bash", "zsh")
        else:
            words = ()
    return [w for w in words if w.startswith(current)], NO_FILE_COMPLETION


def kubectl_complete() -> int:
    """``kubectl_complete-fleet``: kubectl's plugin completion protocol."""
    import sys

    words, directive = candidates(sys.argv[1:])
    for word in words:
        print(word)
    print(f":{directive}")
    return 0
