"""What the sandbox shows, hides and passes on, for every backend (bubblewrap, Landlock): one
policy, two ways of applying it (``_sandbox`` for bwrap's mounts, ``_landlock`` for Landlock's
rules). See ``docs/sandbox.md`` and issue 39.

- The file system stays readable (the user's toolchain in ``$HOME``: pyenv, nvm, rustup / cargo,
  uv, pipx, conda, ``~/.local``; all read-only), except the **secrets** (:data:`HOME_SECRETS`,
  :data:`ROOT_SECRETS`; ``--deny-read`` adds, ``--allow-read`` of the very path lifts) and the
  **hidden** folders (:func:`hidden_dirs`: ``/tmp``, ``/var/tmp``, ``/run``: other users'
  sockets and files), in which only the **toolchain** is shown (:func:`toolchain`: the
  interpreter running kimik3, its virtual environment, ``sys.path``, the ``PATH`` entries and
  the preloaded libraries that lie there).
- The environment passes, but for the variables that hold credentials (:func:`credential_env`):
  kimik3's own API keys, and names such as ``*_API_KEY``, ``*_TOKEN``, ``*SECRET*``,
  ``*PASSWORD*``; ``--allow-env NAME`` passes one.
"""

from __future__ import annotations

import glob
import os
import re
import sys
from collections.abc import Iterable, Mapping

__all__ = ["HOME_SECRETS", "ROOT_SECRETS", "credential_env", "hidden_dirs", "preloads", "scrub_env", "secrets",
           "toolchain"]

HOME_SECRETS: tuple[str, ...] = (
    # keys and cloud / cluster credentials
    ".ssh", ".gnupg", ".aws", ".azure", ".config/gcloud", ".kube", ".docker", ".oci", ".config/doctl",
    ".terraform.d", ".vault-token", ".s3cfg", ".boto", ".config/rclone", ".config/op", ".fly",
    # tokens of package registries, forges and model hubs
    ".netrc", ".git-credentials", ".config/git/credentials", ".pypirc", ".npmrc", ".yarnrc", ".yarnrc.yml",
    ".config/gh", ".config/hub", ".config/glab-cli", ".cargo/credentials", ".cargo/credentials.toml",
    ".gem/credentials", ".m2/settings-security.xml", ".gradle/gradle.properties", ".huggingface",
    ".cache/huggingface/token", ".config/huggingface", ".kimik3", ".codex", ".claude", ".claude.json",
    # browser profiles, password stores and keyrings
    ".mozilla", ".config/google-chrome", ".config/chromium", ".config/BraveSoftware", ".config/microsoft-edge",
    ".config/vivaldi", ".config/opera", "snap/firefox", "snap/chromium", ".var/app", ".password-store",
    ".local/share/keyrings", ".local/share/kwalletd", ".kde/share/apps/kwallet", ".pki", ".config/Bitwarden",
    ".config/KeePassXC", ".config/1Password",
    # shell and REPL histories
    ".bash_history", ".zsh_history", ".zhistory", ".histfile", ".sh_history", ".local/share/fish/fish_history",
    ".python_history", ".node_repl_history", ".psql_history", ".mysql_history", ".sqlite_history",
    ".rediscli_history", ".irb_history", ".lesshst", ".viminfo", ".local/state/nvim/shada",
)
"""Credential locations under ``$HOME`` never readable inside the sandbox (issue 39; Anthropic's
sandbox-runtime and Codex keep similar lists). A folder is shown empty, a file as ``/dev/null``
under bwrap; under Landlock reading them is refused (their names stay listable)."""

ROOT_SECRETS: tuple[str, ...] = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
                                 "/etc/ssh/ssh_host_*_key", "/etc/sudoers", "/etc/sudoers.d/*")
"""Files only root may read (it owns them, so dropping capabilities does not hide them)."""

_CREDENTIAL_NAMES = frozenset({"KIMIK3_API_KEY", "MOONSHOT_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY",
                               "GITHUB_TOKEN", "GH_TOKEN", "HF_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                               "AWS_SESSION_TOKEN", "GOOGLE_APPLICATION_CREDENTIALS", "AZURE_CLIENT_SECRET",
                               "NPM_TOKEN", "PYPI_TOKEN", "TWINE_PASSWORD", "SSH_AUTH_SOCK", "GPG_AGENT_INFO",
                               "VAULT_TOKEN", "DOCKER_AUTH_CONFIG", "DATABASE_URL"})
