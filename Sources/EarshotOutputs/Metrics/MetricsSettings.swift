import Glibc
import EarshotSupport

/// Serving Prometheus metrics over HTTP (`GET /metrics`): `[metrics]`. Off by default.
package struct MetricsSettings: Sendable, Equatable {
    /// Whether the daemon serves `/metrics`. Key `enabled`, default false.
    package var enabled = false
    /// The address and TCP port to listen on. Key `listen`, `HOST:PORT` with HOST an IPv4 address, `[IPv6]` or
    /// `localhost` (127.0.0.1), PORT 1...65535; default `127.0.0.1:9464` (the port Prometheus' list of exporter
    /// ports gives OpenTelemetry-style exporters; nothing else of a home server usually takes it).
    package var listen = MetricsEndpoint.defaultEndpoint
    /// Whether a `listen` address other than a loopback one (127.0.0.0/8, ::1) is allowed: the metrics (levels,
    /// which groups fire) would be readable by anyone on the network. Key `allow_remote`, default false.
    package var allowRemote = false

    package init() {}

    /// The keys of `[metrics]`, in the order `config/earshotd.conf` documents them.
    package static let keys = ["enabled", "listen", "allow_remote"]

    /// Sets one `[metrics]` key; returns what is allowed ("must be ...") when `value` is bad.
    package mutating func set(key: String, value: String) -> String? {
        switch key {
        case "enabled", "allow_remote":
            guard let flag = SettingRules.flag.parse(value) else { return SettingRules.flag.requirement }
            if key == "enabled" { enabled = flag } else { allowRemote = flag }
        case "listen":
            guard let endpoint = MetricsEndpoint(value) else { return MetricsEndpoint.requirement }
            listen = endpoint
        default:
            return "is not a known key (report this as a bug)"
        }
        return nil
    }

    /// Why ``listen`` may not be used as it stands, or nil: a non-loopback address without ``allowRemote``.
    package var remoteProblem: String? {
        guard !listen.isLoopback, !allowRemote else { return nil }
        return "listen = \(listen): not a local address, so anyone on the network could read the metrics (use 127.0.0.1:\(listen.port) or [::1]:\(listen.port), or set allow_remote = true in [metrics])"
    }
}

/// An address and TCP port to listen on: `127.0.0.1:9464`, `[::1]:9464`, `0.0.0.0:9464`, `localhost:9464`.
package struct MetricsEndpoint: Sendable, Equatable, CustomStringConvertible {
    /// The address as written (`localhost` becomes `127.0.0.1`), without brackets.
    package var host: String
    /// TCP port, 1...65535.
    package var port: Int
    /// Whether ``host`` is an IPv6 address.
    package var isIPv6: Bool

    package static let defaultEndpoint = MetricsEndpoint("127.0.0.1:9464")!
    package static let requirement = "must be HOST:PORT with an IPv4 address, [IPv6] or localhost and a port in [1, 65535], e.g. 127.0.0.1:9464"

    /// Parses `HOST:PORT`; nil when it is not one (a host name other than `localhost` is refused: the daemon binds
    /// before any name service may be up).
    package init?(_ text: String) {
        let host: Substring
        let portText: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else { return nil }
            host = text[text.index(after: text.startIndex)..<close]
            portText = text[text.index(close, offsetBy: 2)...]
        } else {
            guard let colon = text.lastIndex(of: ":") else { return nil }
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
        }
        guard let port = Int(portText), (1...65_535).contains(port), portText.allSatisfy(\.isASCII) else { return nil }
        let name = host == "localhost" ? "127.0.0.1" : String(host)
        var v4 = in_addr()
        var v6 = in6_addr()
        if !text.hasPrefix("["), inet_pton(AF_INET, name, &v4) == 1 {
            isIPv6 = false
        } else if text.hasPrefix("["), inet_pton(AF_INET6, name, &v6) == 1 {
            isIPv6 = true
        } else {
            return nil
        }
        self.host = name
        self.port = port
    }

    /// Whether the address is a loopback one: 127.0.0.0/8 or ::1 (also ::ffff:127.x.y.z).
    package var isLoopback: Bool {
        if isIPv6 {
            var address = in6_addr()
            guard inet_pton(AF_INET6, host, &address) == 1 else { return false }
            let bytes = withUnsafeBytes(of: &address) { Array($0) }
            if bytes[0..<15].allSatisfy({ $0 == 0 }) && bytes[15] == 1 { return true }
            let mapped = bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xFF && bytes[11] == 0xFF
            return mapped && bytes[12] == 127
        }
        return host.hasPrefix("127.")
    }

    package var description: String { isIPv6 ? "[\(host)]:\(port)" : "\(host):\(port)" }
}
