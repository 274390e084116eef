"""Setting the plugin up in a Hermes home: `hermes gateway setup` → Android, or `hdgctl setup`.

Secrets go to the home's ``.env`` (mode 0600): ``ANDROID_TOKEN``, ``ANDROID_WS_CERT`` /
``ANDROID_WS_KEY``, ``ANDROID_FCM_SERVICE_ACCOUNT``, ``NTFY_TOPIC``. Behaviour goes to
``config.yaml`` under ``gateway.platforms.android.extra`` (host, port, push_backend,
ntfy_server_url, the public address shown to apps), and the plugin is enabled
(``plugins.enabled: [android-platform]``). Then the pairing QR code, URI and app URL are
printed.

No Hermes import: Hermes calls :func:`interactive_setup` with no arguments (its
``setup_fn`` contract, hermes_cli/gateway.py ``_configure_platform``); tests and the CLI
pass their own input, getpass and print functions.
"""

from __future__ import annotations

import getpass
import json
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from canonical import hermes_home as homes
from canonical.pairing import Pairing
from canonical.pairing import qr_text as pairing_qr_text
from canonical.settings import environment_values, load_settings

PUSH_BACKENDS = ("none", "fcm", "ntfy")
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8790
MIN_TOKEN_CHARS = 32
TOKEN_RE = re.compile(r"^[A-Za-z0-9._~-]+$")
MAX_TRIES = 5

InputFn = Callable[[str], str]
PrintFn = Callable[..., None]


class SetupError(ValueError):
    """A setup answer that cannot be used; the message says why."""


@dataclass
class SetupChoices:
    token: str | None = None  # None: keep the home's token, or generate one
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    push: str = "none"
    fcm_service_account: str | None = None
    ntfy_topic: str | None = None
    ntfy_server_url: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    public_host: str | None = None  # what the app dials; default: host (or this LAN address)
    public_port: int | None = None  # default: port
    public_tls: bool | None = None  # default: whether a cert is configured
    name: str = "Hermes"


@dataclass
class SetupOutcome:
    home: Path
    pairing: Pairing
    token_source: str  # "kept", "generated" or "given"
    env_keys: list[str] = field(default_factory=list)


# -- validation (shared by the prompts and `hdgctl setup`)
def check_token(token: str) -> str:
    token = token.strip()
    if len(token) < MIN_TOKEN_CHARS:
        raise SetupError(f"a pairing token needs at least {MIN_TOKEN_CHARS} characters")
    if len(token) > 512 or not TOKEN_RE.match(token):
        raise SetupError("a pairing token uses only A-Z a-z 0-9 . _ ~ - (at most 512)")
    return token


