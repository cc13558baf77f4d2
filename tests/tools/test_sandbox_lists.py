"""The sandbox's lists (issue 39, the findings left open): which credential locations are masked
(files and folders in the home by pattern, their XDG and environment-named places), which
environment variables are left out (by name and by value), and which unix sockets a command
cannot reach. Each through the real sandbox, bubblewrap and Landlock, reading the host's files
and the host's sockets; docs/sandbox.md's tables checked against the code."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kimik3.tools.coding import Sandbox, _policy, coding_tools
from kimik3.tools.coding._policy import (
    ENV_SECRETS,
    HOME_SECRETS,
    ROOT_SECRETS,
    SECRET_NAMES,
    SECRET_PLACES,
    credential_env,
    homes,
    scrub_env,
    secret_folders,
    secrets,
)

from .test_sandbox_policy import BACKENDS, run

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs Linux /proc")
DOC = (Path(__file__).parents[2] / "docs/sandbox.md").read_text()


@pytest.fixture
def host_dir(pytestconfig: pytest.Config) -> Iterator[Path]:
    """A real directory outside /tmp and $HOME (pytest's cache in the checkout)."""
    d = pytestconfig.cache.mkdir("sbl") / uuid.uuid4().hex[:8]
    d.mkdir()
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _write(base: Path, names: list[str]) -> None:
    for name in names:
        (base / name).parent.mkdir(parents=True, exist_ok=True)
        (base / name).write_text(f"SECRET {name}\n")


def _readable(paths: list[str]) -> str:
    """A command printing each of ``paths`` whose content it can read."""
    return "; ".join(f"grep -qs SECRET '{p}' && echo 'READ {p}'" for p in paths) + "; true"


# the locations of the issue, and variants of each kind of our own (marked +)
IN_HOME = [".env", ".env.local", ".env.production", ".pgpass", ".my.cnf", ".mylogin.cnf",
           ".config/containers/auth.json", ".config/sops/age/keys.txt", ".kaggle/kaggle.json",
           ".cache/huggingface/stored_tokens", ".config/hf/token", ".bundle/config", ".wgetrc", ".config/pip/pip.conf",
           ".pip/pip.conf", ".secrets/x", ".ipython/profile_default/history.sqlite",
           ".config/Code/User/globalStorage/state.vscdb", ".config/Cursor/User/globalStorage/state.vscdb",
           ".vscode-server/data/User/globalStorage/state.vscdb", ".bash_history.bak", ".zsh_history~",
           # + variants: another .env, history copies and places, editor forks, kernel keys, Electron tokens
           ".env.staging", ".env-prod", ".bash_history-12345.tmp", ".histfile", ".config/zsh/.zsh_history",
           ".local/state/zsh/history", ".ipython/profile_work/history.sqlite",
           ".config/Code - Insiders/User/globalStorage/state.vscdb", ".cursor-server/data/User/globalStorage/x.db",
           ".local/share/jupyter/runtime/kernel-1.json", ".config/Slack/Cookies", ".my_api_token", "deploy.pem",
           ".colima/_lima/_config/user", ".lima/_config/user", ".ghc/ghci_history", ".cache/zsh/history",
           ".config/newtool/credentials.json", ".local/share/app/api-token", ".passwd-s3fs", ".authinfo.gpg",
           ".config/github-copilot/apps.json", ".thunderbird/p.default/logins.json",
           ".config/app/prod.env", ".local/share/app/.env.local"]
NOT_SECRETS = [".condarc", ".config/op2/x", ".wget-hsts", ".envs/venv/marker", ".config/git/config",
               ".cache/huggingface/hub/model.bin", ".config/Code/User/settings.json", "tokenizers/README",
               "history-of-rome/notes", ".cache/uv/wheels-v5/w.whl", ".pyenv/versions/3.11.7/bin/python"]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_credential_locations_in_the_home_are_unreadable(backend: str, host_dir: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    home = host_dir / "home"
    _write(home, IN_HOME + NOT_SECRETS)
    (home / "proj").mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)
    box = Sandbox(home / "proj", backend)
    out = await run(coding_tools(box.root, sandbox=box)[0], _readable([f"{home}/{p}" for p in IN_HOME + NOT_SECRETS]))
    assert out.split("\n")[:-1] == [f"READ {home}/{p}" for p in NOT_SECRETS], out
    await box.aclose()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_xdg_and_environment_named_locations_are_unreadable(backend: str, host_dir: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """XDG_*_HOME moving the secrets elsewhere, and the variables naming credential files (KUBECONFIG
    a colon list, DOCKER_CONFIG a folder, HF_HOME / CARGO_HOME a folder with a secret in it)."""
    home, elsewhere = host_dir / "home", host_dir / "e"
    (home / "proj").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    secret = ["xc/gh/hosts.yml", "xc/pip/pip.conf", "xc/sops/age/keys.txt", "xc/Code/User/globalStorage/s.vscdb",
              "xd/fish/fish_history", "xd/keyrings/login.keyring", "xh/huggingface/stored_tokens",
              "xs/nvim/shada", "xs/zsh/history", "kube/a", "kube/b", "docker/config.json", "netrc", "aws/config",
              "aws/credentials", "gcp.json", "pgpass", "mylogin.cnf", "hf/token", "hf/stored_tokens", "hftoken",
              "cargo/credentials.toml", "histfile", "gnupg/private-keys-v1.d/k.key"]
    public = ["xc/git/config", "xh/pip/wheels/w.whl", "hf/hub/model.bin", "cargo/bin/tool", "kube/cache/x"]
    _write(elsewhere, secret + public)
    for name, value in {"XDG_CONFIG_HOME": "xc", "XDG_DATA_HOME": "xd", "XDG_CACHE_HOME": "xh",
                        "XDG_STATE_HOME": "xs", "KUBECONFIG": "kube/a:kube/b", "DOCKER_CONFIG": "docker",
                        "NETRC": "netrc", "AWS_CONFIG_FILE": "aws/config", "AWS_SHARED_CREDENTIALS_FILE":
                        "aws/credentials", "GOOGLE_APPLICATION_CREDENTIALS": "gcp.json", "PGPASSFILE": "pgpass",
                        "MYSQL_TEST_LOGIN_FILE": "mylogin.cnf", "HF_HOME": "hf", "HF_TOKEN_PATH": "hftoken",
                        "CARGO_HOME": "cargo", "HISTFILE": "histfile", "GNUPGHOME": "gnupg"}.items():
        monkeypatch.setenv(name, ":".join(f"{elsewhere}/{v}" for v in value.split(":")))
    box = Sandbox(home / "proj", backend)
    out = await run(coding_tools(box.root, sandbox=box)[0], _readable([f"{elsewhere}/{p}" for p in secret + public]))
    assert out.split("\n")[:-1] == [f"READ {elsewhere}/{p}" for p in public], out
    await box.aclose()


def test_secret_folders_name_where_a_new_secret_would_appear(host_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a running sandbox watches to know its secret set went stale: each pattern's folder,
    its ``*`` expanded (an editor fork's User folder), also the XDG- and variable-named ones."""
    home, elsewhere = host_dir / "home", host_dir / "e"
    _write(home, [".config/Cursor/User/settings.json", "proj/x"])
    _write(elsewhere, ["xc/gh/hosts.yml", "kube/a", "unrelated/x"])
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(elsewhere / "xc"))
    monkeypatch.setenv("KUBECONFIG", f"{elsewhere}/kube/a:relative/b")
    folders = secret_folders()
    for d in (home, home / ".config", home / ".config/Cursor/User", elsewhere / "xc", elsewhere / "xc/gh",
              elsewhere / "kube"):
        assert str(d) in folders, d
    assert str(home / "proj") not in folders and str(elsewhere / "unrelated") not in folders
    assert [p for p in secrets() if p.startswith(str(host_dir))] == [str(elsewhere / "kube/a"),
                                                                     str(elsewhere / "xc/gh")]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_invoking_users_home_under_sudo_is_masked_too(backend: str, host_dir: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`sudo kimik3 run`: $HOME is root's, the user's own home is readable to root's files-that-others-
    may-read; its secrets are masked as $HOME's are (the password database stubbed to name it)."""
    home, alice = host_dir / "home", host_dir / "alice"
    (home / "proj").mkdir(parents=True)
    _write(alice, [".env", ".ssh/id_ed25519", ".local/share/fish/fish_history", "notes.txt"])
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SUDO_USER", "alice")
    real = pwd.getpwnam

    def getpwnam(name: str) -> Any:
        return SimpleNamespace(pw_dir=str(alice)) if name == "alice" else real(name)

    monkeypatch.setattr(pwd, "getpwnam", getpwnam)
    assert homes(os.environ)[:1] == [str(home)] and homes(os.environ)[-1] == str(alice)
    box = Sandbox(home / "proj", backend)
    out = await run(coding_tools(box.root, sandbox=box)[0],
                    _readable([f"{alice}/{p}" for p in (".env", ".ssh/id_ed25519", ".local/share/fish/fish_history",
                                                        "notes.txt")]))
    assert out.split("\n")[:-1] == [f"READ {alice}/notes.txt"], out
    await box.aclose()


class _Listener:
    """A real listening AF_UNIX socket on the host (bound through /proc/self/fd: short whatever the
    checkout's path), counting the connections it accepted."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.dir = os.open(path.parent, os.O_PATH)
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(f"/proc/self/fd/{self.dir}/{path.name}")
        self.sock.listen(8)
        self.sock.setblocking(False)

    def accepted(self) -> int:
        n = 0
        while True:
            try:
                conn, _ = self.sock.accept()
            except BlockingIOError:
                return n
            conn.close()
            n += 1

    def close(self) -> None:
        self.sock.close()
        os.close(self.dir)


_CONNECT = """
import os, socket, sys
for arg in sys.argv[1:]:
    name, p = arg.split("=", 1)
    s = socket.socket(socket.AF_UNIX)
    try:
        d = os.open(os.path.dirname(p), os.O_PATH)
        s.connect(f"/proc/self/fd/{d}/{os.path.basename(p)}")
        print(name, "connected")
    except OSError as e:
        print(name, type(e).__name__)
"""


@pytest.mark.parametrize("backend", BACKENDS)
async def test_agent_and_engine_sockets_cannot_be_reached(backend: str, host_dir: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """ssh / gpg / 1Password agents, docker / podman engines, the session bus at ordinary paths.
    bubblewrap masks them (connect fails, the host's listener accepts nothing); Landlock, as kimik3
    uses it (ABI 1 to 7), has no right for connect(2) to a socket file: it connects, as
    docs/sandbox.md says, while the variable naming it is left out and the files beside it stay
    unreadable."""
    home, run_dir = host_dir / "home", host_dir / "r"
    (home / "proj").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    paths = {"ssh": run_dir / "ssh-agent.sock", "docker": run_dir / "docker.sock",
             "podman": run_dir / "podman.sock", "bus": run_dir / "bus",  # + variants: podman, the session bus
             "gpg": home / ".gnupg/S.gpg-agent", "op": home / ".1password/agent.sock",
             "colima": home / ".colima/default/docker.sock", "vscode": run_dir / "vscode-git-1.sock",
             "plain": run_dir / "server.sock"}
    monkeypatch.setenv("SSH_AUTH_SOCK", str(paths["ssh"]))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{paths['docker']}")
    monkeypatch.setenv("CONTAINER_HOST", f"unix://{paths['podman']}")
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", f"unix:path={paths['bus']},guid=0123")
    monkeypatch.setenv("VSCODE_GIT_IPC_HANDLE", str(paths["vscode"]))
    (home / ".gnupg/private-keys-v1.d").mkdir(parents=True)
    (home / ".gnupg/private-keys-v1.d/k.key").write_text("SECRET gpg key\n")
    listeners = {name: _Listener(p) for name, p in paths.items()}
    try:
        box = Sandbox(home / "proj", backend)
        bash = coding_tools(box.root, sandbox=box)[0]
        args = " ".join(f"{n}={p}" for n, p in paths.items())
        out = await run(bash, f"{sys.executable} -c '{_CONNECT}' {args}; "
                              "echo \"[$SSH_AUTH_SOCK]\"; cat ~/.gnupg/private-keys-v1.d/k.key 2>&1 | head -c 7")
        got = dict(line.split(" ", 1) for line in out.split("\n")[:len(paths)])
        accepted = {name: listener.accepted() for name, listener in listeners.items()}
        if backend == "bwrap":
            # a socket file is covered by /dev/null (refused), a folder by an empty tmpfs (gone)
            assert got == {"ssh": "ConnectionRefusedError", "docker": "ConnectionRefusedError",
                           "podman": "ConnectionRefusedError", "bus": "ConnectionRefusedError",
                           "gpg": "FileNotFoundError", "op": "FileNotFoundError", "colima": "FileNotFoundError",
                           "vscode": "ConnectionRefusedError", "plain": "connected"}, out
            assert accepted == {name: int(name == "plain") for name in paths}
        else:
            assert set(got.values()) == {"connected"} and accepted == dict.fromkeys(paths, 1), out
        assert out.split("\n")[len(paths)] == "[]"  # the variable is left out
        assert "SECRET" not in out and "gpg key" not in out
        await box.aclose()
    finally:
        for listener in listeners.values():
            listener.close()


# (name, value, left out?): the names and values, and variants of our own
ENV_TABLE = [
    ("GITLAB_PAT", "glpat", True), ("AZURE_DEVOPS_PAT", "x", True), ("MYSQL_PWD", "pw", True),
    ("DB_PWD_ROOT", "pw", True), ("SENTRY_DSN", "https://k@o1.ingest.sentry.io/1", True), ("DSN", "x", True),
    ("SLACK_WEBHOOK_URL", "https://hooks.slack.com/services/T/B/X", True), ("DISCORD_WEBHOOK", "x", True),
    ("NGROK_AUTHTOKEN", "x", True), ("PLAIN_AUTH_TOKEN", "x", True), ("BW_SESSION", "x", True),
    ("OP_SESSION_my", "x", True), ("MY_SECRETS", "x", True), ("SECRET_SAUCE", "x", True),
    ("DB_PASSWORDS", "x", True), ("SMTP_PASS", "x", True), ("JENKINS_CREDENTIAL_ID", "x", True),
    ("SOMECREDENTIALS", "x", True), ("SESSION_COOKIE", "x", True), ("AZURE_STORAGE_CONNECTION_STRING", "x", True),
    ("DB_URL", "postgres://u:pw@db.example/app", True), ("GIT_REMOTE", "https://ghtok@github.com/o/r.git", True),
    ("FEED", "https://api.example.com/v1?format=json&api_key=abc", True),
    ("BLOB", "https://a.blob.core.windows.net/c/f?sv=2022&sig=AbC%3D", True),
    ("S3_GET", "https://b.s3.amazonaws.com/k?X-Amz-Signature=ab12", True), ("CB", "https://x.io/cb?token=t", True),
    ("HTTPS_PROXY", "http://user:pw@proxy:3128", True), ("EXTRA_HEADER", "Authorization: Bearer abc", True),
    ("SOME_VALUE", "ghp_" + "a" * 36, True), ("SOME_OTHER", "AKIA" + "A" * 16, True),
    ("DB_PASSWORD_FILE", "hunter2", True),  # a _FILE name holding no path
    ("API_KEYS", "a,b", True), ("SIGNING_KEYS", "x", True), ("GPG_KEY_ID", "ABCD", True), ("WALLET_MNEMONIC", "x", True),
    ("DB_CONN", "Server=db;User Id=u;Password=pw;", True),
    ("AZ_STORE", "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=k==", True),
    ("DEPLOY", "-----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1r", True),
    ("SESSION_JWT_X", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2ln", True),
    ("VSCODE_GIT_IPC_HANDLE", "/run/user/1000/vscode-git-1.sock", True), ("KRB5CCNAME", "FILE:/tmp/krb5cc_1", True),
    ("LDAP_BIND_PW", "x", True), ("GITHUB_APP_PRIVATEKEY", "x", True), ("PAY", "sk_live_" + "a" * 24, True),
    ("SLACK_APP", "xapp-1-A0-123-abcdef", True), ("GCP", "ya29." + "a" * 24, True),
    ("NOTIFY", "https://hooks.slack.com/services/T/B/X", True), ("SLACK_WEBHOOK_NAME", "x", True),
    ("PG_OPTS", "host=db password=pw", True), ("CURL_AUTH", "Authorization: Basic dXNlcjpwYXNz", True),
    ("GIT_CONFIG_PARAMETERS", "'http.extraheader'='AUTHORIZATION: basic dXNlcjpwYXNz'", True),
    ("CURL_HOME_OPTS", "-H 'X: Basic dXNlcjpwYXNz'", True),
    ("OAUTH_TOKEN_URL", "https://login.example.com/t?access_token=abc", True), ("DB_PASSWORD", "1234", True),
    # kept: places, not secrets
    ("PWD", "/work/ws", False), ("OLDPWD", "/work", False), ("PASSWORD_STORE_DIR", "/home/u/.pass", False),
    ("DB_PASSWORD_FILE", "/run/secrets/db", False), ("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials", False),
    ("HF_TOKEN_PATH", "/home/u/hf/token", False), ("GNUPGHOME", "/home/u/.gnupg", False),
    ("GIT_ASKPASS", "/usr/lib/git-core/git-gui--askpass", False), ("SSH_ASKPASS", "/usr/bin/ksshaskpass", False),
    ("PATH", "/usr/bin:/bin", False), ("TOKENIZERS_PARALLELISM", "false", False), ("MAX_TOKENS", "4096", False),
    ("XAUTHORITY", "/run/user/1000/Xauthority", False), ("LD_LIBRARY_PATH", "/opt/lib", False),
    ("PATTERN", "*.py", False), ("PIP_INDEX_URL", "https://pypi.org/simple?x=1", False),
    ("CARGO_REGISTRY", "ssh://git@github.com/o/r.git", False), ("LS_COLORS", "rs=0:di=01;34:*.key=01;35", False),
    ("DESKTOP_SESSION", "gnome", False), ("XDG_SESSION_TYPE", "wayland", False), ("KEYBOARD", "us", False),
    ("SSH_KEY_PATH", "/home/u/.ssh/id_ed25519", False), ("KEYMAP", "us", False),
    ("GIT_AUTHOR_NAME", "A", False), ("VIRTUAL_ENV", "/home/u/.venv", False), ("SSL_CERT_FILE", "/etc/ssl/c.pem", False),
    ("NODE_OPTIONS", "--max-old-space-size=4096", False), ("HTTP_PROXY", "http://proxy:3128", False),
    ("SESSION_MANAGER", "local/h:@/tmp/.ICE-unix/1,unix/h:/tmp/.ICE-unix/1", False),
    # kept: what a name only says about a credential, flags, ordinary words
    ("TOKEN_URL", "https://login.example.com/token", False), ("AUTH_MODE", "oauth", False),
    ("SESSION_COOKIE_NAME", "sid", False), ("PASSWORD_MIN_LEN", "8", False), ("KEY_VAULT_NAME", "myvault", False),
    ("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1", False), ("CSRF_COOKIE_SECURE", "True", False),
    ("COOKIECUTTER_CONFIG", "/home/u/.cookiecutterrc", False), ("TLS_KEY", "/etc/hosts", False),
    ("SSH_KEY", "/no/such/key", True), ("DOCKER_HOST_X", "ssh://me@build-box", False),
    ("BORG_REPO", "ssh://me@nas:22/./backup", False), ("SFTP_TARGET", "sftp://u:pw@nas/x", True), ("HELP_TEXT", "Basic authentication is off", False),
]


def test_the_table_of_variables_left_out_and_kept() -> None:
    wrong = [(n, v) for n, v, out in ENV_TABLE if credential_env(n, v) != out]
    assert wrong == []
    env = {n: v for n, v, _ in ENV_TABLE if n != "DB_PASSWORD_FILE"}
    kept = sorted(n for n, v, out in ENV_TABLE if not out and n != "DB_PASSWORD_FILE")
    assert sorted(scrub_env(env)) == kept
    assert sorted(scrub_env(env, ["SENTRY_DSN", "DB_URL"])) == sorted([*kept, "SENTRY_DSN", "DB_URL"])


@pytest.mark.parametrize("backend", [*BACKENDS, "none"])
async def test_commands_get_only_the_kept_variables(backend: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    skip = ("PWD", "OLDPWD", "PATH", "DB_PASSWORD_FILE", "GIT_ASKPASS", "SSH_ASKPASS")  # the bash tool sets some
    table = [(n, v, out) for n, v, out in ENV_TABLE if n not in skip]
    for name, value, _ in table:
        monkeypatch.setenv(name, value)
    box = Sandbox(tmp_path, backend, allow_env=["MYSQL_PWD"])
    bash = coding_tools(box.root, sandbox=box)[0]
    names = "|".join(re.escape(n) for n, _, _ in table)
    out = await run(bash, f"env | grep -E '^({names})=' | sort")
    expected = sorted(f"{n}={v}" for n, v, out in table if not out or n == "MYSQL_PWD")
    assert out.split("\n")[:-1] == expected, out
    await box.aclose()


def test_docs_list_every_masked_location_and_variable() -> None:
    made = {"." + n for n in SECRET_NAMES} | {p + n for p in SECRET_PLACES for n in SECRET_NAMES}
    missing = [f"~/{s}" for s in HOME_SECRETS if s not in made and f"`~/{s}`" not in DOC]
    missing += [n for n in SECRET_NAMES if f"`{n}`" not in DOC] + [p for p in SECRET_PLACES if f"`~/{p}`" not in DOC]
    missing += [f"${name}" for name in ENV_SECRETS if f"`${name}`" not in DOC]
    missing += [s for s in ROOT_SECRETS if f"`{s}`" not in DOC]
    missing += [n for n in sorted(_policy._CREDENTIAL_NAMES) if f"`{n}`" not in DOC]
    assert missing == []
