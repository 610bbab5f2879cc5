"""The host's pip settings as the image build's `pipconf` secret (deploy/check/containers.sh).

    python3 deploy/check/pipconf.py OUT.conf    # writes OUT.conf; prints the CA bundle's host path, if any

Reads what pip itself reads on this machine (`pip config list`: its configuration files and PIP_*
variables) and keeps what a build container can use: index URLs reached over the network, trusted hosts,
a proxy, timeouts and retries. Local paths (find-links, constraint files, file:// indexes) are dropped:
they do not exist inside the build. A CA bundle (`cert`) becomes `cert = /run/secrets/ca`, the path the
Dockerfile mounts the `ca` secret at, and its host path is printed for that secret. The output lies
outside the repository (the script's work directory), so no machine's settings are ever committed.
"""

import ast
import subprocess
import sys
from pathlib import Path

KEPT = {"index-url", "extra-index-url", "trusted-host", "proxy", "timeout", "retries"}
ALIASES = {"default-timeout": "timeout"}
"""pip's environment spelling of a key that its files spell otherwise (PIP_DEFAULT_TIMEOUT)."""
CA_IN_BUILD = "/run/secrets/ca"


def host_settings() -> dict[str, str]:
    """key -> value as pip resolves them: later scopes (user, site, environment) override earlier ones."""
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], check=True, capture_output=True, text=True
    ).stdout
    settings = {}
    for line in listing.splitlines():
        name, _, value = line.partition("=")
        key = name.split(".", 1)[1]
        settings[ALIASES.get(key, key)] = ast.literal_eval(value)
    return settings


def remote(value: str) -> str:
    """The URLs of a whitespace-separated list that a container can reach (not file: or a local path)."""
    return " ".join(url for url in value.split() if url.startswith(("http://", "https://")))


def main() -> int:
    out = Path(sys.argv[1])
    settings = host_settings()
    kept = {key: value for key, value in settings.items() if key in KEPT}
    for key in ("index-url", "extra-index-url"):
        kept[key] = remote(kept.get(key, ""))
    kept = {key: value for key, value in kept.items() if value}
    ca = settings.get("cert", "")
    if ca and Path(ca).is_file():
        kept["cert"] = CA_IN_BUILD
        print(ca)
    out.write_text("[global]\n" + "".join(f"{key} = {value}\n" for key, value in sorted(kept.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
