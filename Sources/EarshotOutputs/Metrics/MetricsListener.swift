import Glibc
import EarshotSupport

/// The metrics server's listening TCP socket (kept apart from the libmicrohttpd calls: this file needs only Glibc).
enum MetricsListener {
    /// A socket bound to `endpoint` and listening (backlog 16), close-on-exec, with `SO_REUSEADDR` (and
    /// `IPV6_V6ONLY` for IPv6). The corresponding C functions are `socket`, `bind` and `listen`.
    /// - Throws: see ``MetricsHTTPServer/init(endpoint:body:)``.
    static func listen(on endpoint: MetricsEndpoint) throws(EarshotError) -> Int32 {
        let family = endpoint.isIPv6 ? AF_INET6 : AF_INET
        let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .posix(.system, "cannot create the metrics socket", errno: errno) }
        var one: Int32 = 1
        // A restarted daemon may bind again while the last one's connections sit in TIME_WAIT.
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        if endpoint.isIPv6 { _ = setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, socklen_t(MemoryLayout<Int32>.size)) }
        let bound = withSocketAddress(of: endpoint) { bind(fd, $0, $1) }
        if bound != 0 {
            let code = errno
            close(fd)
            throw EarshotError(.config, "listen = \(endpoint): \(String(cString: strerror(code))) (\(bindAdvice(code)))",
                               cause: String(cString: strerror(code)))
        }
        guard Glibc.listen(fd, 16) == 0 else {
            let code = errno
            close(fd)
            throw .posix(.system, "cannot listen on \(endpoint) for metrics", errno: code)
        }
        return fd
    }

    /// Calls `body` with `endpoint` as a C socket address (`sockaddr_in` or `sockaddr_in6`, its host parsed by
    /// `inet_pton`) and that address's length, and returns what `body` returns.
    private static func withSocketAddress<Result>(
        of endpoint: MetricsEndpoint, _ body: (UnsafePointer<sockaddr>, socklen_t) -> Result
    ) -> Result {
        if endpoint.isIPv6 {
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = in_port_t(UInt16(endpoint.port).bigEndian)
            _ = inet_pton(AF_INET6, endpoint.host, &address.sin6_addr)
            return withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(endpoint.port).bigEndian)
        _ = inet_pton(AF_INET, endpoint.host, &address.sin_addr)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
    }

    /// The response to an HTTP/1.0 `GET path` at `endpoint` (status line, headers and body as text), or nil when
    /// it cannot connect or no complete response comes within `timeoutMilliseconds`. The corresponding C
    /// functions are `connect`, `send`, `poll` and `recv`.
    static func get(_ path: String, from endpoint: MetricsEndpoint, timeoutMilliseconds: Int32) -> String? {
        let family = endpoint.isIPv6 ? AF_INET6 : AF_INET
        let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        let connected = withSocketAddress(of: endpoint) { connect(fd, $0, $1) }
        guard connected == 0 || errno == EINPROGRESS else { return nil }
        var entry = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
        guard poll(&entry, 1, timeoutMilliseconds) == 1 else { return nil }
        var failure: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &failure, &length) == 0, failure == 0 else { return nil }
        let request = Array("GET \(path) HTTP/1.0\r\nHost: \(endpoint)\r\n\r\n".utf8)
        guard request.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }) == request.count else { return nil }
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16_384)
        while response.count < 1 << 20 {
            entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&entry, 1, timeoutMilliseconds) == 1 else { return nil }
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count == 0 { break }  // HTTP/1.0: the server closes after the response
            if count < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                return nil
            }
            response += buffer[0..<count]
        }
        return String(decoding: response, as: UTF8.self)
    }

    /// What to do about a bind(2) failure.
    static func bindAdvice(_ code: Int32) -> String {
        switch code {
        case EADDRINUSE: "another program, or another earshotd, listens there; choose another port"
        case EADDRNOTAVAIL: "no interface of this machine has that address; use 127.0.0.1 or one of its addresses"
        case EACCES, EPERM: "ports below 1024 need privileges; choose a port above 1023"
        default: "check [metrics] listen"
        }
    }

}
