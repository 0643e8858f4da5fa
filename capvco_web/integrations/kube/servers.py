"""Where a kubeconfig's credential may be sent: the allow-list of Kubernetes API servers.

An entry (of `KUBE_ALLOWED_HOSTS`) is one of:

* a host name or address, `api.example.com`, `10.0.0.5`, `[fd00::5]`: https to that host,
  any port;
* a domain with a leading dot, `.k8s.example.com`: https to any host under it (not to the
  domain itself), any port;
* `https://host:port`: https to that port only;
* `http://host:port`: plain http to exactly that origin (a simulator on 127.0.0.1);
* an address range, `10.20.0.0/16`, `fd00::/8`: https to any address of it, any port.

A URL must name a listed origin (no user or password in it, no other scheme). Then the
address connected to must be public, or named by an entry: as its host (`10.0.0.5`,
`http://127.0.0.1:8082`) or in its range. The client resolves the name itself and connects
to the address it checked (`address_refusal`), so a listed name that resolves, or is made
to resolve (DNS rebinding), to a private, loopback, link-local or other non-public address
reaches it only where the operator named that address or range.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import replace

from capvco_web.integrations.origins import Origin, UrlRefused, netloc, origin_read, url_origin

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class AllowedServers:
    """The Kubernetes API servers a kubeconfig may name, and the addresses the client may
    connect to. `source` names the list in messages (the setting it was read from)."""

    def __init__(self, entries: Iterable[str], *, source: str = "KUBE_ALLOWED_HOSTS") -> None:
        self.source = source
        origins: list[Origin] = []
        domains: list[str] = []
        networks: list[tuple[Network, int | None, bool]] = []
        shown: list[str] = []
        for text in entries:
            if text.strip():
                shown.append(_entry_read(text.strip(), source, origins, domains, networks))
        self._origins = tuple(origins)
        self._domains = tuple(domains)
        self._networks = tuple(networks)
        self._shown = tuple(shown)

    @property
    def entries(self) -> tuple[str, ...]:
        """The entries, normalised."""
        return self._shown

    def __repr__(self) -> str:
        return f"AllowedServers({list(self.entries)!r}, source={self.source!r})"

    def refusal(self, url: str) -> str | None:
        """Why a kubeconfig's credential may not be sent to `url`, or None when it may."""
        try:
            scheme, host, port = url_origin(
                url,
                not_a_url="not a URL with a port from 0 to 65535",
                bad_port="not a URL with a port from 0 to 65535",
                use_https="use https (https://host:port)",
            )
        except UrlRefused as refused:
            return str(refused)
        host = _canonical(host)
        if any(origin.allows(scheme, host, port) for origin in self._origins):
            return None
        if scheme == "https" and any(host.endswith(f".{domain}") for domain in self._domains):
            return None
        address = _address(host)
        if scheme == "https" and address is not None and self._in_range(address):
            return None
        if scheme == "http":
            return (
                f"http://{netloc(host, port)} is not in {self.source} (plain http is allowed "
                "only to an origin listed as http://host:port; use https)"
            )
        if not self._origins and not self._domains and not self._networks:
            return (
                f"{host} is not in {self.source} ({self.source} is empty: list the "
                "Kubernetes API servers the control plane may reach)"
            )
        return f"{host} is not in {self.source}"

    def address_refusal(self, address: str, port: int) -> str | None:
        """Why the client may not connect to `address` (as resolved) on `port`, or None
        when it may: a public address, or one an entry names (with that port, if it
        names one)."""
        found = _address(address.partition("%")[0])  # without an IPv6 zone
        if found is None:
            return f"{address} is not an IP address"
        if self._named(found, port):
            return None
        if _public(found):
            return None
        return (
            f"{found} is not a public address (private, loopback, link-local or reserved): "
            f"name it, or its range, in {self.source} to allow it"
        )

    def _in_range(self, address: Address) -> bool:
        """Whether a range entry (`10.20.0.0/16`) holds `address`."""
        return any(address in network for network, _, ranged in self._networks if ranged)

    def _named(self, address: Address, port: int) -> bool:
        """Whether an entry names `address`: a range holds it, or an entry's host is it
        (with that port, when the entry names one)."""
        return any(
            address in network and only in (None, port) for network, only, _ in self._networks
        )


def _entry_read(
    entry: str,
    source: str,
    origins: list[Origin],
    domains: list[str],
    networks: list[tuple[Network, int | None, bool]],
) -> str:
    """Read one entry into `origins`, `domains` (of `.domain` entries) and `networks`;
    answers it normalised."""
    problem = (
        f"{source}: {entry!r} is not a host name, a .domain, an http(s)://host:port origin "
        "or an address range"
    )
    if "*" in entry or any(c.isspace() for c in entry):
        raise ValueError(f"{problem} (no wildcards: list a .domain or a range)")
    if "/" in entry and "://" not in entry:
        try:
            network = _unmapped_network(ipaddress.ip_network(entry, strict=True))
        except ValueError:
            raise ValueError(f"{problem} (a range such as 10.20.0.0/16)") from None
        networks.append((network, None, True))
        return str(network)
    if entry.startswith("."):
        domain = entry[1:].rstrip(".").lower()
        if not domain or _address(domain) is not None or "/" in domain or ":" in domain:
            raise ValueError(problem)
        domains.append(domain)
        return f".{domain}"
    origin = origin_read(entry, problem)
    origin = replace(origin, host=_canonical(origin.host))
    origins.append(origin)
    address = _address(origin.host)
    if address is not None:  # an address named as a host may be connected to, so
        networks.append((ipaddress.ip_network(address), origin.port, False))
    return str(origin)


def _canonical(host: str) -> str:
    """`host`, an address written as Python writes it (an IPv4-mapped one as IPv4)."""
    address = _address(host)
    return str(address) if address is not None else host


def _address(text: str) -> Address | None:
    """`text` as an IP address (an IPv4-mapped IPv6 one as its IPv4 address), else None."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")


def _public(address: Address) -> bool:
    """Globally reachable, and so is any IPv4 address it carries (6to4, NAT64, the old
    IPv4-compatible form), which Python's `is_global` does not look into."""
    if not address.is_global or address.is_multicast:
        return False
    if isinstance(address, ipaddress.IPv6Address):
        carried = address.sixtofour
        if address in _NAT64 or address in _IPV4_COMPATIBLE:
            carried = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if carried is not None:
            return _public(carried)
    return True


def _unmapped_network(network: Network) -> Network:
    if isinstance(network, ipaddress.IPv6Network) and network.network_address.ipv4_mapped:
        raise ValueError("an IPv4-mapped range: write it as IPv4")
    return network