def check_port(value: str | int) -> int:
    try:
        port = int(str(value).strip())
    except ValueError:
        raise SetupError(f"{value!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise SetupError("a port is between 1 and 65535")
    return port


def check_host(value: str) -> str:
    host = value.strip()
    if host.startswith("[") and host.endswith("]"):  # an IPv6 literal is kept bare
        host = host[1:-1]
    if not host or any(c.isspace() for c in host) or "/" in host:
        raise SetupError(f"{value!r} is not a host name or address")
    return host


def check_push(value: str) -> str:
    push = value.strip().lower() or "none"
    if push not in PUSH_BACKENDS:
        raise SetupError("push backend is one of: " + ", ".join(PUSH_BACKENDS))
    return push


def check_service_account(value: str) -> str:
    path = Path(value.strip()).expanduser()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SetupError(f"{path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise SetupError(f"{path} is not a readable JSON file ({exc})") from None
    missing = [k for k in ("project_id", "client_email", "private_key") if not data.get(k)]
    if missing:
        raise SetupError(f"{path} is not a service-account key (missing {', '.join(missing)})")
    return str(path.resolve())


def check_file(value: str) -> str:
    path = Path(value.strip()).expanduser()
    if not path.is_file():
        raise SetupError(f"{path} does not exist")
    return str(path.resolve())


def new_ntfy_topic() -> str:
    # On a public ntfy server the topic name is the secret: make it unguessable.
    return "hermes-" + homes.new_token()[:22]


def lan_address(*, ipv6: bool = False) -> str:
    """This machine's address on its network (for ``ipv6``, its IPv6 one)."""
    # Documentation prefixes: no packet is sent for a UDP connect.
    family, probe_to, fallback = (
        (socket.AF_INET6, "2001:db8::1", "::1")
        if ipv6
        else (socket.AF_INET, "192.0.2.1", DEFAULT_HOST)
    )
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((probe_to, 9))
            return str(probe.getsockname()[0])
    except OSError:
        return fallback


# -- what is there already
def android_extra(config: dict[str, Any]) -> dict[str, Any]:
    platforms = (config.get("gateway") or {}).get("platforms") or {}
    extra = (platforms.get("android") or {}).get("extra") or {}
    return dict(extra) if isinstance(extra, dict) else {}


def current_choices(home: Path) -> tuple[SetupChoices, str | None]:
    """Defaults for the prompts from the home, and the token it has (if any).

    A public host, port or TLS flag equal to what the listen settings give anyway is
    reported as unset (None), so it follows them when they change: earlier releases wrote
    the derived values too."""
    env = homes.read_env(home)
    extra = android_extra(homes.read_config(home))
    found = extra.get("public")
    public: dict[str, Any] = found if isinstance(found, dict) else {}
    host = str(extra.get("host") or DEFAULT_HOST)
    port = int(extra.get("port") or DEFAULT_PORT)
    tls_cert = env.get("ANDROID_WS_CERT") or None
    tls_key = env.get("ANDROID_WS_KEY") or None
    public_host = public.get("host")
    if public_host is not None and str(public_host) == _listen_address_shown(host):
        public_host = None
    public_port = public.get("port")
    if public_port is not None and int(public_port) == port:
        public_port = None
    public_tls = public.get("tls")
    if public_tls is not None and bool(public_tls) == bool(tls_cert and tls_key):
        public_tls = None
    choices = SetupChoices(
        host=host,
        port=port,
        push=str(extra.get("push_backend") or "none"),
        fcm_service_account=env.get("ANDROID_FCM_SERVICE_ACCOUNT") or None,
        ntfy_topic=env.get("NTFY_TOPIC") or None,
        ntfy_server_url=str(extra.get("ntfy_server_url") or "") or None,
        tls_cert=tls_cert,
        tls_key=tls_key,
        public_host=None if public_host is None else str(public_host),
        public_port=None if public_port is None else int(public_port),
        public_tls=None if public_tls is None else bool(public_tls),
        name=str(public.get("name") or "Hermes"),
    )
    return choices, env.get("ANDROID_TOKEN") or None


def _listen_address_shown(host: str) -> str:
    """The address an app dials for this listen address when no public host is set.
    ``::`` listens on IPv6 only (docs/operations.md), so it gets this machine's IPv6 one."""
    if host == "0.0.0.0":
        return lan_address()
    if host == "::":
        return lan_address(ipv6=True)
    return host


def _pairing(token: str, host: str, port: int, serves_tls: bool, choices: SetupChoices) -> Pairing:
    """What the app dials: the public address where one is set, else the listen address."""
    return Pairing(
        host=check_host(choices.public_host or _listen_address_shown(host)),
        port=check_port(choices.public_port or port),
        token=token,
        tls=serves_tls if choices.public_tls is None else choices.public_tls,
        name=choices.name or "Hermes",
    )


def home_pairing(home: Path, *, public_host: str | None = None, name: str | None = None) -> Pairing:
    """The pairing code for a home as it is set up (`hdgctl pair`): the same one setup
    printed, with what the plugin reads besides (ANDROID_TOKEN, ANDROID_WS_HOST/PORT/CERT
    from the environment or a secret file); the home's .env wins, as in Hermes."""
    choices, _ = current_choices(home)
    settings = load_settings(
        android_extra(homes.read_config(home)), environ=homes.hermes_environ(home)
    )
    token = settings.token_value()
    if not token:
        raise SetupError(
            f"no ANDROID_TOKEN in {home / '.env'}; run `hdgctl setup --home {home}` first"
        )
    try:
        port = check_port(settings.ws_port)
    except SetupError as exc:
        raise SetupError(f"ANDROID_WS_PORT: {exc}") from None
    if public_host:
        choices.public_host = public_host
    if name:
        choices.name = name
    return _pairing(token, settings.ws_host, port, settings.ws_cert is not None, choices)


# -- writing
def apply_setup(home: Path, choices: SetupChoices) -> SetupOutcome:
    """Write `.env` and `config.yaml` for these choices; returns what an app needs."""
    host = check_host(choices.host)
    port = check_port(choices.port)
    push = check_push(choices.push)
    env = homes.read_env(home)
    if choices.token is not None:
        token, source = check_token(choices.token), "given"
    elif env.get("ANDROID_TOKEN"):
        token, source = env["ANDROID_TOKEN"], "kept"
    else:
        token, source = homes.new_token(), "generated"
    secrets: dict[str, str] = {"ANDROID_TOKEN": token}
    extra: dict[str, Any] = {"host": host, "port": port, "push_backend": push}
    if push == "fcm":
        if not choices.fcm_service_account:
            raise SetupError("push backend fcm needs a Firebase service-account key file")
        secrets["ANDROID_FCM_SERVICE_ACCOUNT"] = check_service_account(choices.fcm_service_account)
    elif push == "ntfy":
        secrets["NTFY_TOPIC"] = choices.ntfy_topic or new_ntfy_topic()
        extra["ntfy_server_url"] = choices.ntfy_server_url or "https://ntfy.sh"
    if bool(choices.tls_cert) != bool(choices.tls_key):
        raise SetupError("TLS needs both a certificate and its key")
    no_tls: tuple[str, ...] = ("ANDROID_WS_CERT", "ANDROID_WS_KEY")
    if choices.tls_cert and choices.tls_key:
        secrets["ANDROID_WS_CERT"] = check_file(choices.tls_cert)
        secrets["ANDROID_WS_KEY"] = check_file(choices.tls_key)
        no_tls = ()
    pairing = _pairing(token, host, port, bool(choices.tls_cert), choices)
    # Only what was chosen: a public address left unset follows the listen settings.
    public: dict[str, Any] = {"host": choices.public_host, "port": choices.public_port}
    public["tls"] = choices.public_tls
    extra["public"] = {k: v for k, v in public.items() if v is not None}
    extra["public"]["name"] = pairing.name
    config = homes.enable_plugin(homes.read_config(home), extra)  # may refuse: write nothing
    homes.set_env(home, secrets, remove=no_tls)  # TLS turned off: the edge serves ws://
    homes.write_config(home, config)
    return SetupOutcome(home=home, pairing=pairing, token_source=source, env_keys=sorted(secrets))


def show_pairing(outcome: SetupOutcome, print_fn: PrintFn = print, *, qr: bool = True) -> None:
    uri = outcome.pairing.uri()
    if qr:
        print_fn("Scan this with the app to pair:")
        print_fn(pairing_qr_text(uri))
    print_fn(f"Pairing URI: {uri}")
    print_fn(f"App URL:     {outcome.pairing.ws_url()}")
    print_fn(f"Web client:  {outcome.pairing.web_url()}")


def _overridden() -> list[str]:
    """Shell variables that will win over what setup wrote to config.yaml."""
    shell = environment_values()
    return [name for name in ("ANDROID_WS_HOST", "ANDROID_WS_PORT") if name in shell]


# -- prompting
class _Prompter:
    def __init__(self, input_fn: InputFn, getpass_fn: InputFn, print_fn: PrintFn) -> None:
        self.input = input_fn
        self.getpass = getpass_fn
        self.print = print_fn

    def ask(
        self,
        question: str,
        default: str,
        check: Callable[[str], Any],
        *,
        secret: bool = False,
        blank_ok: bool = False,
    ) -> Any:
        shown = f" [{default}]" if default and not secret else ""
        for _ in range(MAX_TRIES):
            answer = (self.getpass if secret else self.input)(f"{question}{shown}: ").strip()
            if not answer:
                if blank_ok:
                    return None
                answer = default
            try:
                return check(answer)
            except SetupError as exc:
                self.print(f"  {exc}")
        raise SetupError(f"no usable answer to {question!r}")

    def yes(self, question: str, default: bool) -> bool:
        hint = "Y/n" if default else "y/N"
        for _ in range(MAX_TRIES):
            answer = self.input(f"{question} [{hint}]: ").strip().lower()
            if not answer:
                return default
            if answer in ("y", "yes", "n", "no"):
                return answer.startswith("y")
            self.print("  please answer y or n")
        return default


def interactive_setup(
    *,
    home: Path | None = None,
    input_fn: InputFn | None = None,
    getpass_fn: InputFn | None = None,
    print_fn: PrintFn | None = None,
) -> SetupOutcome | None:
    """Hermes' `setup_fn` for the android platform: ask, write, show the pairing code."""
    home = Path(home) if home is not None else homes.default_home()
    print_fn = print_fn or print
    ask = _Prompter(input_fn or input, getpass_fn or getpass.getpass, print_fn)
    try:
        defaults, existing_token = current_choices(home)
    except homes.HomeError as exc:
        print_fn(f"Android setup stopped: {exc}")
        return None
    print_fn("")
    print_fn("─── 📱 Android / device gateway ───")
    print_fn(f"Hermes home: {home}")
    print_fn("Apps connect over WebSocket with a pairing token shown as a QR code.")
    try:
        # Not asked here, so kept as they are: a proxy's port and TLS, the server name.
        choices = SetupChoices(
            public_port=defaults.public_port, public_tls=defaults.public_tls, name=defaults.name
        )
        generated = False
        if existing_token and ask.yes("Keep the current pairing token?", True):
            choices.token = None
        else:
            given = ask.ask(
                f"Pairing token (blank: generate a strong one; at least {MIN_TOKEN_CHARS} chars)",
                "",
                check_token,
                secret=True,
                blank_ok=True,
            )
            generated = given is None
            choices.token = homes.new_token() if given is None else given
        choices.host = ask.ask(
            "Listen address (127.0.0.1: this machine; 0.0.0.0: your LAN)",
            defaults.host,
            check_host,
        )
        choices.port = ask.ask("Port", str(defaults.port), check_port)
        if ask.yes(
            "Serve TLS (wss://) directly with your own certificate?", bool(defaults.tls_cert)
        ):
            choices.tls_cert = ask.ask("TLS certificate (PEM)", defaults.tls_cert or "", check_file)
            choices.tls_key = ask.ask("TLS private key (PEM)", defaults.tls_key or "", check_file)
        derived = _listen_address_shown(choices.host)
        dialed = ask.ask("Address the app dials", defaults.public_host or derived, check_host)
        choices.public_host = None if dialed == derived else dialed
        choices.push = ask.ask("Push backend (none, fcm, ntfy)", defaults.push, check_push)
        if choices.push == "fcm":
            choices.fcm_service_account = ask.ask(
                "Firebase service-account key (JSON file)",
                defaults.fcm_service_account or "",
                check_service_account,
            )
        elif choices.push == "ntfy":
            choices.ntfy_server_url = ask.ask(
                "ntfy server URL", defaults.ntfy_server_url or "https://ntfy.sh", str.strip
            )
            choices.ntfy_topic = ask.ask(
                "ntfy topic (keep it secret)", defaults.ntfy_topic or new_ntfy_topic(), check_host
            )
        outcome = apply_setup(home, choices)
    except (SetupError, homes.HomeError, EOFError, KeyboardInterrupt) as exc:
        print_fn(f"Android setup stopped: {exc or 'cancelled'}")
        return None
    except OSError as exc:  # a home that cannot be created or written
        print_fn(f"Android setup stopped: cannot write the Hermes home {home}: {exc}")
        return None
    if generated:
        outcome.token_source = "generated"
    print_fn(f"Wrote {home / '.env'} ({', '.join(outcome.env_keys)}) and {home / 'config.yaml'}.")
    for name in _overridden():
        print_fn(f"Note: {name} is set in your shell and overrides config.yaml.")
    show_pairing(outcome, print_fn)
    print_fn("Start (or restart) the gateway to apply: hermes gateway run")
    return outcome


__all__ = [
    "SetupChoices",
    "SetupError",
    "SetupOutcome",
    "apply_setup",
    "check_token",
    "current_choices",
    "interactive_setup",
    "pairing_qr_text",
    "show_pairing",
]
