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
- The secrets are credential files and folders in the home (by pattern: ``.env.*``, ``.*hist*``),
  where XDG variables move them, what variables name (``KUBECONFIG``, ``DOCKER_CONFIG``, ...), and
  the unix sockets that act with the user's keys or rights (ssh / gpg agents, docker, podman, the
  session bus): :func:`secrets`, resolved once per sandbox start (globs, no walk).
- The environment passes, but for the variables that hold credentials (:func:`credential_env`):
  kimik3's own API keys, names such as ``*_API_KEY``, ``*_TOKEN``, ``*SECRET*``, ``*PASSWORD*``,
  ``*_PWD``, ``*_DSN``, ``*WEBHOOK*``, and values carrying one (a URL's user information, a
  ``?api_key=`` / ``&sig=`` parameter, a known token format); ``--allow-env NAME`` passes one.
"""

from __future__ import annotations

import base64
import contextlib
import fnmatch
import functools
import glob
import os
import pwd
import re
import sys
from collections.abc import Callable, Iterable, Mapping

__all__ = ["ENV_SECRETS", "HOME_SECRETS", "NOT_SECRET_NAMES", "ROOT_SECRETS", "SECRET_NAMES", "SECRET_PLACES",
           "TOOLCHAIN_MARKS", "XDG_HOMES", "credential_env", "hidden_dirs", "homes", "preloads", "scrub_env",
           "secret_folders", "secret_patterns", "secrets", "toolchain"]

SECRET_NAMES: tuple[str, ...] = ("*hist*", "*credential*", "*token*", "*secret*", "*passw*", "*api[-_]key*", "*apikey*",
                                 "*keys.json", "*.env", "*.env.*")
"""Names that say what a file holds, whatever the program that wrote it: histories (and their
copies: ``.bash_history.bak``, ``.zsh_history~``), credentials, tokens, secrets, passwords,
API keys (``~/.config/io.datasette.llm/keys.json``, ``openai_api_key.txt``), environment files
(``prod.env``, ``.env.local``).
Matched (``*`` also matching a leading dot) in each of :data:`SECRET_PLACES`, and at the home's
top as dotfiles only (``.*hist*``: a project folder ``~/tokenizers`` stays yours)."""

NOT_SECRET_NAMES: tuple[str, ...] = ("*tokeniz*", "*tiktoken*", "*histogram*")
"""Names :data:`SECRET_NAMES` would match that are the field's ordinary words, not credentials: a
tokenizer's or tiktoken's cache (``~/.cache/tiktoken``), a histogram tool's data."""

TOOLCHAIN_MARKS: tuple[str, ...] = ("pyvenv.cfg", "conda-meta")
"""What makes a folder an environment (a virtual environment, a conda environment): a folder
:data:`SECRET_NAMES` matches that holds one is the user's toolchain (``~/.virtualenvs/tokenizers``,
pipenv's ``~/.local/share/virtualenvs/secret-santa-Ab12``), never masked for its name."""

SECRET_PLACES: tuple[str, ...] = (".*/", ".config/*/", ".local/share/*/", ".local/state/*/", ".cache/*/",
                                  ".config/*/*/")
"""The folders of the home where :data:`SECRET_NAMES` are looked for: each dotfolder, each folder
of the XDG places, and one folder deeper where applications keep their stores
(``~/.config/app/auth/credentials.json``; files only there: a folder that deep is an
application's own, such as mise's ``~/.local/share/mise/installs/detect-secrets``)."""