_CREDENTIAL_PATTERN = re.compile(r"(^|_)(API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIALS?|"
                                 r"PRIVATE_KEY|ACCESS_KEY|AUTH)($|_)|_KEY$|SECRET|PASSWORD", re.IGNORECASE)


def credential_env(name: str) -> bool:
    """Whether the environment variable ``name`` holds a credential: one of kimik3's and the usual
    providers' (``KIMIK3_API_KEY``, ``MOONSHOT_API_KEY``, ``OPENAI_API_KEY``, ``GITHUB_TOKEN``, the
    ssh / gpg agents' sockets, ...) or a name with ``API_KEY``, ``TOKEN``, ``SECRET``, ``PASSWORD``,
    ``CREDENTIALS``, ``PRIVATE_KEY``, ``ACCESS_KEY`` or ``AUTH`` as a word (issue 39)."""
    return name.upper() in _CREDENTIAL_NAMES or bool(_CREDENTIAL_PATTERN.search(name))


def scrub_env(env: Mapping[str, str], allow: Iterable[str] = ()) -> dict[str, str]:
    """``env`` without the credentials (:func:`credential_env`) but those named in ``allow``: the
    environment of every command a sandbox runs (``bash``, background processes, eval's ``setup``
    and ``check``), whatever the backend."""
    allowed = set(allow)
    return {k: v for k, v in env.items() if k in allowed or not credential_env(k)}


def preloads(env: Mapping[str, str]) -> list[str]:
    """The existing files ``env``'s ``LD_PRELOAD`` names by absolute path (hidden: ld.so would err)."""
    return [os.path.abspath(p) for p in env.get("LD_PRELOAD", "").replace(":", " ").split()
            if os.path.isabs(p) and os.path.isfile(p)]


def hidden_dirs() -> list[str]:
    """The folders the sandbox hides (bwrap: a private tmpfs each; Landlock: not readable): ``/tmp``,
    ``/var/tmp`` and ``/run`` (other users' files and sockets: docker, dbus, X11), where they are
    real folders."""
    return ["/tmp", *(d for d in ("/var/tmp", "/run") if os.path.isdir(d) and not os.path.islink(d))]


def home() -> str:
    """The user's home folder, resolved ("" when there is none or it is ``/``)."""
    h = os.path.realpath(os.path.expanduser("~"))
    return h if h != "/" and os.path.isdir(h) else ""


def secrets(deny: Iterable[str] = (), allow: Iterable[str] = ()) -> list[str]:
    """The credential locations that exist now, resolved: :data:`HOME_SECRETS` in ``$HOME``,
    :data:`ROOT_SECRETS`, and ``deny``; minus each one ``allow`` names exactly (a path allowed
    inside one is shown on top of it; a folder allowed that holds one does not lift it).

    Also the resolved target of a secret that is a symlink (``~/.ssh -> /data/keys``): both stay
    out of reach."""
    h = home()
    names = [os.path.join(h, s) for s in HOME_SECRETS] if h else []
    found: list[str] = []
    for pattern in (*names, *ROOT_SECRETS, *(os.path.abspath(os.path.expanduser(d)) for d in deny)):
        for p in sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]:
            if os.path.lexists(p):
                found += [os.path.abspath(p), os.path.realpath(p)]
    lifted = {os.path.realpath(os.path.expanduser(a)) for a in allow}
    return [p for p in dict.fromkeys(found) if p not in lifted and os.path.exists(p)]


def toolchain(env: Mapping[str, str]) -> list[str]:
    """What commands need to run the user's toolchain as outside: the interpreter running kimik3
    (``sys.executable``, resolved and not), its environment (``sys.prefix``, ``sys.base_prefix``),
    the folders of ``sys.path``, the absolute ``PATH`` entries of ``env`` and its preloaded
    libraries; existing paths, each as given and resolved (a venv symlinked from elsewhere). The
    sandbox shows these read-only where they lie in a hidden folder (a repository and its venv
    under ``/tmp``); never a secret (:func:`secrets` is applied after)."""
    exe = sys.executable
    paths = [os.path.dirname(exe), os.path.dirname(os.path.realpath(exe)), sys.prefix, sys.exec_prefix,
             sys.base_prefix, *(p for p in sys.path if p), *(p for p in env.get("PATH", "").split(":") if p),
             *preloads(env)]
    out: list[str] = []
    for p in paths:
        if os.path.isabs(p) and os.path.exists(p):
            out += [os.path.normpath(p), os.path.realpath(p)]
    return list(dict.fromkeys(out))
