import Glibc
import Synchronization
import EarshotSupport
internal import CMicroHTTPDShims

/// A small HTTP server for `GET /metrics`, on libmicrohttpd's own thread.
///
/// ``init(endpoint:body:)`` binds and listens at once, so that an address in use is one error at start;
/// ``start()`` hands the listening socket to libmicrohttpd, which answers from its internal polling thread:
/// `GET` (or `HEAD`) `/metrics` gets 200 with `body()` as `text/plain; version=0.0.4; charset=utf-8` (Prometheus'
/// text exposition format), another path 404, another method 405. At most ``maxConnections`` (16) connections kept
/// at once, each closed when it has not sent a complete request within ``requestDeadlineSeconds`` (3 s) or after
/// as long without traffic (libmicrohttpd's cap is twice that many). ``stop()`` stops the thread and closes the socket.
///
/// - Important: `body` runs on libmicrohttpd's thread, once per scrape; it must be thread-safe and must not wait
///   for the analysis (the metrics sink copies a snapshot under its lock).
package final class MetricsHTTPServer: @unchecked Sendable {
    // @unchecked: `daemon` and `listenFD` change only in start() and stop(), which the owner calls in order on one
    // queue; libmicrohttpd's thread reads `body` only, a `let`.
    package let endpoint: MetricsEndpoint
    fileprivate let body: @Sendable () -> String
    fileprivate let connections = MetricsConnections(
        maxOpen: MetricsHTTPServer.maxConnections, requestDeadline: .seconds(MetricsHTTPServer.requestDeadlineSeconds))
    private var listenFD: Int32
    private var daemon: OpaquePointer?

    /// The content type of the exposition format.
    package static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    /// Connections kept open at once: 16, the 17th closes the oldest that has not finished its request.
    /// libmicrohttpd's own cap is twice this, room for the connections closed that its thread has not reaped yet.
    package static let maxConnections = 16
    /// Seconds a connection may take to send a complete request (a scrape's request is one packet of about 100
    /// bytes), and seconds without traffic before it is closed: 3.
    package static let requestDeadlineSeconds = 3

    /// Loads libmicrohttpd, binds `endpoint` and listens on it (backlog 16); nothing is answered before ``start()``.
    ///
    /// - Throws: `EarshotError(.unavailable)` when libmicrohttpd cannot be loaded (it is opened with `dlopen` on
    ///   first use: Debian's libmicrohttpd12); `EarshotError(.config)` when the address cannot be bound, e.g.
    ///   `listen = 127.0.0.1:9464: Address already in use (another program, or another earshotd, listens there;
    ///   choose another port)` (the caller puts where the key was set in front); `EarshotError(.system)` when
    ///   socket(2) or listen(2) fails. The corresponding C functions are `dlopen`, `socket`, `bind` and `listen`.
    package init(endpoint: MetricsEndpoint, body: @escaping @Sendable () -> String) throws(EarshotError) {
        if let failure = earshot_mhd_load() {
            let reason = String(cString: failure)
            throw EarshotError(.unavailable, "[metrics] needs libmicrohttpd, which cannot be loaded (\(reason)): install libmicrohttpd12 (apt-get install libmicrohttpd12)",
                               cause: reason)
        }
        self.endpoint = endpoint
        self.body = body
        listenFD = try MetricsListener.listen(on: endpoint)
    }

    /// Starts answering, on libmicrohttpd's thread (at most ``maxConnections`` connections, each closed when it has
    /// not sent a complete request within ``requestDeadlineSeconds``).
    /// - Throws: `EarshotError(.system)` when libmicrohttpd cannot start its thread. The corresponding C function
    ///   is `MHD_start_daemon`.
    package func start() throws(EarshotError) {
        guard daemon == nil, listenFD >= 0 else { return }
        let context = Unmanaged.passUnretained(self).toOpaque()
        guard let started = earshot_mhd_start(
            endpoint.isIPv6 ? 1 : 0, listenFD, UInt32(2 * Self.maxConnections), UInt32(Self.requestDeadlineSeconds),
            metricsRequestHandler, metricsConnectionNotice, metricsRequestFinished, context) else {
            throw EarshotError(.system, "cannot start the metrics server on \(endpoint) (libmicrohttpd refused to start its thread)")
        }
        daemon = started
    }

    /// Stops answering and closes the socket (waits for a scrape in progress). Idempotent. The corresponding C
    /// function is `MHD_stop_daemon` (which closes the listening socket it was given).
    package func stop() {
        if let daemon {
            earshot_mhd_stop(daemon)
            self.daemon = nil
            listenFD = -1
        } else if listenFD >= 0 {
            close(listenFD)
            listenFD = -1
        }
    }

    deinit { stop() }
}