HOME_SECRETS: tuple[str, ...] = (
    # keys and cloud / cluster credentials
    ".ssh", ".gnupg", ".aws", ".azure", ".config/gcloud", ".kube", ".docker", ".oci", ".config/doctl",
    ".terraform.d", ".terraformrc", ".vault-token", ".s3cfg", ".boto", ".config/rclone", ".config/op", ".fly",
    ".config/sops", ".config/containers/auth.json", ".kaggle", ".config/configstore", ".config/ngrok", ".ngrok2",
    ".config/stripe", ".config/helm/registry", ".secrets", ".passwd-s3fs", ".*vault_pass*", "*.pem", "*.key",
    "*.p12", "*.pfx", "*.ppk", "*.kdbx",
    # environment files and database passwords
    ".env", ".env.*", ".env-*", ".env_*", ".envrc", ".pgpass", ".my.cnf", ".mylogin.cnf",
    # tokens of package registries, forges, model hubs and coding assistants
    ".netrc", ".authinfo*", ".git-credentials", ".gitcookies", ".config/git/credentials", ".pypirc", ".npmrc",
    ".yarnrc", ".yarnrc.yml", ".config/pip", ".pip", ".bundle/config", ".wgetrc", ".composer/auth.json",
    ".config/composer/auth.json", ".config/gh", ".config/hub", ".config/glab-cli", ".cargo/credentials",
    ".cargo/credentials.toml", ".gem/credentials", ".m2/settings-security.xml", ".gradle/gradle.properties",
    ".huggingface", ".cache/huggingface/token", ".cache/huggingface/stored_tokens", ".config/huggingface",
    ".config/hf", ".kimik3", ".codex", ".claude", ".claude.json", ".config/github-copilot", ".continue", ".gemini",
    # mail and remote-desktop passwords
    ".thunderbird", ".msmtprc", ".mbsyncrc", ".fetchmailrc", ".purple", ".config/filezilla", ".config/remmina",
    ".local/share/remmina",
    # sockets that act with your keys or rights: agents, container engines, their VMs
    ".1password", ".colima", ".rd", ".orbstack", ".lima",
    # browser profiles, password stores, keyrings, editors' and Electron apps' stored state
    ".mozilla", ".config/google-chrome", ".config/chromium", ".config/BraveSoftware", ".config/microsoft-edge",
    ".config/vivaldi", ".config/opera", "snap/firefox", "snap/chromium", ".var/app", ".password-store",
    ".local/share/keyrings", ".local/share/kwalletd", ".kde/share/apps/kwallet", ".pki", ".config/Bitwarden",
    ".config/KeePassXC", ".config/1Password", ".config/*/User/globalStorage", ".config/*/User/workspaceStorage",
    ".*-server/data/User/globalStorage", ".config/*/Cookies", ".config/*/Local Storage",
    ".config/*/Network/Cookies", ".local/share/jupyter/runtime",
    # histories SECRET_NAMES does not name
    ".lesshst*", ".viminfo*", ".local/state/nvim/shada", ".ipython/profile_*/history.sqlite", ".julia/logs",
    ".config/fish/fish_variables",  # fish's universal variables: set -U OPENAI_API_KEY ...
    ".dbshell", ".local/share/xonsh",  # the mongo shell's, xonsh's
    # coding assistants' settings holding API keys
    ".aider.conf.yml", ".config/aichat", ".config/mods",
    # SECRET_NAMES, at the top (dotfiles) and in SECRET_PLACES
    *("." + n for n in SECRET_NAMES), *(p + n for p in SECRET_PLACES for n in SECRET_NAMES),
)
"""Credential locations under ``$HOME`` never readable inside the sandbox (issue 39; Anthropic's
sandbox-runtime and Codex keep similar lists): paths or patterns (``*`` one folder level, and
also a leading dot; resolved once per sandbox start, no walk). An entry under ``.config``,
``.local/share``, ``.cache`` or ``.local/state`` is also looked for under ``$XDG_CONFIG_HOME``,
``$XDG_DATA_HOME``, ``$XDG_CACHE_HOME`` or ``$XDG_STATE_HOME`` where those name another folder.
A folder is shown empty, a file or socket as ``/dev/null`` under bwrap; under Landlock reading
them is refused (their names stay listable, a socket stays connectable: docs/sandbox.md)."""

XDG_HOMES: tuple[tuple[str, str], ...] = (
    (".config/", "XDG_CONFIG_HOME"), (".local/share/", "XDG_DATA_HOME"), (".cache/", "XDG_CACHE_HOME"),
    (".local/state/", "XDG_STATE_HOME"))
"""(the default folder in ``$HOME``, the XDG Base Directory variable that moves it)."""

ENV_SECRETS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("KUBECONFIG", "DOCKER_CONFIG", "NETRC", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE",
                     "GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_CONFIG", "AZURE_CONFIG_DIR", "PGPASSFILE",
                     "MYSQL_TEST_LOGIN_FILE", "GNUPGHOME", "PASSWORD_STORE_DIR", "GH_CONFIG_DIR", "HF_TOKEN_PATH",
                     "NPM_CONFIG_USERCONFIG", "npm_config_userconfig", "PIP_CONFIG_FILE", "TF_CLI_CONFIG_FILE",
                     "RCLONE_CONFIG", "SOPS_AGE_KEY_FILE", "KAGGLE_CONFIG_DIR", "REGISTRY_AUTH_FILE", "WGETRC",
                     "BUNDLE_USER_CONFIG", "KIMIK3_HOME", "CODEX_HOME", "CLAUDE_CONFIG_DIR", "HISTFILE",
                     "PSQL_HISTORY", "MYSQL_HISTFILE", "NODE_REPL_HISTORY", "PYTHON_HISTORY", "SQLITE_HISTORY",
                     "REDISCLI_HISTFILE", "LESSHISTFILE", "SSH_AUTH_SOCK", "GPG_AGENT_INFO", "DOCKER_HOST",
                     "CONTAINER_HOST", "DBUS_SESSION_BUS_ADDRESS", "VSCODE_GIT_IPC_HANDLE", "VSCODE_IPC_HOOK_CLI",
                     "VSCODE_IPC_HOOK", "KRB5CCNAME", "KRB5_KTNAME", "KRB5_CLIENT_KTNAME"), ("",)),
    "HF_HOME": ("token", "stored_tokens"), "CARGO_HOME": ("credentials", "credentials.toml"),
    "GRADLE_USER_HOME": ("gradle.properties",), "IPYTHONDIR": ("profile_*/history.sqlite",),
    "XDG_RUNTIME_DIR": ("gnupg", "podman", "docker.sock", "containers", "bus", "keyring", "gcr", "ssh-agent*",
                        "openssh_agent", "1password"),
}
"""Variables that name a credential location (a file, a folder, a colon list, a socket as
``unix:///path`` or ``unix:path=/path``), with what in it is secret (``""``: the path itself):
masked as :data:`HOME_SECRETS` are. A relative path, ``/``, the home or a folder above it, and
paths in ``/dev``, ``/proc`` and ``/sys`` (``HISTFILE=/dev/null``) are never taken from them."""

ROOT_SECRETS: tuple[str, ...] = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
                                 "/etc/ssh/ssh_host_*_key", "/etc/sudoers", "/etc/sudoers.d/*",
                                 "/run/docker.sock", "/var/run/docker.sock", "/run/podman", "/var/run/podman",
                                 "/run/containerd/containerd.sock", "/run/dbus/system_bus_socket",
                                 "/run/user/{uid}")
"""Files only root may read (it owns them, so dropping capabilities does not hide them), and the
system's sockets that act with root's rights (docker, podman, containerd) or another user's
(``/run/user/{uid}``: the session bus, gpg / ssh agents, podman); ``{uid}`` is this user's id."""

_CREDENTIAL_NAMES = frozenset({"KIMIK3_API_KEY", "MOONSHOT_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY",
                               "GITHUB_TOKEN", "GH_TOKEN", "HF_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                               "AWS_SESSION_TOKEN", "GOOGLE_APPLICATION_CREDENTIALS", "AZURE_CLIENT_SECRET",
                               "NPM_TOKEN", "PYPI_TOKEN", "TWINE_PASSWORD", "SSH_AUTH_SOCK", "GPG_AGENT_INFO",
                               "VAULT_TOKEN", "DOCKER_AUTH_CONFIG", "DATABASE_URL", "BW_SESSION",
                               "VSCODE_GIT_IPC_HANDLE", "VSCODE_IPC_HOOK_CLI", "VSCODE_IPC_HOOK", "KRB5CCNAME"})