/// libmicrohttpd's access handler: one call per request (GET has no body to wait for).
private func metricsRequestHandler(
    _ context: UnsafeMutableRawPointer?, _ connection: OpaquePointer?, _ url: UnsafePointer<CChar>?,
    _ method: UnsafePointer<CChar>?, _ version: UnsafePointer<CChar>?, _ uploadData: UnsafePointer<CChar>?,
    _ uploadSize: UnsafeMutablePointer<Int>?, _ requestContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> MHD_Result {
    guard let context, let connection else { return .NO }
    let server = Unmanaged<MetricsHTTPServer>.fromOpaque(context).takeUnretainedValue()
    server.connections.requestArrived(UInt(bitPattern: connection))
    let path = url.map { String(cString: $0) } ?? ""
    let verb = method.map { String(cString: $0) } ?? ""
    let status: UInt32
    let text: String
    var contentType = "text/plain; charset=utf-8"
    if verb != "GET" && verb != "HEAD" {
        status = 405
        text = "method not allowed: use GET /metrics\n"
    } else if path != "/metrics" {
        status = 404
        text = "not found: the metrics are at /metrics\n"
    } else {
        status = 200
        text = server.body()
        contentType = MetricsHTTPServer.contentType
    }
    var bytes = Array(text.utf8)
    let response = bytes.withUnsafeMutableBytes { raw in
        earshot_mhd_copied_response(raw.count, raw.baseAddress)
    }
    guard let response else { return .NO }
    defer { earshot_mhd_destroy_response(response) }
    _ = earshot_mhd_add_header(response, "Content-Type", contentType)
    if status == 405 { _ = earshot_mhd_add_header(response, "Allow", "GET, HEAD") }
    return earshot_mhd_queue_response(connection, status, response)
}

/// libmicrohttpd's connection notice: a connection accepted, or about to be closed (before its descriptor is).
private func metricsConnectionNotice(
    _ context: UnsafeMutableRawPointer?, _ connection: OpaquePointer?,
    _ socketContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, _ code: MHD_ConnectionNotificationCode
) {
    guard let context, let connection else { return }
    let server = Unmanaged<MetricsHTTPServer>.fromOpaque(context).takeUnretainedValue()
    let key = UInt(bitPattern: connection)
    switch code {
    case .CONNECTION_NOTIFY_STARTED:
        server.connections.opened(key, descriptor: earshot_mhd_connection_fd(connection))
    case .CONNECTION_NOTIFY_CLOSED:
        server.connections.closed(key)
    default:
        break
    }
}

/// libmicrohttpd's request-completed notice: the response is finished (sent, or the connection failed).
private func metricsRequestFinished(
    _ context: UnsafeMutableRawPointer?, _ connection: OpaquePointer?,
    _ requestContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, _ code: MHD_RequestTerminationCode
) {
    guard let context, let connection else { return }
    let server = Unmanaged<MetricsHTTPServer>.fromOpaque(context).takeUnretainedValue()
    server.connections.requestFinished(UInt(bitPattern: connection))
}