_CREDENTIAL_PATTERN = re.compile(
    r"(^|_)(API_?KEYS?|KEYS?|SECRET|PASSWORD|PASSWD|PASSPHRASE|PASS|PWD|PAT|DSN|PRIVATE_KEY|ACCESS_KEY|AUTH)($|_)"
    r"|(^|_)PW($|_)|PRIVATE_?KEY|TOKEN($|_)|_KEYS?$|SECRET|PASSWORD|CREDENTIAL|COOKIES?($|_)|MNEMONIC"
    r"|CONNECTION_?STRING", re.IGNORECASE)
_ALWAYS = re.compile(r"WEBHOOK|^OP_SESSION_", re.IGNORECASE)  # whatever the rest of the name says
_PLACE_NAMES = ("PWD", "OLDPWD")
_PLACE_SUFFIX = re.compile(r"(_FILE|_DIR|_PATH|HOME)$", re.IGNORECASE)
_ABOUT_SUFFIX = re.compile(
    r"_(URL|URI|ENDPOINT|HOST|PORT|NAME|MODE|TYPE|KIND|FORMAT|LEN|LENGTH|SIZE|TIMEOUT|TTL|LIFETIME|EXPIRY|ALGORITHM"
    r"|VERSION|REGION|PROVIDER|BACKEND|SCOPES?|AUDIENCE|ISSUER|DOMAIN|SECURE|HTTPONLY|SAMESITE|ENABLED?|DISABLED?)$",
    re.IGNORECASE)
_FLAG_VALUES = frozenset({"", "0", "1", "true", "false", "yes", "no", "on", "off", "none", "null"})
_CREDENTIAL_VALUE = re.compile(
    r"(?<![a-z0-9+.-])(?!(?:ssh|sftp|rsync|git\+ssh|ssh\+git)://[^:/?#\s@]+@)"  # ssh://user@h: a user's name
    r"[a-z][a-z0-9+.-]*://(?!git@)[^/?#\s@]+@"  # URL userinfo: postgres://u:pw@h, https://tok@github.com
    r"|[?&;](?:[\w.-]*[_.-])?(?:api_?key|key|token|access_?token|sig|signature|secret|password|passwd|pwd|pw"
    r"|auth|bearer|jwt|cookie|credential|session)(?:[_.-][\w.-]*)?="  # ?api_key=, &sig= (Azure SAS), ?jwt=
    r"|(?-i:\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\w{30,}|glpat-[\w-]{20,}|xox[abeoprs]-[\w-]{10,}"
    r"|sk-[\w-]{32,}|AKIA[0-9A-Z]{16}|hf_[A-Za-z0-9]{30,}|npm_[A-Za-z0-9]{30,}|pypi-[\w-]{30,}|AIza[\w-]{30,}"
    r"|[sr]k_(?:live|test)_[A-Za-z0-9]{20,}|xapp-[\w-]{10,}|ya29\.[\w-]{20,}|sq[pua]_[0-9a-f]{40}"
    r"|dckr_pat_[\w-]{20,}))"
    r"|hooks\.slack\.com/(?:services|workflows|triggers)/|discord(?:app)?\.com/api/webhooks/"
    r"|webhook\.office\.com/|\bBearer\s+\S"  # a webhook's URL; an Authorization header
    r"|\bauthorization\s*:\s*\S"  # an HTTP header (http.extraheader, curl -H)
    r"|(?:^|[;\s])\s*(?:password|pwd|account_?key|shared_?access_?key)\s*="  # Password=x; AccountKey=
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----|\beyJ[\w-]{10,}\.eyJ[\w-]{10,}\.", re.IGNORECASE)  # a key, a JWT


_BY_NAME = frozenset({*SECRET_NAMES, *("." + n for n in SECRET_NAMES)})


_BASIC = re.compile(r"\bBasic\s+([A-Za-z0-9+/]{8,}={0,2})(?![\w+/=])", re.IGNORECASE)


def _unbase64(text: str) -> bytes:
    with contextlib.suppress(ValueError):
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    return b""


def credential_env(name: str, value: str | None = None) -> bool:
    """Whether the environment variable ``name`` (holding ``value``, where given) is a credential
    (issue 39), by three rules, see docs/sandbox.md's table:

    - its name: kimik3's and the usual providers' (``KIMIK3_API_KEY``, ``OPENAI_API_KEY``,
      ``GITHUB_TOKEN``, ``BW_SESSION``, the ssh / gpg agents' sockets, ...), ``API_KEY``,
      ``PASSWORD``, ``PASS``, ``PWD``, ``PAT``, ``DSN``, ``AUTH``, ... as a word, ``TOKEN`` ending
      a word (``NGROK_AUTHTOKEN``), ``SECRET``, ``PASSWORD``, ``CREDENTIAL``, ``WEBHOOK``,
      ``COOKIE`` ending a word, ``PRIVATEKEY``, ``PW`` as a word, ``WEBHOOK``, ``OP_SESSION_*``;
      but ``PWD`` and ``OLDPWD``, a name that only says something about a credential (ending in
      ``_URL``, ``_NAME``, ``_MODE``, ``_LEN``, ...: ``TOKEN_URL``, ``SESSION_COOKIE_NAME``,
      ``PASSWORD_MIN_LEN``; not a ``WEBHOOK``), a flag's value (``1``, ``true``, ``off``, empty:
      ``HF_HUB_DISABLE_IMPLICIT_TOKEN=1``), and a name that only names a place (ending in
      ``_FILE``, ``_DIR``, ``_PATH``, ``HOME``: ``PASSWORD_STORE_DIR``, ``DB_PASSWORD_FILE``)
      whose value is an absolute path, or any name whose value is an existing absolute path
      (``TLS_KEY=/etc/ssl/private/site.key``: the file is what is secret, masked where listed);
    - its value: a URL with user information (``postgres://u:pw@h``, ``https://tok@github.com``;
      not a user's name alone over ssh: ``ssh://me@build-box``),
      a query parameter naming a key, token or signature (``?api_key=``, ``&sig=``), a token of a
      known format (``ghp_...``, ``xoxb-...``, ``AKIA...``, ``hf_...``, ``sk_live_...``), a
      webhook's URL (Slack, Discord, Teams), an ``Authorization:`` header, ``Bearer ...``, ``Basic``
      and the base64 of ``user:password``, a ``password=``
      keyword (a connection string, libpq's ``host=h password=pw``).
    """
    if name.upper() in _CREDENTIAL_NAMES:
        return True
    if value is not None and (_CREDENTIAL_VALUE.search(value) or any(  # Basic <base64 of user:password>
            re.fullmatch(rb"[\x21-\x7e]+:[\x20-\x7e]*", _unbase64(m)) for m in _BASIC.findall(value))):
        return True
    if _ALWAYS.search(name):
        return True
    if name in _PLACE_NAMES or not _CREDENTIAL_PATTERN.search(name) or _ABOUT_SUFFIX.search(name):
        return False
    if value is not None and value.strip().lower() in _FLAG_VALUES:
        return False
    if value is None or any(c.isspace() for c in value) or not os.path.isabs(path := os.path.expanduser(value)):
        return True
    return not (_PLACE_SUFFIX.search(name) or os.path.lexists(path))  # a path names the secret, is not one


def scrub_env(env: Mapping[str, str], allow: Iterable[str] = (), deny: Iterable[str] = ()) -> dict[str, str]:
    """``env`` without the credentials (:func:`credential_env`, by name and value) but those named
    in ``allow``, and without the variables named in ``deny`` (the user's own credentials that no
    rule recognises, ``--deny-env``; it wins over ``allow``): the environment of every command a
    sandbox runs (``bash``, background processes, eval's ``setup`` and ``check``), whatever the
    backend."""
    allowed, denied = set(allow), set(deny)
    return {k: v for k, v in env.items() if k not in denied and (k in allowed or not credential_env(k, v))}


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


def homes(env: Mapping[str, str]) -> list[str]:
    """The homes whose secrets are masked, resolved and existing: ``$HOME`` (:func:`home`), this
    user's home in the password database where ``$HOME`` says otherwise, and under ``sudo`` the
    invoking user's (``$SUDO_USER``: root without capabilities still reads its files that others
    may read)."""
    out = [home()]
    for user in (os.getuid(), env.get("SUDO_USER", "")):
        with contextlib.suppress(KeyError, OSError):
            entry = pwd.getpwuid(user) if isinstance(user, int) else pwd.getpwnam(user) if user else None
            if entry is not None:
                out.append(os.path.realpath(entry.pw_dir))
    return [h for h in dict.fromkeys(out) if h and h != "/" and os.path.isdir(h)]


def _named_by_env(env: Mapping[str, str], homes: list[str]) -> list[str]:
    """The credential locations the variables of :data:`ENV_SECRETS` and :data:`XDG_HOMES` name
    (absolute paths or glob patterns)."""
    out: list[str] = []
    for name, inside in ENV_SECRETS.items():
        value = env.get(name, "")
        if value.startswith("unix://"):  # DOCKER_HOST=unix:///path
            parts = [value[len("unix://"):]]
        elif value.startswith("unix:"):  # DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/1000/bus,guid=...
            parts = re.findall(r"(?:^unix:|,)path=([^,;]+)", value)
        else:
            parts = value.split(os.pathsep)  # KUBECONFIG=a:b; GPG_AGENT_INFO=path:pid:1
        for part in parts:
            path = os.path.expanduser(part)
            if not os.path.isabs(path):
                continue
            path = os.path.abspath(path)
            if path == "/" or any((h + "/").startswith(path.rstrip("/") + "/") for h in homes) or \
                    path.startswith(("/dev/", "/proc/", "/sys/")):
                continue
            out += [os.path.join(path, p) if p else path for p in inside]
    for default, name in XDG_HOMES:
        moved = env.get(name, "")
        if os.path.isabs(moved) and os.path.abspath(moved) not in (os.path.join(h, default[:-1]) for h in homes):
            out += [os.path.join(moved, s[len(default):]) for s in HOME_SECRETS if s.startswith(default)]
    return out


def secret_patterns(deny: Iterable[str] = (), env: Mapping[str, str] | None = None) -> list[str]:
    """Where the secrets may be, as absolute paths and glob patterns: :data:`HOME_SECRETS` in
    each of :func:`homes` (and in the XDG folders ``env`` moves them to), the paths :data:`ENV_SECRETS`'
    variables in ``env`` (default: this process's) name, :data:`ROOT_SECRETS` (``{uid}`` filled
    in), and ``deny``."""
    env = os.environ if env is None else env
    hs = homes(env)
    return [*(os.path.join(h, s) for h in hs for s in HOME_SECRETS), *_named_by_env(env, hs),
            *(s.replace("{uid}", str(os.getuid())) for s in ROOT_SECRETS),
            *(os.path.abspath(os.path.expanduser(d)) for d in deny)]


def _expand(pattern: str, listed: dict[str, list[str]]) -> list[str]:
    """The existing paths ``pattern`` matches (``*`` within one name, also a leading dot; in any
    case: ``.API_TOKEN``, ``Token.json``, ``.Zsh_History``), each
    folder listed once and each pattern expanded once (``listed`` keeps both for one call), sorted."""
    if not glob.has_magic(pattern):
        return [pattern] if os.path.lexists(pattern) else []
    if "\0" + pattern in listed:
        return listed["\0" + pattern]
    head, name = os.path.split(pattern)
    if not glob.has_magic(name):
        found = [os.path.join(f, name) for f in (_expand(head, listed) if glob.has_magic(head) else [head])]
        listed["\0" + pattern] = [p for p in found if os.path.lexists(p)]
        return listed["\0" + pattern]
    names = _names_regex(name)
    out: list[str] = []
    for folder in _expand(head, listed) if glob.has_magic(head) else [head]:
        if folder not in listed:
            try:  # one string per folder, "\n"-joined: a name is matched by one regex scan
                listed[folder] = ["\n".join(sorted(n for n in os.listdir(folder) if "\n" not in n))]
            except OSError:  # not a folder, or gone
                listed[folder] = [""]
        out += [os.path.join(folder, n) for n in names(listed[folder][0])]
    listed["\0" + pattern] = out
    return out


@functools.lru_cache(maxsize=512)
def _names_regex(name: str) -> Callable[[str], list[str]]:
    """A glob of one name (``*``, ``?``, ``[...]``) as a case-blind finder of the lines it matches."""
    rx = "".join("[^\n]*" if c == "*" else "[^\n]" if c == "?" else re.escape(c) for c in name)
    rx = re.sub(r"\\\[(.*?)\\\]", lambda m: "[" + m.group(1).replace("\\", "") + "]", rx)  # a class: [-_]
    return re.compile(f"^{rx}$", re.IGNORECASE | re.MULTILINE).findall


def secret_folders(deny: Iterable[str] = (), env: Mapping[str, str] | None = None) -> list[str]:
    """The existing folders whose entries decide the secret set (each pattern's folder, its
    ``*`` expanded): a new entry or a rename in one of them changes what :func:`secrets` finds."""
    listed: dict[str, list[str]] = {}
    out: list[str] = []
    for pattern in secret_patterns(deny, env):
        folder = os.path.dirname(pattern)
        out += _expand(folder, listed) if glob.has_magic(folder) else [folder]
    return [d for d in dict.fromkeys(out) if os.path.isdir(d)]


def secrets(deny: Iterable[str] = (), allow: Iterable[str] = (), env: Mapping[str, str] | None = None) -> list[str]:
    """The credential locations that exist now, resolved (:func:`secret_patterns`: the home's,
    the XDG folders', the variables', the system's and ``deny``); minus each one ``allow`` names
    exactly (a path allowed inside one is shown on top of it; a folder allowed that holds one does
    not lift it). Patterns only (one folder level per ``*``, each folder listed once), no walk:
    called once per sandbox start.

    A folder matched only by :data:`SECRET_NAMES` is left out where it is the toolchain (it holds
    one of :data:`TOOLCHAIN_MARKS`, or a ``PATH`` entry or the running interpreter's folders:
    :func:`toolchain`), and so is a name of :data:`NOT_SECRET_NAMES` (issue 39, point 1: the
    toolchain works inside as outside); the secret files inside it are still matched by name.

    Also the resolved target of a secret that is a symlink (``~/.ssh -> /data/keys``): both stay
    out of reach; but never ``/``, a home or a folder above one (``~/.histdb -> ~``: the home is
    the user's toolchain; its secrets are masked one by one). A secret inside another one is left
    out (masked with it)."""
    listed: dict[str, list[str]] = {}
    found: list[str] = []
    env = os.environ if env is None else env
    tools: list[str] | None = None
    for pattern in secret_patterns(deny, env):
        by_name = os.path.basename(pattern) in _BY_NAME
        for p in _expand(pattern, listed):
            if by_name:  # a name that only looks like a secret's: the user's program or data
                if any(fnmatch.fnmatchcase(os.path.basename(p).lower(), n) for n in NOT_SECRET_NAMES):
                    continue
                if os.path.isdir(p):
                    if glob.has_magic(os.path.dirname(os.path.dirname(pattern))):  # a deep place: files only
                        continue
                    tools = toolchain(env) if tools is None else tools
                    if any(os.path.exists(os.path.join(p, m)) for m in TOOLCHAIN_MARKS) or \
                            any(t == p or t.startswith(p.rstrip("/") + "/") for t in tools):
                        continue
            found += [os.path.abspath(p), os.path.realpath(p)]
    lifted = {os.path.realpath(os.path.expanduser(a)) for a in allow}
    tops = [h.rstrip("/") + "/" for h in homes(env)]  # never "/", a home or a folder above one (a link to it)
    kept = [p for p in dict.fromkeys(found) if p not in lifted and os.path.exists(p) and p != "/"
            and not any(t.startswith(p.rstrip("/") + "/") for t in tops)]
    folders = tuple(p.rstrip("/") + "/" for p in kept if os.path.isdir(p))
    return [p for p in kept if not p.startswith(folders)]  # not inside another (~/.aws/credentials)


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
